"""The seed audit compared across ranks on the ranks themselves: a shared seed said at start, without watch.

`watch` reads every rank's rng records and says a collision live (supervisor/seeds.py). A job run
without it would hear of the collision only from `grpo-doctor report`, after the damage. So the
start-of-run audit can also be gathered: one all_gather_object of each rank's audit (244 bytes
pickled with a short host name), every rank taking part whether or not it records, and rank 0
prints the line watch would, before the first rollout. Every rank must call it at the same point.

Typical use (what seed_audit(compare_across_ranks=True) does):
    lines = say_shared_seeds(record)
"""
from __future__ import annotations

from grpo_doctor.checks.rng_sharing import collision_line, shared_rng_states
from grpo_doctor.rank import api
from grpo_doctor.rank.identity import process_group
from grpo_doctor.schema import Rng


def say_shared_seeds(record: Rng | None) -> list[str] | None:
    """Gathers every rank's audit; rank 0 prints the collisions. Returns the lines (on rank 0), else None."""
    dist = process_group()
    if dist is None or dist.get_world_size() == 1:
        return None
    gathered: list[dict | None] = [None] * dist.get_world_size()
    try:
        # None from a rank that failed to audit: it still takes part, so nobody waits for it.
        dist.all_gather_object(gathered, record.to_dict() if record is not None else None)
    except Exception as exc:  # a broken group fails training's own next collective; not ours to raise
        api._say(f"seed_audit: comparing across ranks failed ({type(exc).__name__}: {exc})")
        return None
    if dist.get_rank() != 0:
        return None
    try:  # after the gather: nothing here can leave a rank waiting, and nothing may stop training
        rows = [row for row in gathered if row is not None]
        hosts = {row["rank"]: row["host"] for row in rows}
        lines = [collision_line(s, hosts) for s in shared_rng_states(rows) if s.diverged_at is None]
    except Exception as exc:
        api._say(f"seed_audit: the gathered audits could not be compared ({type(exc).__name__}: {exc})")
        return None
    for line in lines:
        api._say(line)
    return lines
