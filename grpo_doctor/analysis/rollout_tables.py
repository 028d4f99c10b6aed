"""Tables from the ranks' rollout and rng records, and the cross-rank comparison of completions.

Tables (load.py's Evidence):
  rollouts:    rank, host, step, t, and each Rollout statistic (ROLLOUT_COLUMNS)
  rng:         rank, host, step, t, tag, torch_cpu, torch_cuda, numpy, python, sampling_seed, tp_rank, tp_group
  completions: source, rank, step, group, prompt, completion, reward: the texts the ranks kept
               (source "grpo-doctor") and TRL / ms-swift completion files

With GRPO the copies of one prompt are spread over ranks (TRL's RepeatSampler layout), so two
ranks sampling with the same seed produce the same completions for the same prompt (CASES.md
case 2). `cross_rank_overlaps` compares, for every step and every prompt held by several ranks,
each pair of ranks' completion hashes; `rng_collisions` finds ranks sharing a sampling generator in
the rng table (the comparison itself is rng_sharing.py's, shared with `watch`).

Typical use:
    overlaps = cross_rank_overlaps(evidence.rollout_records)
    overlaps[3][(0, 1)]            # PairOverlap(identical_frac=1.0, num_prompts=2, ...)
    rng_collisions(evidence.rng)   # [SharedRngState(ranks=(0, 1), generator="sampling_seed", ...)]
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

import pandas as pd

from grpo_doctor.checks.rng_sharing import SharedRngState, sampling_generator, shared_rng_states
from grpo_doctor.schema import Rng, Rollout

ROLLOUT_COLUMNS = ["rank", "host", "step", "t", "num_completions", "num_groups", "duplicate_rate", "distinct_1",
                   "distinct_2", "edit_distance", "length_mean", "length_min", "length_max", "truncated_frac",
                   "reward_mean", "reward_std", "group_reward_std_mean", "zero_std_frac", "temperature", "max_length"]
RNG_COLUMNS = ["rank", "host", "step", "t", "tag", "torch_cpu", "torch_cuda", "numpy", "python", "sampling_seed",
               "tp_rank", "tp_group"]
COMPLETION_COLUMNS = ["source", "rank", "step", "group", "prompt", "completion", "reward"]
EVENT_LOG_SOURCE = "grpo-doctor"


def rollout_frame(records: Iterable[Rollout]) -> pd.DataFrame:
    rows = [[getattr(r, c) for c in ROLLOUT_COLUMNS] for r in records]
    return pd.DataFrame(rows, columns=ROLLOUT_COLUMNS)


def rng_frame(records: Iterable[Rng]) -> pd.DataFrame:
    rows = [[getattr(r, c) for c in RNG_COLUMNS] for r in records]
    return pd.DataFrame(rows, columns=RNG_COLUMNS)


def rollout_samples(records: Iterable[Rollout]) -> list[dict]:
    """The texts the ranks kept (a few per step), as rows of COMPLETION_COLUMNS."""
    return [{"source": EVENT_LOG_SOURCE, "rank": r.rank, "step": r.step, "group": s.get("group"),
             "prompt": s.get("prompt"), "completion": s.get("completion"), "reward": s.get("reward")}
            for r in records for s in r.samples if isinstance(s, dict)]


@dataclass(frozen=True)
class PairOverlap:
    """Two ranks' completions for the prompts both held in one step."""

    identical_frac: float  # completions with an identical copy on the other rank / all their completions
    num_prompts: int  # prompts both ranks held
    # the larger of the two ranks' own within-group duplicate rates (the baseline); None when neither
    # held two copies of a prompt (per-device batch 1), so a collapsed policy cannot show itself there
    within_duplicate_rate: float | None
    # prompts whose copies were one text on every rank holding them / num_prompts: nothing in the step
    # shows the policy sampling apart on them, so identical copies there may be collapse, not a seed
    unanimous_frac: float


def cross_rank_overlaps(records: Iterable[Rollout]) -> dict[int, dict[tuple[int, int], PairOverlap]]:
    """{step: {(rank_a, rank_b): PairOverlap}} for rank pairs (a < b) that held copies of a common prompt.

    Records sampled greedily (temperature 0) are left out: identical copies are expected there.
    Several records of one rank and step (gradient accumulation) are pooled.
    """
    hashes: dict[int, dict[str, dict[int, list[str]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    dup_rates: dict[tuple[int, int], list[float]] = defaultdict(list)
    for r in records:
        if r.step is None or r.temperature == 0:
            continue
        for prompt, completion in zip(r.prompt_hashes, r.completion_hashes, strict=False):
            hashes[r.step][prompt][r.rank].append(completion)
        if r.duplicate_rate is not None:
            dup_rates[(r.rank, r.step)].append(r.duplicate_rate)
    out: dict[int, dict[tuple[int, int], PairOverlap]] = {}
    for step, prompts in hashes.items():
        sums: dict[tuple[int, int], list[float]] = defaultdict(lambda: [0.0, 0, 0])  # identical, prompts, unanimous
        for by_rank in prompts.values():
            if len(by_rank) < 2:
                continue
            ranks = sorted(by_rank)
            sets = {rank: set(by_rank[rank]) for rank in ranks}
            unanimous = len(set().union(*sets.values())) == 1
            for i, a in enumerate(ranks):
                for b in ranks[i + 1:]:
                    matched = (sum(h in sets[b] for h in by_rank[a]) + sum(h in sets[a] for h in by_rank[b]))
                    total = sums[(a, b)]
                    total[0] += matched / (len(by_rank[a]) + len(by_rank[b]))
                    total[1] += 1
                    total[2] += unanimous
        out[step] = {pair: PairOverlap(identical_frac=s / n, num_prompts=int(n), unanimous_frac=u / n,
                                       within_duplicate_rate=_larger(_mean(dup_rates.get((pair[0], step))),
                                                                     _mean(dup_rates.get((pair[1], step)))))
                     for pair, (s, n, u) in sums.items()}
    return {step: pairs for step, pairs in sorted(out.items()) if pairs}


def duplicate_rates(records: Iterable[Rollout]) -> pd.Series:
    """Per step, over all ranks: mean over prompts of (copies identical to an earlier copy) / copies.

    Unlike each record's `duplicate_rate` (within one rank's groups) this sees copies on other ranks."""
    by_step: dict[int, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        if r.step is not None:
            for prompt, completion in zip(r.prompt_hashes, r.completion_hashes, strict=False):
                by_step[r.step][prompt].append(completion)
    rates = {step: sum((len(c) - len(set(c))) / len(c) for c in prompts.values()) / len(prompts)
             for step, prompts in by_step.items() if prompts}
    return pd.Series(rates, dtype=float).sort_index()


def pair_matrix(overlaps: dict[int, dict[tuple[int, int], PairOverlap]]) -> pd.DataFrame:
    """Rank x rank: mean identical fraction over every step and shared prompt (NaN where never compared)."""
    sums: dict[tuple[int, int], list[float]] = defaultdict(lambda: [0.0, 0])
    for pairs in overlaps.values():
        for pair, o in pairs.items():
            sums[pair][0] += o.identical_frac * o.num_prompts
            sums[pair][1] += o.num_prompts
    ranks = sorted({r for pair in sums for r in pair})
    matrix = pd.DataFrame(float("nan"), index=ranks, columns=ranks)
    for (a, b), (s, n) in sums.items():
        matrix.loc[a, b] = matrix.loc[b, a] = s / n
    return matrix


def _mean(values: list[float] | None) -> float | None:
    return sum(values) / len(values) if values else None


def _larger(*values: float | None) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def rng_collisions(rng: pd.DataFrame) -> list[SharedRngState]:
    """Rank sets sharing the sampling generator in a snapshot (tag, step), oldest first (rng_sharing.py).

    A set that shares in one snapshot but differs in a later one is dropped: the early snapshot
    was taken before the trainer seeded each rank (torch's default seed is the same in every process).
    """
    return [s for s in shared_rng_states(rng.to_dict("records")) if s.diverged_at is None]


def fingerprinted_ranks(rng: pd.DataFrame) -> set[int]:
    """Ranks whose rng records state the generator rng_collisions compares."""
    generator = sampling_generator(rng.to_dict("records"))
    return set() if generator is None else {int(r) for r in rng.dropna(subset=[generator])["rank"]}
