"""Statistics of GRPO groups (the completions of one prompt): rewards, duplicates, lengths.

Standard deviations are the unbiased ones (n - 1), as torch.std in TRL and ms-swift; NaN rewards
are unknown ones and left out. A group statistic is taken over the groups with at least two
completions (two known rewards) here: when the copies of a prompt are spread over ranks
(per-device batch smaller than the group), a rank may hold one member of a group, which says
nothing about the group's spread or duplicates (the cross-rank comparison of hashes covers
that case). With no such group the statistic is None.

Typical use:
    ids = consecutive_groups(["2+2=", "2+2=", "3*3=", "3*3="])         # [0, 0, 1, 1]
    members = group_members(ids)                                     # [[0, 1], [2, 3]]
    reward_stats([1.0, 1.0, 0.0, 1.0], members).zero_std_frac        # 0.5
    duplicate_rate(["a", "a", "b", "c"], members)                    # 0.25
    length_stats([8, 3, 8, 5], max_length=8).truncated_frac          # 0.5
"""
from __future__ import annotations

import math
from dataclasses import dataclass

ZERO_STD = 1e-6  # a group whose rewards spread less than this gives GRPO no advantage, no gradient


def consecutive_groups(prompts: list) -> list[int]:
    """Group ids where each run of equal consecutive prompts is a group: [a, a, b, a] -> [0, 0, 1, 2]."""
    ids: list[int] = []
    for i, prompt in enumerate(prompts):
        ids.append(ids[-1] + (prompt != prompts[i - 1]) if i else 0)
    return ids


def group_members(group_ids: list[int]) -> list[list[int]]:
    """Completion indices of each group, groups in order of first appearance."""
    members: dict[int, list[int]] = {}
    for i, gid in enumerate(group_ids):
        members.setdefault(gid, []).append(i)
    return list(members.values())


@dataclass(frozen=True)
class RewardStats:
    reward_mean: float | None
    reward_std: float | None  # over every known reward (unbiased; None for fewer than 2)
    group_reward_std_mean: float | None  # mean over groups of >= 2 of the group's std
    zero_std_frac: float | None  # groups of >= 2 whose std is under ZERO_STD


def reward_stats(rewards: list[float], members: list[list[int]]) -> RewardStats:
    """rewards: floats; NaN is a reward not known (TRL's value where a reward function returns None)
    and is left out, as TRL's nanmean / nanstd do. Plain Python: numpy's per-call cost dominates here.
    """
    known = [r for r in rewards if r == r]
    if not known:
        return RewardStats(None, None, None, None)
    group_stds = []
    for m in members:
        values = [rewards[i] for i in m if rewards[i] == rewards[i]]
        if len(values) > 1:
            group_stds.append(_std(values))
    zero = sum(std < ZERO_STD for std in group_stds)
    return RewardStats(
        reward_mean=_mean(known),
        reward_std=_std(known) if len(known) > 1 else None,
        group_reward_std_mean=_mean(group_stds) if group_stds else None,
        zero_std_frac=zero / len(group_stds) if group_stds else None,
    )


def duplicate_rate(hashes: list[str], members: list[list[int]]) -> float | None:
    """Mean over groups of >= 2 of (completions equal to an earlier one in the group) / group size."""
    rates = [(len(m) - len({hashes[i] for i in m})) / len(m) for m in members if len(m) > 1]
    return _mean(rates) if rates else None


@dataclass(frozen=True)
class LengthStats:
    length_mean: float | None
    length_min: int | None
    length_max: int | None
    truncated_frac: float | None  # reached max_length; None when max_length is not known


def length_stats(lengths: list[int], max_length: int | None) -> LengthStats:
    if not lengths:
        return LengthStats(None, None, None, None)
    truncated = sum(n >= max_length for n in lengths) / len(lengths) if max_length is not None else None
    return LengthStats(sum(lengths) / len(lengths), min(lengths), max(lengths), truncated)


def _mean(values: list[float]) -> float:
    return math.fsum(values) / len(values)


def _std(values: list[float]) -> float:
    mean = _mean(values)
    return math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1))
