"""`nccl-ras`: NCCL's own RAS report names the ranks and processes the job lost, with their node, GPU and pid.

From nccl-ras signatures: the text `ncclras` prints (NCCL >= 2.24), pasted into a log given to the report,
or what watch asked RAS at a hang (hang-N.json `nccl_ras`, supervisor/hang.py)
(logs/nccl_ras.py reads it; `ncclras -m`'s PEER_DEAD lines too). Every report of the inputs is combined
into one finding. Critical when a report names a dead process (RAS could not reach it for 60 s), a job
process or a communicator's rank that gave no data (INCOMPLETE: hung, stopped or gone), or a rank that
reported an NCCL error; a warning when ranks are only out of step (MISMATCH: they launched different
numbers of collectives, or report different statuses; often transient, stuck when repeated queries show
the same counts). A report that says RUNNING / OK everywhere gives no finding.

RAS numbers ranks inside their communicator. `ranks` holds global ranks only where that is sure: the
communicator spans every GPU of the job (its size is the job summary's GPU count or the run's world
size), or exactly one rank header of the run has the process's pid.

Evidence keys: `verdict` ("dead", "incomplete", "error", "mismatch"), `missing_ranks` ([{"comm" (e.g.
"#0-0"), "hash", "comm_size", "rank" (in the communicator), "global_rank", "node", "pid", "gpu",
"detail"}]), `dead_processes` / `missing_processes` ([{"node", "pid", "gpus"}]), `num_dead_processes`,
`num_missing_processes` (the counts RAS printed), `error_ranks` (like missing_ranks, `detail` the error),
`mismatch` ({"comm", "hash", "comm_size", "what" (what differs), "ranks": [like missing_ranks]}, or None),
`communicators` (labels / hashes of the communicators with a problem), `nccl_versions`, `timeouts` (RAS's
own timeouts while gathering), `num_reports`, `sources` (log files).
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from grpo_doctor.analysis.findings import Finding
from grpo_doctor.analysis.views import RunView, View
from grpo_doctor.logs.kinds import NCCL_RAS
from grpo_doctor.logs.nccl_ras import RasCommunicator, RasRank, RasReport, parse

ID = "nccl-ras"
READS = {View.LOG_SIGNATURES, View.RANKS, View.WATCH_ARTIFACTS}

HINT_LOST = ("NCCL's RAS lost the process named here: it crashed, was killed (the OOM killer, Slurm, a failed "
             "node) or is frozen (stopped, stuck in a driver call). On that node read `dmesg -T | grep -iE "
             "'xid|oom|killed'` and the process's last output; if it is still alive, `py-spy dump --pid PID` shows "
             "where it waits. The other ranks only wait for it in their next collective until the timeout.")
HINT_DEAD = ("RAS declares a process dead after 60 s without contact and never takes it back: stop the job (the "
             "others can only time out), check or drain that node, and restart from the last checkpoint.")
HINT_ERROR = ("A rank reported an NCCL error to RAS: the nccl-error finding and that rank's log (NCCL_DEBUG=WARN) "
              "say which call failed.")
HINT_MISMATCH = ("Ranks out of step (different numbers of launched collectives, or different statuses) are normal "
                 "for a moment while collectives run: query again (`ncclras` a few times, seconds apart). Counts "
                 "that stay the same mean the ranks behind are stuck; counts that move mean a straggler (the "
                 "straggler finding, from phase records, names it).")
HINTS = (HINT_LOST, HINT_DEAD, HINT_ERROR, HINT_MISMATCH)


@dataclass(frozen=True)
class Config:
    max_listed: int = 32  # ranks / processes listed per evidence key (the counts stay exact)
    title_listed: int = 3  # ranks / processes named in the title


def check(run: RunView, cfg: Config) -> Iterator[Finding]:
    rows = [row for row in run.signature_rows if row["kind"] == NCCL_RAS and isinstance(row.get("fields"), dict)]
    reports = [RasReport.from_dict(row["fields"]) for row in rows] + _asked_by_watch(run)
    if not reports:
        return
    world = run.world_size
    pid_ranks = _ranks_by_pid(run)
    missing: dict[tuple, dict[str, Any]] = {}
    errors: dict[tuple, dict[str, Any]] = {}
    dead: dict[tuple, dict[str, Any]] = {}
    lost: dict[tuple, dict[str, Any]] = {}
    problems: dict[str, None] = {}
    mismatch: dict[str, Any] | None = None
    num_dead = num_missing = 0
    for report in reports:
        for comm in report.communicators:
            if comm.problems:
                problems[comm.label or comm.hash or "?"] = None
            for rank in comm.missing:
                _keep(missing, (comm.hash, comm.label, rank.rank), _rank_entry(comm, rank, report, world, pid_ranks))
            for rank in comm.errors:
                _keep(errors, (comm.hash, comm.label, rank.rank), _rank_entry(comm, rank, report, world, pid_ranks))
            if comm.mismatched or comm.mismatch:
                mismatch = {"comm": comm.label, "hash": comm.hash, "comm_size": comm.size, "what": comm.mismatch,
                            "ranks": [_rank_entry(comm, r, report, world, pid_ranks) for r in comm.mismatched]}
        for proc in report.dead_processes:
            _keep(dead, (proc.node, proc.pid), {"node": proc.node, "pid": proc.pid, "gpus": list(proc.gpus)})
        for proc in report.missing_processes:
            _keep(lost, (proc.node, proc.pid), {"node": proc.node, "pid": proc.pid, "gpus": list(proc.gpus)})
        num_dead = max(num_dead, report.num_dead_processes or 0, len(report.dead_processes))
        num_missing = max(num_missing, report.num_missing_processes or 0, len(report.missing_processes))
    for key in dead:
        lost.pop(key, None)  # one process: first without data, then dead
    verdicts = [r.verdict for r in reports]
    verdict = next((v for v in ("dead", "incomplete", "error", "mismatch") if v in verdicts), None)
    if verdict is None:
        return
    critical = verdict != "mismatch"
    named = list(missing.values()) + list(errors.values())
    if not critical and mismatch is not None:
        named = list(mismatch["ranks"])
    ranks = tuple(sorted({e["global_rank"] for e in named if e["global_rank"] is not None}))
    hosts = tuple(dict.fromkeys(n for n in [*(d["node"] for d in dead.values()), *(d["node"] for d in lost.values()),
                                             *(e["node"] for e in named)] if n))
    evidence = {
        "verdict": verdict,
        "missing_ranks": list(missing.values())[:cfg.max_listed],
        "dead_processes": list(dead.values())[:cfg.max_listed],
        "missing_processes": list(lost.values())[:cfg.max_listed],
        "num_dead_processes": num_dead, "num_missing_processes": num_missing,
        "error_ranks": list(errors.values())[:cfg.max_listed],
        "mismatch": mismatch if verdict == "mismatch" else None,
        "communicators": list(problems)[:cfg.max_listed],
        "nccl_versions": sorted({r.nccl_version for r in reports if r.nccl_version}),
        "timeouts": max((r.timeouts or 0 for r in reports), default=0),
        "num_reports": len(reports),
        "sources": sorted({str(row.get("source")) for row in rows if row.get("source")}),
    }
    if critical:
        hints = tuple(h for h, wanted in ((HINT_LOST, bool(dead or lost or missing)), (HINT_DEAD, bool(dead)),
                                          (HINT_ERROR, bool(errors))) if wanted) or (HINT_LOST,)
    else:
        hints = (HINT_MISMATCH,)
    yield Finding(id=ID, severity="critical" if critical else "warning",
                  title=_title(verdict, dead, lost, missing, errors, mismatch, cfg.title_listed),
                  ranks=ranks, hosts=hosts, evidence=evidence, hints=hints)


def _asked_by_watch(run: RunView) -> list[RasReport]:
    """The reports watch got from NCCL's RAS while it investigated a hang (hang-N.json's `nccl_ras`)."""
    out = []
    for hang in run.hangs:
        raw = (hang.nccl_ras or {}).get("raw")
        if isinstance(raw, str) and (report := parse(raw)) is not None:
            out.append(report)
    return out


def _title(verdict: str, dead: dict, lost: dict, missing: dict, errors: dict, mismatch: dict | None, n: int) -> str:
    parts: list[str] = []
    if dead:
        procs = ", ".join(_process_text(p) for p in list(dead.values())[:n])
        parts.append(f"dead (unreachable): {procs}" + _more(len(dead), n))
    if missing:
        by_comm: dict[str, list[dict[str, Any]]] = {}
        for entry in missing.values():
            by_comm.setdefault(_comm_text(entry), []).append(entry)
        for comm, entries in list(by_comm.items())[:2]:
            ranks = ", ".join(_rank_text(e) for e in entries[:n])
            parts.append(f"no data from {ranks}{_more(len(entries), n)} of {comm}")
    if lost and (not missing or any(e["node"] is None for e in missing.values())):
        procs = ", ".join(_process_text(p) for p in list(lost.values())[:n])
        parts.append(f"no data from {procs}" + _more(len(lost), n))
    if errors:
        ranks = ", ".join(_rank_text(e) + (f": {e['detail']}" if e["detail"] else "") for e in list(errors.values())[:n])
        parts.append(f"NCCL error on {ranks}" + _more(len(errors), n))
    if verdict == "mismatch" and mismatch is not None:
        ranks = ", ".join(_rank_text(e) + (f" {e['detail']}" if e["detail"] else "") for e in mismatch["ranks"][:n])
        what = mismatch["what"] or "state"
        parts.append(f"ranks of {_comm_text(mismatch)} differ in {what}" + (f": {ranks}" if ranks else "")
                     + _more(len(mismatch["ranks"]), n) + " (stuck if repeated queries agree)")
    return "NCCL RAS: " + ("; ".join(parts) or verdict)


def _rank_entry(comm: RasCommunicator, rank: RasRank, report: RasReport, world: int | None,
                pid_ranks: dict[int, int]) -> dict[str, Any]:
    return {"comm": comm.label, "hash": comm.hash, "comm_size": comm.size, "rank": rank.rank,
            "global_rank": _global_rank(comm, rank, report, world, pid_ranks), "node": rank.node, "pid": rank.pid,
            "gpu": rank.gpu, "detail": rank.detail}


def _global_rank(comm: RasCommunicator, rank: RasRank, report: RasReport, world: int | None,
                 pid_ranks: dict[int, int]) -> int | None:
    if rank.pid is not None and rank.pid in pid_ranks:
        return pid_ranks[rank.pid]
    if comm.size is not None and comm.size in (report.num_gpus, world):
        return rank.rank  # the communicator of every GPU: its ranks are the global ranks
    return None


def _ranks_by_pid(run: RunView) -> dict[int, int]:
    """pid -> global rank, for pids exactly one rank header has (pids repeat across hosts)."""
    seen: dict[int, list[int]] = {}
    for rank, header in run.headers.items():
        if isinstance(header.pid, int):
            seen.setdefault(header.pid, []).append(rank)
    return {pid: ranks[0] for pid, ranks in seen.items() if len(ranks) == 1}


def _keep(entries: dict[tuple, dict[str, Any]], key: tuple, entry: dict[str, Any]) -> None:
    """The entry under `key`; a later report's wins where it says more (node, pid), and a later verdict."""
    old = entries.get(key)
    if old is None or sum(v is not None for v in entry.values()) >= sum(v is not None for v in old.values()):
        entries[key] = entry


def _rank_text(entry: dict[str, Any]) -> str:
    process = " ".join(p for p in (f"pid {entry['pid']}" if entry["pid"] is not None else "",
                                   f"on {entry['node']}" if entry["node"] else "") if p)
    where = ", ".join(p for p in (f"GPU {entry['gpu']}" if entry["gpu"] is not None else "", process) if p)
    return f"rank {entry['rank']}" + (f" ({where})" if where else "")


def _process_text(proc: dict[str, Any]) -> str:
    gpus = f" GPU {','.join(str(g) for g in proc['gpus'])}" if proc["gpus"] else ""
    return f"process {proc['pid']} on {proc['node']}{gpus}"


def _comm_text(entry: dict[str, Any]) -> str:
    name = entry.get("comm") or (f"communicator {entry['hash']}" if entry.get("hash") else "a communicator")
    size = entry.get("comm_size")
    return f"{name} ({size} ranks)" if size else name


def _more(count: int, shown: int) -> str:
    return f" and {count - shown} more" if count > shown else ""
