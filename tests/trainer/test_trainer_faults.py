"""Every --inject fault, run for real under torchrun (2 ranks, gloo, CPU), seen in the records."""
from __future__ import annotations

import math

import pytest

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import run_rules
from grpo_doctor.schema import PhaseBegin, PhaseEnd, Rollout, Step

pytestmark = pytest.mark.distributed

# Short enough for the test, long enough that no healthy collective of this tiny run waits so long.
TIMEOUT_S = 10


def metric(log, key: str) -> list:
    return [s.metrics.get(key) for s in log.of_kind(Step)]


def durations(log, phase: str) -> list[float]:
    return [r.duration_s for r in log.of_kind(PhaseEnd) if r.phase == phase]


def only_error(log):
    assert len(log.errors) == 1, log.errors
    return log.errors[0]


@pytest.fixture(scope="module")
def same_seed_and_slow(launch_trainer, tmp_path_factory):
    # B=1, G=2: each rank samples one copy of the step's prompt, as in case 2 of CASES.md.
    return launch_trainer(tmp_path_factory.mktemp("seed"), "--steps", "3", "--per-device-batch", "1",
                          "--num-generations", "2", "--inject", "same-seed-per-node",
                          "--inject", "slow:rank=1,delay_s=0.3")


def test_same_seed_per_node_makes_every_group_identical_and_training_stall(same_seed_and_slow):
    result = same_seed_and_slow
    assert result.returncode == 0, result.explain()
    for log in result.run.ranks.values():
        assert metric(log, "frac_identical_groups") == [1.0, 1.0, 1.0]
        assert metric(log, "frac_reward_zero_std") == [1.0, 1.0, 1.0]
        assert metric(log, "reward_std") == [0.0, 0.0, 0.0]
        assert metric(log, "loss") == [0.0, 0.0, 0.0]  # zero advantage, policy never leaves the reference
        assert metric(log, "kl") == [0.0, 0.0, 0.0]


def test_slow_rank_spends_delay_in_its_phase_and_the_other_rank_waits_in_the_next_collective(same_seed_and_slow):
    run = same_seed_and_slow.run
    assert all(d >= 0.3 for d in durations(run.ranks[1], "rollout"))
    assert all(d < 0.3 for d in durations(run.ranks[0], "rollout"))
    assert all(d >= 0.2 for d in durations(run.ranks[0], "reward"))  # all_gather waits for rank 1


@pytest.fixture(scope="module")
def constant_reward_and_nan(launch_trainer, tmp_path_factory):
    return launch_trainer(tmp_path_factory.mktemp("nan"), "--steps", "4", "--inject", "constant-reward:value=0.5",
                          "--inject", "nan-loss:step=2,rank=1")


def test_constant_reward_gives_zero_reward_std(constant_reward_and_nan):
    result = constant_reward_and_nan
    assert result.returncode == 0, result.explain()
    for log in result.run.ranks.values():
        assert metric(log, "reward") == [0.5] * 4
        assert metric(log, "reward_std") == [0.0] * 4
        assert metric(log, "frac_reward_zero_std") == [1.0] * 4


def test_constant_reward_makes_every_group_in_the_rollout_records_zero_std(constant_reward_and_nan):
    for log in constant_reward_and_nan.run.ranks.values():
        rollouts = log.of_kind(Rollout)
        assert [r.step for r in rollouts] == [0, 1, 2, 3]
        for r in rollouts:  # B = G = 4: each rank holds one whole group
            assert (r.num_groups, r.zero_std_frac, r.reward_mean, r.reward_std) == (1, 1.0, 0.5, 0.0)


def test_nan_loss_starts_on_its_rank_and_spreads_through_the_gradient_all_reduce(constant_reward_and_nan):
    ranks = constant_reward_and_nan.run.ranks
    loss0, loss1 = metric(ranks[0], "loss"), metric(ranks[1], "loss")
    assert all(math.isfinite(v) for v in loss1[:2])
    assert math.isnan(loss1[2]) and math.isfinite(loss0[2])
    assert math.isnan(loss0[3]) and math.isnan(loss1[3])  # the NaN weights reached rank 0
    assert math.isnan(metric(ranks[0], "grad_norm")[2])


def test_the_report_names_the_nan_loss_at_the_injected_step(constant_reward_and_nan):
    findings, _ = run_rules(load_evidence([constant_reward_and_nan.run_dir]))
    by_id = {f.id: f for f in findings}
    nan = by_id["nan-loss"]
    # Step 2: rank 1's loss, and both ranks' gradient norm after the all_reduce spread it.
    assert (nan.severity, nan.step, nan.ranks) == ("critical", 2, (0, 1))
    assert nan.evidence["metrics"][0] == "loss" and nan.evidence["last_finite_loss"] is not None


def test_hang_leaves_its_phase_open_until_the_collective_timeout_ends_the_job(launch_trainer, tmp_path):
    result = launch_trainer(tmp_path, "--steps", "3", "--dist-timeout-s", str(TIMEOUT_S),
                            "--inject", "hang:rank=1,phase=rollout,step=1")
    assert result.returncode != 0, result.explain()
    assert result.elapsed_s >= TIMEOUT_S
    stuck, waiting = result.run.ranks[1], result.run.ranks[0]
    assert stuck.open_path == "rollout"
    assert stuck.last_step == 0
    assert [r for r in stuck.of_kind(PhaseBegin)][-1].step == 1
    assert stuck.errors == []
    assert stuck.end is not None and stuck.end.signal == "SIGTERM"  # torchrun ended it
    error = only_error(waiting)
    assert (error.phase, error.step) == ("reward", 1)  # waited in the reward all_gather
    assert "Timed out" in error.message


def test_desync_leaves_ranks_failing_in_different_phases_of_one_step(launch_trainer, tmp_path):
    result = launch_trainer(tmp_path, "--steps", "3", "--dist-timeout-s", str(TIMEOUT_S),
                            "--inject", "desync:rank=1,step=1")
    assert result.returncode != 0, result.explain()
    ranks = result.run.ranks
    odd, others = only_error(ranks[1]), only_error(ranks[0])
    assert (odd.phase, odd.step) == ("rollout", 1)  # in the broadcast the others never join
    assert (others.phase, others.step) == ("reward", 1)


def test_oom_is_a_real_memory_error_in_the_chosen_phase(launch_trainer, tmp_path):
    result = launch_trainer(tmp_path, "--steps", "3", "--inject", "oom:rank=1,step=1")
    assert result.returncode != 0, result.explain()
    error = result.run.ranks[1].errors[0]
    assert (error.exc_type, error.phase, error.step) == ("MemoryError", "forward", 1)
    assert "MemoryError" in error.traceback


def test_crash_by_exception_is_recorded_as_runtime_error(launch_trainer, tmp_path):
    result = launch_trainer(tmp_path, "--steps", "3", "--inject", "crash:rank=0,step=1,phase=backward")
    assert result.returncode != 0, result.explain()
    log = result.run.ranks[0]
    error = log.errors[0]
    assert (error.exc_type, error.phase, error.step) == ("RuntimeError", "backward", 1)
    assert "injected crash on rank 0 at step 1" in error.message
    assert log.end.reason == "exception"


def test_crash_by_sigkill_leaves_no_end_record_but_the_last_step_s_records(launch_trainer, tmp_path):
    result = launch_trainer(tmp_path, "--steps", "3", "--inject", "crash:rank=1,step=1,how=sigkill,phase=backward")
    assert result.returncode != 0, result.explain()
    log = result.run.ranks[1]
    assert log.end is None and log.errors == []
    assert log.last_step == 0
    assert log.open_path == "backward"
    assert {r.phase for r in log.of_kind(PhaseBegin) if r.step == 1} >= {"rollout", "forward", "backward"}
