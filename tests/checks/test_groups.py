"""Group statistics: reward spread, zero-std groups, duplicates, lengths and truncation."""
import math

import pytest

from grpo_doctor.checks.groups import (
    consecutive_groups,
    duplicate_rate,
    group_members,
    length_stats,
    reward_stats,
)


def test_runs_of_equal_prompts_form_groups_and_a_prompt_seen_again_starts_a_new_one():
    assert consecutive_groups(["a", "a", "b", "b", "a"]) == [0, 0, 1, 1, 2]
    assert consecutive_groups([]) == []
    assert group_members([7, 7, 3, 7]) == [[0, 1, 3], [2]]


def test_zero_std_groups_and_unbiased_stds_as_torch_computes_them():
    members = group_members([0, 0, 1, 1])
    stats = reward_stats([1.0, 1.0, 0.0, 1.0], members)
    assert stats.zero_std_frac == 0.5
    assert stats.reward_mean == 0.75
    assert stats.reward_std == pytest.approx(0.5)  # torch.tensor([1., 1., 0., 1.]).std()
    assert stats.group_reward_std_mean == pytest.approx((0 + math.sqrt(0.5)) / 2)


def test_a_constant_reward_makes_every_group_zero_std():
    stats = reward_stats([0.5] * 8, group_members([0, 0, 1, 1, 2, 2, 3, 3]))
    assert stats.zero_std_frac == 1.0 and stats.reward_std == 0.0 and stats.group_reward_std_mean == 0.0


def test_spreads_under_the_threshold_count_as_zero():
    stats = reward_stats([1.0, 1.0 + 1e-8, 0.0, 1.0], group_members([0, 0, 1, 1]))
    assert stats.zero_std_frac == 0.5


def test_groups_with_one_completion_here_are_left_out_of_group_statistics():
    # Copies of a prompt spread over ranks: this rank holds one of each.
    stats = reward_stats([1.0, 0.0], group_members([0, 1]))
    assert stats.zero_std_frac is None and stats.group_reward_std_mean is None
    assert stats.reward_mean == 0.5 and stats.reward_std == pytest.approx(math.sqrt(0.5))
    assert duplicate_rate(["a", "a"], group_members([0, 1])) is None
    single = reward_stats([1.0], [[0]])
    assert single.reward_std is None and single.reward_mean == 1.0
    assert reward_stats([], []).reward_mean is None


def test_nan_rewards_are_unknown_and_left_out_as_trl_does():
    stats = reward_stats([math.nan, 1.0, 1.0, 1.0], group_members([0, 0, 1, 1]))
    assert stats.zero_std_frac == 1.0 and stats.reward_mean == 1.0  # group 0 has one known reward
    unknown = reward_stats([math.nan] * 4, group_members([0, 0, 1, 1]))  # rewards not given (ms-swift hook)
    assert unknown == reward_stats([], [])


def test_duplicate_rate_counts_completions_equal_to_an_earlier_one_in_their_group():
    members = group_members([0, 0, 0, 0, 1, 1])
    assert duplicate_rate(["a", "a", "b", "a", "c", "d"], members) == pytest.approx((2 / 4 + 0 / 2) / 2)
    assert duplicate_rate(["x"] * 4, group_members([0] * 4)) == 0.75
    # the same text in two different groups is no duplicate
    assert duplicate_rate(["x", "y", "x", "y"], group_members([0, 0, 1, 1])) == 0.0


def test_length_stats_and_the_share_that_reached_max_length():
    stats = length_stats([8, 3, 8, 5], max_length=8)
    assert (stats.length_mean, stats.length_min, stats.length_max, stats.truncated_frac) == (6.0, 3, 8, 0.5)
    assert length_stats([8, 3], max_length=None).truncated_frac is None
    assert length_stats([], max_length=8).length_mean is None
    assert length_stats([0, 1], max_length=4).truncated_frac == 0.0
