"""Ranks whose sampling generators agree: the seed comparison shared by `watch` (live) and `report`.

Rows are rng records as mappings (`Rng.to_dict()`, or the rows of analysis' rng table, where
NaN stands for a missing value). They are grouped into snapshots, one per (tag, step) audit, each
rank's last row in each, oldest snapshot first. The generator compared is the most specific one
the rows report, since that is what the completions are drawn from: the rollout engine's sampling
seed, else the torch CUDA generator, else the CPU one (ranks with distinct vLLM seeds sample apart
whatever their torch state). Ranks of one tensor-parallel group share it by design.

Stdlib only: `watch` imports it.

Typical use:
    for shared in shared_rng_states(rec.to_dict() for rec in rng_records):
        if not shared.diverged_at:
            print(f"ranks {format_ranks(shared.ranks)} share {shared.generator}")
"""
from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from grpo_doctor.schema.ranks import format_ranks

SAMPLING_GENERATORS = ("sampling_seed", "torch_cuda", "torch_cpu")  # what sampling draws from, most specific first
GENERATORS = (*SAMPLING_GENERATORS, "numpy", "python")
GENERATOR_NAMES = {"sampling_seed": "the sampling seed", "torch_cuda": "the torch CUDA RNG state",
                   "torch_cpu": "the torch CPU RNG state"}
REMEDY = ("give each sampling process its own seed (TRL: set_seed(seed, device_specific=True); vLLM: "
          "seed = base + data-parallel rank, equal only inside a tensor-parallel group)")


@dataclass(frozen=True)
class SharedRngState:
    """Ranks of different tensor-parallel groups whose sampling generator agreed in one snapshot."""

    ranks: tuple[int, ...]
    tag: str
    step: int | None
    generator: str  # the generator compared (SAMPLING_GENERATORS)
    value: object  # its value there (the seed, or a fingerprint)
    shared_generators: tuple[str, ...]  # every generator (GENERATORS) these ranks agreed on
    # (tag, step) of a later snapshot holding all these ranks where they differ: the early match came before
    # the trainer seeded each rank (torch's default seed is the same in every process); None while they agree
    diverged_at: tuple[str, int | None] | None


def sampling_generator(rows: Iterable[Mapping[str, object]]) -> str | None:
    """The most specific SAMPLING_GENERATORS entry any row reports; None when none does."""
    rows = list(rows)
    return next((g for g in SAMPLING_GENERATORS if any(_known(row.get(g)) for row in rows)), None)


def shared_rng_states(rows: Iterable[Mapping[str, object]]) -> list[SharedRngState]:
    """Every set of ranks sharing the sampling generator in a snapshot, oldest snapshot first."""
    rows = list(rows)
    generator = sampling_generator(rows)
    if generator is None:
        return []
    snapshots = _snapshots(row for row in rows if _known(row.get(generator)))
    out = []
    for i, (tag, step, latest) in enumerate(snapshots):
        by_value: dict[object, list[int]] = defaultdict(list)
        for rank, row in latest.items():
            by_value[row[generator]].append(rank)
        for value, ranks in by_value.items():
            groups = {_tp_group(latest[r]) for r in ranks}
            if len(ranks) < 2 or (len(groups) == 1 and None not in groups):
                continue  # one rank, or one tensor-parallel group sharing its engine's seed as it should
            ranks = sorted(ranks)
            diverged_at = next(((t, s) for t, s, later in snapshots[i + 1:]
                                if set(ranks) <= set(later) and len({later[r][generator] for r in ranks}) > 1), None)
            shared = tuple(g for g in GENERATORS if all(_known(latest[r].get(g)) for r in ranks)
                           and len({latest[r][g] for r in ranks}) == 1)
            out.append(SharedRngState(ranks=tuple(ranks), tag=tag, step=step, generator=generator, value=value,
                                      shared_generators=shared, diverged_at=diverged_at))
    return out


def _snapshots(rows: Iterable[Mapping[str, object]]) -> list[tuple[str, int | None, dict[int, Mapping]]]:
    """[(tag, step, {rank: its last row})], ordered by the snapshot's median time."""
    grouped: dict[tuple[str, int | None], dict[int, Mapping]] = defaultdict(dict)
    times: dict[tuple[str, int | None], list[float]] = defaultdict(list)
    for row in rows:
        step = row.get("step")
        key = (str(row.get("tag")), int(step) if _known(step) else None)
        grouped[key][int(row["rank"])] = row
        times[key].append(float(row.get("t") or 0.0))
    ordered = sorted(grouped, key=lambda k: statistics.median(times[k]))
    return [(tag, step, grouped[(tag, step)]) for tag, step in ordered]


def _tp_group(row: Mapping[str, object]) -> object:
    group = row.get("tp_group")
    return int(group) if _known(group) else None


def _known(value: object) -> bool:
    return value is not None and value == value  # NaN is the rng table's missing value


def collision_line(shared: SharedRngState, hosts: Mapping[int, str]) -> str:
    """The one line a user reads, live from watch or from rank 0 at start (rank/seed_gather.py)."""
    on = sorted({hosts[r] for r in shared.ranks if r in hosts})
    shown = f" {shared.value}" if shared.generator == "sampling_seed" else ""
    return (f"seed collision: ranks {format_ranks(shared.ranks)} (host(s) {', '.join(on)}) share "
            f"{GENERATOR_NAMES[shared.generator]}{shown}: copies of a prompt sampled there come out identical; "
            f"{REMEDY}")
