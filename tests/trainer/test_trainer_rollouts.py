"""The trainer's rollout and seed records under torchrun (2 ranks, one node, gloo, CPU): case 2 of CASES.md."""
from __future__ import annotations

import pytest

from grpo_doctor.schema import Rng, Rollout, Step

pytestmark = pytest.mark.distributed

# B=1, G=2: each rank samples one copy of the step's prompt, as in case 2 of CASES.md.
LAYOUT = ("--steps", "3", "--per-device-batch", "1", "--num-generations", "2")


@pytest.fixture(scope="module")
def same_seed(launch_trainer, tmp_path_factory):
    return launch_trainer(tmp_path_factory.mktemp("same-seed"), *LAYOUT, "--inject", "same-seed-per-node")


@pytest.fixture(scope="module")
def healthy(launch_trainer, tmp_path_factory):
    return launch_trainer(tmp_path_factory.mktemp("healthy"), *LAYOUT)


def per_rank(result, kind) -> dict[int, list]:
    assert result.returncode == 0, result.explain()
    return {rank: log.of_kind(kind) for rank, log in result.run.ranks.items()}


def test_same_seed_per_node_gives_identical_completion_hashes_on_the_ranks_of_the_node(same_seed):
    rollouts = per_rank(same_seed, Rollout)
    assert [r.step for r in rollouts[0]] == [0, 1, 2]
    for mine, theirs in zip(rollouts[0], rollouts[1], strict=True):
        assert mine.prompt_hashes == theirs.prompt_hashes and mine.group_ids == theirs.group_ids == [0]
        assert mine.completion_hashes == theirs.completion_hashes


def test_healthy_ranks_sample_different_completions_of_the_same_prompt(healthy):
    rollouts = per_rank(healthy, Rollout)
    for mine, theirs in zip(rollouts[0], rollouts[1], strict=True):
        assert mine.prompt_hashes == theirs.prompt_hashes
        assert mine.completion_hashes != theirs.completion_hashes


def test_the_ranks_own_gather_sees_the_copies_collide_as_they_are_sampled(same_seed, healthy):
    # compare_across_ranks: each step's hashes gathered on the ranks, the share found on another rank logged.
    for result, expected in ((same_seed, 1.0), (healthy, 0.0)):
        for rank, steps in per_rank(result, Step).items():
            assert [s.metrics["cross_rank_duplicate_frac"] for s in steps] == [expected] * 3, rank


def test_rank_0_says_the_shared_seed_before_the_first_rollout_without_watch(same_seed, healthy):
    said = [line for line in same_seed.output.splitlines() if "seed collision" in line]
    assert len(said) == 1 and "ranks 0-1" in said[0] and "the sampling seed 0" in said[0], same_seed.output[-3000:]
    assert "set_seed(seed, device_specific=True)" in said[0]
    assert "seed collision" not in healthy.output


def test_the_seed_audit_shows_the_shared_seed_and_its_absence(same_seed, healthy):
    shared, apart = per_rank(same_seed, Rng), per_rank(healthy, Rng)
    for audits in (shared, apart):
        assert [r.tag for r in audits[0]] == ["init"] and audits[0][0].step == 0  # before the first rollout
    assert shared[0][0].torch_cpu == shared[1][0].torch_cpu
    assert shared[0][0].sampling_seed == shared[1][0].sampling_seed == 0
    assert apart[0][0].torch_cpu != apart[1][0].torch_cpu
    assert (apart[0][0].sampling_seed, apart[1][0].sampling_seed) == (0, 1)


def test_the_rollout_record_agrees_with_the_trainers_own_metrics(healthy):
    run = healthy.run
    for log in run.ranks.values():
        for rollout, step in zip(log.of_kind(Rollout), log.of_kind(Step), strict=True):
            assert rollout.step == step.step and rollout.num_completions == 1
            assert rollout.length_mean == step.metrics["completion_length"]
            assert rollout.max_length == 8 and rollout.temperature == 1.0
            # one member of each group per rank: no group statistic on the rank
            assert rollout.zero_std_frac is None and rollout.duplicate_rate is None


def test_every_tenth_step_audits_the_seeds_again(launch_trainer, tmp_path):
    result = launch_trainer(tmp_path, "--steps", "11", "--beta", "0", nproc=0)
    audits = per_rank(result, Rng)[0]
    assert [(r.tag, r.step) for r in audits] == [("init", 0), ("step", 10)]
