"""The deciding watch's two judgements: is the whole job hung (every live node's ranks stalled), and what
is the verdict once the nodes' stacks are in (one report over every rank of every node).

A node's beat says "stalled" when all its running ranks made no progress for their stall timeout,
"progress" when one did, "idle" when it has no running rank (not started yet, or ended). The job is
hung when no live node is in progress and at least one is stalled; the stall is named by the stalled
nodes' own stall names, so a stall that goes on is looked at again only as it grows (stall.py).

The verdict merges the stacks of every node that answered the look (checks/hang_merge.py: grouped
across hosts, the culprit named with its host) and names each node that did not: silent ("no report
for 40 s") or too slow ("no stacks within 11 s"). Its `fleet` part says who decided and whether every
watch ends its own node's processes (`action` "kill", from the decider's --on-hang).

Typical use:
    stall = fleet_stall(view, own=("stalled", "3f2a", 12.0))
    if stall and schedule.due(stall.key, stall.idle_s): ...ask for a look...
    verdict = build_verdict("node0-1", reports, view, missing, nnodes=2, action="kill")
"""
from __future__ import annotations

import hashlib
from collections.abc import Hashable, Mapping
from dataclasses import dataclass

from grpo_doctor.checks.hang_merge import merge_hang_reports
from grpo_doctor.schema.watch_files import HangFleet, HangReport
from grpo_doctor.supervisor.fleet import FleetView


@dataclass(frozen=True)
class FleetStall:
    key: tuple[tuple[int, str], ...]  # (node, its stall name) of every stalled node
    idle_s: float  # the shortest time without progress of the stalled nodes


def stall_name(key: Hashable | None) -> str | None:
    """A short, stable name for one node's stall (its ranks' record counts), for its beat."""
    return None if key is None else hashlib.sha1(repr(key).encode()).hexdigest()[:12]


def fleet_stall(view: FleetView, own: tuple[str, str | None, float]) -> FleetStall | None:
    """The job's stall as the decider sees it, or None while any live node's ranks progress (or none
    has stalled). `own`: this node's (state, stall name, idle s), fresher than its published beat."""
    states = {view.me: own}
    for node in view.live:
        beat = view.beats.get(node)
        if node != view.me and beat is not None:
            states[node] = (beat.state, beat.stall, beat.idle_s or 0.0)
    if any(state == "progress" for state, _, _ in states.values()):
        return None
    stalled = {n: (name or "", idle) for n, (state, name, idle) in states.items() if state == "stalled"}
    if not stalled:
        return None
    return FleetStall(key=tuple(sorted((n, name) for n, (name, _) in stalled.items())),
                      idle_s=min(idle for _, idle in stalled.values()))


def build_verdict(verdict_id: str, reports: Mapping[int, HangReport], view: FleetView, missing: Mapping[int, str],
                  *, decider_host: str, nnodes: int, action: str) -> HangReport:
    """One report of every rank of the nodes in `reports` (node -> its own look), with the fleet's part."""
    hosts = {node: report.host for node, report in reports.items()}
    fleet = HangFleet(id=verdict_id, decider=decider_host, decider_node=view.me, nodes=dict(sorted(hosts.items())),
                      missing=dict(sorted(missing.items())), nnodes=nnodes, action=action)
    return merge_hang_reports([reports[n] for n in sorted(reports)], fleet=fleet)
