"""`nccl-timeout`: the NCCL watchdog gave up on a collective (WorkNCCL(SeqNum=...) ran for ... ms).

Reports are grouped by process group. Same sequence number on every reporting rank: they all
entered that collective and waited for someone; the ranks known to the run that did not report
are the likely stuck ones (a rank whose watchdog status line names the same sequence number reports
too, in whatever wording). Different sequence numbers: the ranks are desynchronised (they issued
different numbers of collectives), usually because they took different code paths.

Evidence keys: `seq` (lowest reported), `op`, `numel_in`, `numel_out`, `timeout_ms`, `ran_for_ms`
(longest), `ranks` (reporting), `absent_ranks` (known but not reporting), `seqs` ({rank: seq}),
`desync` (bool), `pg` (the process group's id as NCCL prints it, an int, None when the message names
none), `pg_desc` (its description, e.g. "default_pg", a str or None), `last_enqueued` /
`last_completed` (the first reporting rank's own count from the watchdog status line: "Timeout at
NCCL work: N, last enqueued NCCL work: M, last completed NCCL work: K"), `last_completed_by_rank`
({rank: K}), `stuck_s` (the heartbeat monitor's "watchdog got stuck for N seconds").

A status line alone ("Timeout at NCCL work: ...", "Received a dump signal due to a collective
timeout ...") is a timeout report too. When only the heartbeat monitor spoke ("ProcessGroupNCCL's
watchdog got stuck for N seconds", "Heartbeat monitor timed out!", "Terminating the process after
attempting to dump debug info ..."), the finding names the ranks it stopped; evidence `stuck_s`,
`ranks`, `pg`, `pg_desc`, `terminated`.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from grpo_doctor.analysis import remedies
from grpo_doctor.analysis.findings import Finding
from grpo_doctor.analysis.launch_settings import differing_settings
from grpo_doctor.analysis.views import RunView, View
from grpo_doctor.logs.kinds import NCCL_TIMEOUT, NCCL_WATCHDOG_STATUS, NCCL_WATCHDOG_STUCK
from grpo_doctor.schema.ranks import format_ranks

ID = "nccl-timeout"
READS = {View.LOG_SIGNATURES, View.PROBE_RESULTS, View.RANKS}

HINT_ABSENT = ("The ranks that did not report never reached this collective: look at what they were doing "
               "(their last phase and stack; run under `grpo-doctor watch` to capture stacks at the hang).")
HINT_DESYNC = ("Ranks disagree on the collective's sequence number (desync): they issued different numbers of "
               "collectives, so they took different code paths: a collective inside rank-conditional code (`if rank "
               "== 0:` logging, evaluation, saving, generation), or uneven data per rank (one rank runs out of "
               "batches first: drop_last, equal samples per rank).")
HINT_LAUNCH = remedies.LAUNCH_IDENTICAL  # only where the evidence shows settings differing between nodes
HINT_FR = remedies.FLIGHT_RECORDER + " to get flight-recorder dumps naming the missing rank and mismatched collectives."
HINT_TIMEOUT = ("If one rank legitimately works longer than the timeout (vLLM generation, evaluation or checkpoint "
                "saving on rank 0), raise the timeout above that wait; " + remedies.COLLECTIVE_TIMEOUTS + ".")
HINT_STUCK = ("The watchdog thread itself was blocked (a CUDA or NCCL call that never returned, or a thread holding "
              "the GIL inside one), so the heartbeat monitor aborted the process: take py-spy stacks of the ranks "
              "while stuck (`grpo-doctor watch` does) to see the blocking call; TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC "
              "only delays the abort.")
HINTS = (HINT_ABSENT, HINT_DESYNC, HINT_LAUNCH, HINT_FR, HINT_TIMEOUT, HINT_STUCK)


def timeout_hint(timeout_ms: int | None) -> str:
    """The timeout remedy, starting from the timeout this job ran with where the log states it."""
    return HINT_TIMEOUT if not timeout_ms else f"This job's collective timeout was {timeout_ms / 1000:g} s. " + HINT_TIMEOUT


@dataclass(frozen=True)
class Config:
    pass  # every watchdog timeout is a finding


def check(run: RunView, cfg: Config) -> Iterator[Finding]:
    by_pg: dict[tuple, dict[int | None, dict]] = {}  # (pg id, pg description) -> rank -> its timeout report
    status: dict[int | None, dict] = {}  # rank -> its watchdog status line
    stuck: dict[int | None, dict] = {}  # rank -> its heartbeat monitor's line
    for row in run.signature_rows:
        kind, f = row["kind"], row["fields"]
        rank = row["rank"] if row["rank"] is not None else f.get("rank")
        if kind == NCCL_TIMEOUT:
            by_pg.setdefault(_pg_key(f), {}).setdefault(rank, f)
        elif kind == NCCL_WATCHDOG_STATUS:
            status.setdefault(rank, f)
        elif kind == NCCL_WATCHDOG_STUCK and (rank not in stuck or f.get("stuck_s") is not None):
            stuck[rank] = f
    if not by_pg:  # "Timeout at NCCL work: N, ...", a dump signal's status: a timeout without its WorkNCCL line
        for rank, f in status.items():
            by_pg.setdefault(_pg_key(f), {}).setdefault(rank, f)
    if not by_pg and stuck:
        yield _stuck_finding(run, stuck)
    for (pg, pg_desc), reports in by_pg.items():
        # A rank whose own status line names one of these sequence numbers ("[PG 1 Rank 3] Exception ...
        # detected by watchdog at work: 1580") was in the collective too: it reports, it is not absent.
        reported_seqs = {f.get("seq") for f in reports.values()} - {None}
        for rank, f in status.items():
            if rank is not None and rank not in reports and f.get("seq") in reported_seqs \
                    and (pg is None or f.get("pg") is None or f.get("pg") == pg):
                reports[rank] = {**f, "op": None}
        reporting = sorted(r for r in reports if r is not None)
        seqs = {r: f.get("seq") for r, f in reports.items() if r is not None}
        desync = len(set(seqs.values())) > 1
        first_rank = min(seqs, key=lambda r: seqs[r] or 0) if seqs else next(iter(reports))
        first = reports[first_rank]
        absent = sorted(run.known_ranks - set(reporting)) if pg in (None, 0) or pg_desc == "default_pg" else []
        ran_for = [f["ran_for_ms"] for f in reports.values() if f.get("ran_for_ms") is not None]
        op = first.get("op")
        own = status.get(first_rank) or next((status[r] for r in reports if r in status), None) or {}
        if desync:
            title = (f"NCCL timeout with desynchronised ranks: sequence numbers "
                     f"{', '.join(f'rank {r}: {s}' for r, s in sorted(seqs.items()))}")
            launch = (HINT_LAUNCH,) if differing_settings(run.headers, run.probe) else ()
            hints = (HINT_DESYNC, *launch, HINT_FR, timeout_hint(first.get("timeout_ms")))
        else:
            what = f"NCCL {op or 'collective'}" + (f" #{first.get('seq')}" if first.get("seq") is not None else "")
            title = f"{what} timed out on rank(s) {format_ranks(reporting) or '?'}"
            if absent:
                title += f"; rank(s) {format_ranks(absent)} never joined it"
            hints = ((HINT_ABSENT,) if absent else ()) + (HINT_FR, timeout_hint(first.get("timeout_ms")))
        named = absent or reporting
        hosts = sorted({h for h in map(run.host_of, named) if h})
        yield Finding(
            id=ID, severity="critical", title=title, ranks=tuple(named), hosts=tuple(hosts), step=None, phase=None,
            evidence={"seq": first.get("seq"), "op": op, "numel_in": first.get("numel_in"),
                      "numel_out": first.get("numel_out"), "timeout_ms": first.get("timeout_ms"),
                      "ran_for_ms": max(ran_for) if ran_for else None, "ranks": reporting, "absent_ranks": absent,
                      "seqs": seqs, "desync": desync, "pg": pg, "pg_desc": pg_desc,
                      "last_enqueued": own.get("last_enqueued"), "last_completed": own.get("last_completed"),
                      "last_completed_by_rank": {r: f.get("last_completed") for r, f in status.items()
                                                 if r in reports and r is not None},
                      "stuck_s": max((f["stuck_s"] for f in stuck.values() if f.get("stuck_s")), default=None)},
            hints=hints,
        )


def _pg_key(fields: dict) -> tuple[int | None, str | None]:
    return fields.get("pg"), fields.get("pg_desc")


def _stuck_finding(run: RunView, stuck: dict[int | None, dict]) -> Finding:
    """Only the heartbeat monitor spoke: the watchdog thread itself was blocked (in a CUDA / NCCL
    call, or behind the GIL) and the process is aborted after trying to dump its debug info."""
    ranks = sorted(r for r in stuck if r is not None)
    seconds = max((f["stuck_s"] for f in stuck.values() if f.get("stuck_s")), default=None)
    first = stuck[ranks[0]] if ranks else next(iter(stuck.values()))
    title = ("NCCL watchdog stuck" + (f" for {seconds} s" if seconds else "") + " on rank(s) "
             + (format_ranks(ranks) or "?") + ": the heartbeat monitor aborts the process")
    hosts = sorted({h for h in map(run.host_of, ranks) if h})
    return Finding(id=ID, severity="critical", title=title, ranks=tuple(ranks), hosts=tuple(hosts), step=None,
                   phase=None, evidence={"stuck_s": seconds, "ranks": ranks, "pg": first.get("pg"),
                                         "pg_desc": first.get("pg_desc"),
                                         "terminated": any(f.get("terminated") for f in stuck.values())},
                   hints=(HINT_STUCK, HINT_FR))
