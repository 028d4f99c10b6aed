from rolloutdata import METRIC_LOGS, assert_documented, healthy_metrics, metrics_run

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import entropy_collapse

CFG = entropy_collapse.Config()


def test_entropy_falling_to_a_tenth_of_its_start_is_a_warning(tmp_path):
    metrics = [{**m, "entropy": 2.0 * 0.7 ** n} for n, m in enumerate(healthy_metrics(12))]
    [f] = entropy_collapse.check(load_evidence([metrics_run(tmp_path, metrics)]), CFG)
    assert (f.id, f.severity) == ("entropy-collapse", "warning")
    assert f.evidence["start_entropy"] == 1.4 and f.evidence["ratio"] < 0.1
    assert f.evidence["first_step_below"] == 8 and f.step == 8
    assert_documented([f])


def test_a_slow_healthy_decline_and_short_runs_do_not_fire(tmp_path):
    assert not list(entropy_collapse.check(load_evidence([metrics_run(tmp_path / "a", healthy_metrics(30))]), CFG))
    short = [{"entropy": 2.0}, {"entropy": 2.0}, {"entropy": 0.01}]
    assert not list(entropy_collapse.check(load_evidence([metrics_run(tmp_path / "b", short)]), CFG))


def test_ms_swift_entropy_mean_is_read():
    ev = load_evidence([METRIC_LOGS / "swift_healthy"])
    assert ev.steps["entropy"].notna().all()
    assert not list(entropy_collapse.check(ev, CFG))
