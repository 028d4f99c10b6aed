"""Several hosts' looks at one hang made into one: every rank of every node, its stacks grouped across
hosts, and the ranks the others wait for named with their host.

One watch per node sees only its own node's ranks: on the node of the waiting ranks it finds every
rank in the same collective and names no culprit; on the culprit's node it names the culprit but
not the ranks elsewhere that wait for it. Grouping the main-thread stacks of all nodes together
(checks/stack_groups.py) gives the answer for the whole job. watch's fleet makes its verdict with it
(supervisor/fleet_verdict.py), and the report merges hang reports of several hosts written at the
same hang by watches that judged alone (analysis/hang_reports.py).

Typical use:
    merged = merge_hang_reports([report_node0, report_node1])
    merged.culprits, merged.host_of(3)          # (3,), "node1"
    merged.groups[0]                            # "ranks 0-2: all_gather (...) at step 3 on node0, node1"
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

from grpo_doctor.checks.stack_groups import culprit_ranks, describe, group_stacks, odd_ranks
from grpo_doctor.schema.stacks import StackCapture
from grpo_doctor.schema.watch_files import HangFleet, HangRank, HangReport

MAX_STACKS_KEPT = 64  # above this many ranks a verdict keeps one stack per group and the culprits'
MAX_HOSTS_NAMED = 3  # on one group's line; the others are counted


def merge_hang_reports(reports: Sequence[HangReport], *, fleet: HangFleet | None = None,
                       detected_t: float | None = None, max_stacks: int = MAX_STACKS_KEPT) -> HangReport:
    """One report of every rank of `reports` (each one host's look at the same hang), each rank with its
    host, the stacks regrouped across hosts and the culprits named from all of them. `host` is the
    first culprit's host (else the first stuck rank's, else the first report's)."""
    ranks: dict[int, HangRank] = {}
    stacks = {}
    for report in reports:
        for rank, info in report.ranks.items():
            info = info if info.host else replace(info, host=report.host or None)
            if rank not in ranks or (ranks[rank].pid is None and info.pid is not None):
                ranks[rank] = info
        for rank, thread in report.stacks.items():
            if rank in ranks and ranks[rank].host in (None, report.host, report.host_of(rank)):
                stacks.setdefault(rank, thread)
    captures = [StackCapture(rank, _pid(ranks, rank), ranks[rank].host or "", None, (thread,))
                for rank, thread in sorted(stacks.items())]
    groups = group_stacks(captures)
    context = {r: f"step {info.step}" + (f" ({info.role})" if info.role else "")
               for r, info in ranks.items() if info.step is not None}
    context.update({r: info.role for r, info in ranks.items() if info.step is None and info.role})
    lines = [line + _hosts_clause([ranks[r].host for r in group.ranks if r in ranks])
             for line, group in zip(describe(groups, rank_context=context), groups, strict=True)]
    culprits = tuple(r for r in culprit_ranks(groups) if r >= 0)
    odd = tuple(r for r in odd_ranks(groups) if r >= 0)
    stuck = tuple(r for r, info in sorted(ranks.items()) if info.verdict == "stuck")
    lead = next(iter(culprits or stuck), None)
    host = (ranks[lead].host if lead is not None and ranks[lead].host else None) or \
        next((r.host for r in reports if r.host), "")
    if len(stacks) > max_stacks:
        keep = {g.ranks[0] for g in groups} | set(culprits) | set(odd)
        stacks = {r: t for r, t in stacks.items() if r in keep}
        fleet = replace(fleet, stacks_kept="groups") if fleet is not None else None
    errors = {r: e for report in reports for r, e in report.stack_errors.items()}
    if detected_t is None:  # the first host's look: when the hang was first seen
        detected_t = min((r.detected_t for r in reports if r.detected_t is not None), default=None) or time.time()
    return HangReport(
        host=host,
        detected_t=detected_t,
        ranks=dict(sorted(ranks.items())),
        groups=tuple(lines),
        culprits=culprits,
        odd_ranks=odd,
        stack_dirs=tuple(dict.fromkeys(d for r in reports for d in r.stack_dirs)),
        stack_errors=dict(sorted(errors.items())),
        ptrace_denied=any(r.ptrace_denied for r in reports),
        flight_recorder_files=tuple(dict.fromkeys(f for r in reports for f in r.flight_recorder_files)),
        gpus=tuple(g for r in reports for g in r.gpus),
        stacks=dict(sorted(stacks.items())),
        actors=tuple(a for r in reports for a in r.actors),
        fleet=fleet,
    )


def _pid(ranks: dict[int, HangRank], rank: int) -> int:
    pid = ranks[rank].pid
    return pid if pid is not None else -1


def _hosts_clause(hosts: list[str | None]) -> str:
    """" on node0, node1" for the hosts of one group's ranks; " on node0, node1, node2 and 5 more hosts"."""
    named = list(dict.fromkeys(h for h in hosts if h))
    if not named:
        return ""
    more = len(named) - MAX_HOSTS_NAMED
    shown = ", ".join(named[:MAX_HOSTS_NAMED])
    return f" on {shown}" + (f" and {more} more host{'s' if more > 1 else ''}" if more > 0 else "")
