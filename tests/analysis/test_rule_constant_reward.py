from rolloutdata import METRIC_LOGS, assert_documented, healthy_metrics, metrics_run, rollout, write_run

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import constant_reward

CFG = constant_reward.Config()


def _constant(value):
    return {"loss": 0.0, "reward": value, "reward_std": 0.0, "frac_reward_zero_std": 1.0, "grad_norm": 0.0}


def test_one_reward_for_every_completion_at_every_step_is_critical(tmp_path):
    [f] = constant_reward.check(load_evidence([metrics_run(tmp_path, [_constant(1.0)] * 6)]), CFG)
    assert (f.id, f.severity, f.step) == ("constant-reward", "critical", 0)
    assert f.evidence == {"source": "grpo-doctor", "first_step": 0, "last_step": 5, "num_steps": 6,
                          "reward_value": 1.0, "same_value_every_step": True, "std_metric": "reward_std_batch",
                          "duplicate_rate": None}
    assert "1.0 for every completion" in f.title
    assert_documented([f])


def test_a_value_that_changes_between_steps_is_a_warning(tmp_path):
    metrics = healthy_metrics(3) + [_constant(0.0)] * 5
    [f] = constant_reward.check(load_evidence([metrics_run(tmp_path, metrics)]), CFG)
    assert (f.severity, f.evidence["same_value_every_step"], f.evidence["first_step"]) == ("warning", False, 3)


def test_ms_swift_is_read_from_the_per_function_stds_not_its_group_mean_reward_std():
    [f] = constant_reward.check(load_evidence([METRIC_LOGS / "swift_case2"]), CFG)
    assert (f.evidence["source"], f.evidence["std_metric"], f.evidence["reward_value"]) == (
        "ms-swift", "reward_func_std_max", 2.0)
    assert not list(constant_reward.check(load_evidence([METRIC_LOGS / "swift_healthy"]), CFG))


def test_trl_constant_reward_run_is_found_from_its_trainer_state():
    [f] = constant_reward.check(load_evidence([METRIC_LOGS / "trl_constant_reward"]), CFG)
    assert (f.evidence["source"], f.evidence["num_steps"], f.severity) == ("trl", 10, "critical")


def test_rollout_records_alone_show_it_when_no_reward_std_is_logged(tmp_path):
    per_rank = {r: [rollout(r, n, ["1+1="] * 2, [f"a{r}{n}", f"b{r}{n}"], reward_mean=1.0, reward_std=0.0)
                    for n in range(5)] for r in range(2)}
    [f] = constant_reward.check(load_evidence([write_run(tmp_path, per_rank)]), CFG)
    assert (f.evidence["std_metric"], f.evidence["reward_value"]) == ("rollout records", 1.0)


def test_identical_copies_point_to_the_sampling_before_the_reward_function():
    [f] = constant_reward.check(load_evidence([METRIC_LOGS / "swift_case2"]), CFG)
    assert f.evidence["duplicate_rate"] == 0.875 and f.hints[0] == constant_reward.HINT_IDENTICAL
