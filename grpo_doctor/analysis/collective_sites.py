"""Which rank called the collective the others never joined, from where each rank's code waits.

When ranks wait in (or fail in) collectives called from different lines of code, the job is
desynchronised: one side called a collective the other side skipped. Which side is the odd one?
Where one call site is shared by most ranks, the others are. With two ranks (or a tie) the rank
records decide: the ranks still in a phase that every other rank already completed in the same step
called something extra there (the others went past that phase without waiting), so they are the
odd ones. Inputs are `CollectiveCall`s from py-spy stacks (watch) or from recorded tracebacks.

Typical use:
    found = mismatched_sites(run, {0: call_0, 1: call_1}, {0: (2, "reward"), 1: (2, "rollout")})
    found.odd_ranks, found.decided_by      # (1,), "phase order"
"""
from __future__ import annotations

from dataclasses import dataclass

from grpo_doctor.analysis.rank_progress import completed
from grpo_doctor.analysis.views import RunView
from grpo_doctor.checks.stack_groups import CollectiveCall


@dataclass(frozen=True)
class SiteMismatch:
    odd_ranks: tuple[int, ...]
    decided_by: str  # "majority", "phase order", or "tie" (then every rank is named)
    sites: dict[tuple[str, str], tuple[int, ...]]  # (op, call site) -> ranks waiting there


def mismatched_sites(run: RunView, calls: dict[int, CollectiveCall],
                     where: dict[int, tuple[int | None, str | None]]) -> SiteMismatch | None:
    """None when every rank waits at the same collective call site (or fewer than two ranks do).

    `where`: rank -> (step, open phase path) as the rank records or watch knew it.
    """
    sites: dict[tuple[str, str], list[int]] = {}
    for rank, call in sorted(calls.items()):
        sites.setdefault((call.op, call.site), []).append(rank)
    if len(sites) < 2:
        return None
    groups = sorted(sites.values(), key=lambda rs: (-len(rs), rs))
    frozen = {k: tuple(v) for k, v in sites.items()}
    if len(groups[0]) > len(groups[1]):
        return SiteMismatch(tuple(sorted(r for g in groups[1:] for r in g)), "majority", frozen)
    behind = [g for g in groups if _behind(run, g, [r for o in groups if o is not g for r in o], where)]
    if len(behind) == 1:
        return SiteMismatch(tuple(behind[0]), "phase order", frozen)
    return SiteMismatch(tuple(sorted(calls)), "tie", frozen)


def _behind(run: RunView, group: list[int], others: list[int], where: dict[int, tuple[int | None, str | None]]) -> bool:
    """Every rank of `group` is in a phase of a step that every other rank completed."""
    for rank in group:
        step, path = where.get(rank, (None, None))
        if path is None or not all(completed(run, other, path, step) for other in others):
            return False
    return True
