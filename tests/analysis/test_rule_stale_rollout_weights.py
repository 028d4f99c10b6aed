import json

from rolloutdata import METRIC_LOGS, assert_documented, healthy_metrics, metrics_run

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import stale_rollout_weights

CFG = stale_rollout_weights.Config()


def _trl_state(tmp_path, diffs):
    state = json.loads((METRIC_LOGS / "trl_healthy" / "checkpoint-12" / "trainer_state.json").read_text())
    for entry, diff in zip(state["log_history"], diffs, strict=False):
        entry["sampling/sampling_logp_difference/mean"] = diff
        entry["sampling/sampling_logp_difference/max"] = diff * 8
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps(state, indent=2, sort_keys=True))
    return path


def test_trl_logprob_difference_growing_step_after_step_is_a_warning(tmp_path):
    diffs = [0.02 * 1.4 ** n for n in range(12)]
    [f] = stale_rollout_weights.check(load_evidence([_trl_state(tmp_path, diffs)]), CFG)
    assert (f.id, f.severity, f.evidence["source"], f.evidence["metric"]) == (
        "stale-rollout-weights", "warning", "trl", "rollout_logprob_diff")
    assert f.evidence["late_value"] > 0.3 and f.evidence["ratio"] > 3 and f.evidence["num_steps"] == 12
    assert_documented([f])


def test_a_steady_small_gap_between_engine_and_trainer_is_normal(tmp_path):
    diffs = [0.03 + 0.002 * (n % 3) for n in range(12)]
    assert not list(stale_rollout_weights.check(load_evidence([_trl_state(tmp_path, diffs)]), CFG))


def test_ms_swift_rollout_kl_is_read_with_its_own_floor(tmp_path):
    metrics = [{**m, "rollout_correction/kl": 0.001 * 2 ** n} for n, m in enumerate(healthy_metrics(10))]
    [f] = stale_rollout_weights.check(load_evidence([metrics_run(tmp_path, metrics)]), CFG)
    assert f.evidence["metric"] == "rollout_kl" and f.evidence["late_value"] >= CFG.min_late_kl
