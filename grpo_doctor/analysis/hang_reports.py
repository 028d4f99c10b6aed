"""The hang reports of every host made into one per hang: a job of several nodes hangs once, however many
watches looked at it.

Two cases. The watches of a job's nodes that met as a fleet (supervisor/fleet.py) each keep the same
verdict as their own hang-N.json: in a shared run directory, or in per-node directories passed together
(`grpo-doctor report node0/RUN node1/RUN`), the copies are one hang (the same `fleet.id` and detection
time). Watches that judged alone (an older version, `--fleet off`, a node that could not reach the
others) each wrote their own node's look: those of different hosts and different ranks within
HANG_WINDOW_S of each other are merged (checks/hang_merge.py), so that the rank the others wait for is named even when it ran on
another host than the ranks waiting for it. A look of a host that judged alone beside a fleet verdict of
the same hang adds nothing the verdict lacks and is left out. One host's several looks at one stall
(hang-1, hang-2 as it went on) stay apart, as before.

Typical use:
    ev.hangs = combine_hangs(ev.hangs)
    [h.hosts for h in ev.hangs]      # [("node0", "node1")]: one hang, both hosts' ranks
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from grpo_doctor.checks.hang_merge import merge_hang_reports
from grpo_doctor.schema.watch_files import HangReport

HANG_WINDOW_S = 120.0  # two hosts' looks this close in time are at the same hang (the learned timeouts differ)


def combine_hangs(hangs: Sequence[HangReport]) -> list[HangReport]:
    """One report per hang, in order of detection (see the module docstring). Reports of one host alone
    and without a fleet verdict come back as they were."""
    if len({h.host for h in hangs}) < 2 and not any(h.fleet for h in hangs):
        return list(hangs)
    verdicts: dict[tuple[str, float | None], HangReport] = {}
    alone: list[HangReport] = []
    for hang in hangs:
        if hang.fleet is not None and hang.fleet.id:
            key = (hang.fleet.id, round(hang.detected_t, 1) if hang.detected_t is not None else None)
            verdicts.setdefault(key, hang)
        else:
            alone.append(hang)
    clusters: list[list[HangReport]] = []
    for hang in sorted(alone, key=_time):
        if any(_near(hang, v) for v in verdicts.values()):
            continue  # the fleet's verdict of the same hang holds every node that answered
        cluster = next((c for c in clusters if _near(hang, c[0]) and _apart(hang, c)), None)
        if cluster is None:
            clusters.append([hang])
        else:
            cluster.append(hang)
    merged = [c[0] if len(c) == 1 else replace(merge_hang_reports(c), file=c[0].file) for c in clusters]
    return sorted([*verdicts.values(), *merged], key=_time)


def _apart(hang: HangReport, cluster: list[HangReport]) -> bool:
    """Another host, and other ranks: a rank runs on one host, so looks sharing a rank are not one job's."""
    return all(hang.host != h.host and not set(hang.ranks) & set(h.ranks) for h in cluster)


def _time(hang: HangReport) -> float:
    return hang.detected_t if hang.detected_t is not None else float("inf")


def _near(a: HangReport, b: HangReport) -> bool:
    if a.detected_t is None or b.detected_t is None:
        return False
    return abs(a.detected_t - b.detected_t) <= HANG_WINDOW_S
