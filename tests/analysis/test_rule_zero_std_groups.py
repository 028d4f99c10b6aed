from rolloutdata import METRIC_LOGS, assert_documented, healthy_metrics, metrics_run

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import zero_std_groups

CFG = zero_std_groups.Config()


def test_most_groups_without_reward_variance_over_a_window_is_a_warning(tmp_path):
    metrics = healthy_metrics(5) + [{**m, "frac_reward_zero_std": 0.875} for m in healthy_metrics(12)]
    [f] = zero_std_groups.check(load_evidence([metrics_run(tmp_path, metrics)]), CFG)
    assert (f.id, f.severity) == ("zero-std-groups", "warning")
    assert f.evidence["zero_std_share"] == 0.875 and f.evidence["num_steps"] == CFG.window_steps
    assert f.evidence["first_step"] >= 5 and f.evidence["share_overall"] < 0.875
    assert any("dynamic_sample" in h for h in f.hints) and any("filter_groups" in h for h in f.hints)
    assert_documented([f])


def test_a_usual_share_of_zero_std_groups_does_not_fire(tmp_path):
    assert not list(zero_std_groups.check(load_evidence([metrics_run(tmp_path, healthy_metrics(30))]), CFG))


def test_runs_shorter_than_the_window_are_not_judged(tmp_path):
    metrics = [{"frac_reward_zero_std": 1.0}] * (CFG.window_steps - 1)
    assert not list(zero_std_groups.check(load_evidence([metrics_run(tmp_path, metrics)]), CFG))


def test_framework_logs_of_a_degenerate_run_fire_and_healthy_ones_do_not():
    [f] = zero_std_groups.check(load_evidence([METRIC_LOGS / "swift_case2"]), CFG)
    assert f.evidence["zero_std_share"] == 1.0
    for healthy in ("swift_healthy", "trl_healthy"):
        assert not list(zero_std_groups.check(load_evidence([METRIC_LOGS / healthy]), CFG))
