"""`nccl-timeout`: the NCCL watchdog gave up on a collective (WorkNCCL(SeqNum=...) ran for ... ms).

Reports are grouped by process group. Same sequence number on every reporting rank: they all
entered that collective and waited for someone; the ranks known to the run that did not report
are the likely stuck ones. Different sequence numbers: the ranks are desynchronised (they issued
different numbers of collectives), usually because they took different code paths.

Evidence keys: `seq` (lowest reported), `op`, `numel_in`, `numel_out`, `timeout_ms`, `ran_for_ms`
(longest), `ranks` (reporting), `absent_ranks` (known but not reporting), `seqs` ({rank: seq}),
`desync` (bool), `pg`, `last_completed` ({rank: last completed seq} from the watchdog status line).
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from grpo_doctor.analysis import remedies
from grpo_doctor.analysis.findings import Finding
from grpo_doctor.analysis.load import Evidence
from grpo_doctor.logs.kinds import NCCL_TIMEOUT, NCCL_WATCHDOG_STATUS
from grpo_doctor.rankset import format_ranks

ID = "nccl-timeout"

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
HINTS = (HINT_ABSENT, HINT_DESYNC, HINT_LAUNCH, HINT_FR, HINT_TIMEOUT)


def timeout_hint(timeout_ms: int | None) -> str:
    """The timeout remedy, starting from the timeout this job ran with where the log states it."""
    return HINT_TIMEOUT if not timeout_ms else f"This job's collective timeout was {timeout_ms / 1000:g} s. " + HINT_TIMEOUT


@dataclass(frozen=True)
class Config:
    pass  # every watchdog timeout is a finding


def check(run: Evidence, cfg: Config) -> Iterator[Finding]:
    by_pg: dict[object, dict[int, dict]] = {}
    for row in run.signature_rows:
        if row["kind"] == NCCL_TIMEOUT:
            f = row["fields"]
            rank = row["rank"] if row["rank"] is not None else f.get("rank")
            by_pg.setdefault(f.get("pg_desc") or f.get("pg"), {}).setdefault(rank, f)
    last_completed = {row["rank"]: row["fields"].get("last_completed") for row in run.signature_rows
                      if row["kind"] == NCCL_WATCHDOG_STATUS and row["rank"] is not None}
    for pg, reports in by_pg.items():
        reporting = sorted(r for r in reports if r is not None)
        seqs = {r: f.get("seq") for r, f in reports.items() if r is not None}
        desync = len(set(seqs.values())) > 1
        first = reports[min(seqs, key=lambda r: seqs[r] or 0)] if seqs else next(iter(reports.values()))
        absent = sorted(run.known_ranks - set(reporting)) if pg in (None, "default_pg", 0) else []
        ran_for = [f.get("ran_for_ms") for f in reports.values() if f.get("ran_for_ms") is not None]
        op = first.get("op")
        if desync:
            title = (f"NCCL timeout with desynchronised ranks: sequence numbers "
                     f"{', '.join(f'rank {r}: {s}' for r, s in sorted(seqs.items()))}")
            launch = (HINT_LAUNCH,) if remedies.launch_settings_differ(run) else ()
            hints = (HINT_DESYNC, *launch, HINT_FR, timeout_hint(first.get("timeout_ms")))
        else:
            title = f"NCCL {op} #{first.get('seq')} timed out on rank(s) {format_ranks(reporting) or '?'}"
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
                      "seqs": seqs, "desync": desync, "pg": pg,
                      "last_completed": {r: c for r, c in last_completed.items() if r in reports}},
            hints=hints,
        )
