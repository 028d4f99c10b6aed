"""Live seed audit: ranks that will sample identical rollouts, said as soon as their rng records arrive.

Each rank's `grpo_doctor.seed_audit()` writes an `rng` record at start, before the first rollout,
and again every few steps. Ranks that sample different data must not share the generator their
completions are drawn from (CASES.md case 2: every GPU of a node generated the same text); ranks
of one tensor-parallel group legitimately share it. The comparison is report's (rng_sharing.py):
the rollout engine's sampling seed where stated, else the torch CUDA, else the CPU generator. watch
reads the records as they are written, so the collision is on the console seconds after start,
not after days of wasted steps; a later audit that shows the ranks apart withdraws it, once.

Typical use:
    check = SeedCheck()
    for line in check.feed(tracker.poll(now)):
        console.note(line)
"""
from __future__ import annotations

from collections.abc import Iterable

from grpo_doctor.checks.rng_sharing import GENERATOR_NAMES, SharedRngState, collision_line, shared_rng_states
from grpo_doctor.schema import Rng
from grpo_doctor.schema.ranks import format_ranks


class SeedCheck:
    def __init__(self) -> None:
        self._rows: list[dict] = []  # every rng record so far; audits come every few steps, so few
        self._hosts: dict[int, str] = {}
        self._said: set[tuple[int, ...]] = set()
        self._withdrawn: set[tuple[int, ...]] = set()
        self.collisions: list[SharedRngState] = []  # every collision said, in order (watch's live alert reads it)

    def feed(self, records: Iterable[object]) -> list[str]:
        """Lines to print: collisions not said before, and said ones a later audit shows apart."""
        fresh = [rec for rec in records if isinstance(rec, Rng)]
        if not fresh:
            return []
        self._rows += [rec.to_dict() for rec in fresh]
        self._hosts.update({rec.rank: rec.host for rec in fresh})
        states = shared_rng_states(self._rows)
        live = [set(s.ranks) for s in states if s.diverged_at is None]
        lines = []
        for shared in states:
            ranks = set(shared.ranks)
            standing = [set(r) for r in self._said - self._withdrawn]
            if shared.diverged_at is None and not any(ranks <= said for said in standing):
                self._said.add(shared.ranks)
                self.collisions.append(shared)
                lines.append(self._collision(shared))
            elif (shared.diverged_at is not None and ranks in standing
                  and not any(len(ranks & other) > 1 for other in live)):
                # told to fix a seed, the user should hear once that these ranks sample apart after all;
                # ranks still sharing with one another (same seed, different prompts since) stay said
                self._withdrawn.add(shared.ranks)
                tag, step = shared.diverged_at
                lines.append(f"seed collision withdrawn: ranks {format_ranks(shared.ranks)} differ in "
                             f"{GENERATOR_NAMES[shared.generator]} at the {tag!r} audit of step {step} "
                             "(the earlier match was likely taken before seeding)")
        return lines

    @property
    def withdrawn(self) -> list[tuple[int, ...]]:
        """The ranks of each collision said and then withdrawn (a later audit showed them apart)."""
        return sorted(self._withdrawn)

    @property
    def hosts(self) -> dict[int, str]:
        return dict(self._hosts)

    def _collision(self, shared: SharedRngState) -> str:
        return collision_line(shared, self._hosts)
