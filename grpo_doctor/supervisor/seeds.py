"""Live seed audit: ranks that will sample identical rollouts, said as soon as their rng records arrive.

Each rank's `grpo_doctor.seed_audit()` writes an `rng` record at start, before the first rollout.
Ranks that sample different data must not share the rollout engine's sampling seed or the state
of their torch generator (CASES.md case 2: every GPU of a node generated the same text); ranks of
one tensor-parallel group legitimately share both. watch reads the records as they are written,
so the collision is on the console seconds after start, not after days of wasted steps.

Typical use:
    check = SeedCheck()
    for line in check.feed(tracker.poll(now)):
        console.note(line)
"""
from __future__ import annotations

from collections.abc import Iterable

from grpo_doctor.rankset import format_ranks
from grpo_doctor.schema import Rng

REMEDY = ("give each sampling process its own seed (TRL: set_seed(seed, device_specific=True); vLLM: "
          "seed = base + data-parallel rank, equal only inside a tensor-parallel group)")


class SeedCheck:
    def __init__(self) -> None:
        self._first: dict[int, Rng] = {}  # rank -> its first rng record (the state before any rollout)
        self._said: set[tuple[str, tuple[int, ...]]] = set()

    def feed(self, records: Iterable[object]) -> list[str]:
        """Lines to print for collisions not said before."""
        fresh = False
        for rec in records:
            if isinstance(rec, Rng) and rec.rank not in self._first:
                self._first[rec.rank] = rec
                fresh = True
        return self._collisions() if fresh else []

    def _collisions(self) -> list[str]:
        lines = []
        for what, key in (("the sampling seed", lambda r: r.sampling_seed), ("the torch RNG state", lambda r: r.torch_cpu)):
            by_value: dict[object, list[Rng]] = {}
            for rec in self._first.values():
                if key(rec) is not None:
                    by_value.setdefault(key(rec), []).append(rec)
            for value, recs in by_value.items():
                groups = {r.tp_group if r.tp_group is not None else ("rank", r.rank) for r in recs}
                if len(groups) < 2:  # one tensor-parallel group sharing its seed is as it should be
                    continue
                ranks = tuple(sorted(r.rank for r in recs))
                if (what, ranks) in self._said:
                    continue
                self._said.add((what, ranks))
                hosts = sorted({r.host for r in recs})
                shown = f" {value}" if what == "the sampling seed" else ""
                lines.append(f"seed collision: ranks {format_ranks(ranks)} (host(s) {', '.join(hosts)}) share "
                             f"{what}{shown}: copies of a prompt sampled there come out identical; {REMEDY}")
        return lines
