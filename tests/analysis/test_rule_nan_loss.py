import json
import math

from rolloutdata import METRIC_LOGS, assert_documented, healthy_metrics, metrics_run, step, write_run

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import nan_loss

CFG = nan_loss.Config()


def test_the_first_non_finite_step_and_its_ranks_are_named(tmp_path):
    metrics = healthy_metrics(6)
    per_rank = {r: [step(r, n, **m) for n, m in enumerate(metrics)] for r in range(4)}
    per_rank[2][3] = step(2, 3, **{**metrics[3], "loss": math.nan, "grad_norm": math.inf})
    per_rank[1][4] = step(1, 4, **{**metrics[4], "grad_norm": math.nan})
    [f] = nan_loss.check(load_evidence([write_run(tmp_path, per_rank)]), CFG)
    assert (f.id, f.severity, f.step, f.ranks, f.hosts) == ("nan-loss", "critical", 3, (2,), ("node-1",))
    assert f.evidence["metrics"] == ["loss", "grad_norm"] and f.evidence["values"] == {"loss": "nan",
                                                                                         "grad_norm": "inf"}
    assert f.evidence["num_steps_affected"] == 2 and f.evidence["last_finite_loss"] == metrics[2]["loss"]
    assert_documented([f])


def test_a_metric_that_is_simply_not_logged_is_no_nan(tmp_path):
    metrics = [{k: v for k, v in m.items() if k != "grad_norm" or n % 2} for n, m in enumerate(healthy_metrics(6))]
    assert not list(nan_loss.check(load_evidence([metrics_run(tmp_path, metrics)]), CFG))


def test_a_nan_grad_norm_in_trl_trainer_state_names_the_step(tmp_path):
    state = json.loads((METRIC_LOGS / "trl_healthy" / "checkpoint-12" / "trainer_state.json").read_text())
    for entry in state["log_history"]:
        if entry["step"] >= 7:
            entry["grad_norm"] = math.nan  # written as NaN, as the Trainer's json.dumps does
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps(state, indent=2, sort_keys=True))
    assert "NaN" in path.read_text()
    [f] = nan_loss.check(load_evidence([path]), CFG)
    assert (f.step, f.ranks, f.evidence["source"], f.evidence["metrics"]) == (7, (), "trl", ["grad_norm"])
    assert f.evidence["num_steps_affected"] == 6
