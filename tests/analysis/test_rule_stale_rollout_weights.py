import json

from rolloutdata import METRIC_LOGS, assert_documented, healthy_metrics, metrics_run, write_run
from rundata import common

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import stale_rollout_weights
from grpo_doctor.schema import WeightSync

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


# -- the weight-sync check's records (rank/weight_sync.py) ----------------------------------------------

def sync(rank: int, n: int, **fields) -> WeightSync:
    values = dict(engine="hf-copy", checked=True, num_tensors=21, num_elements=332_928, num_samples=4)
    values.update(fields)
    return WeightSync(**common(rank, step=n, t=100.0 + 10 * n + 0.5), **values)


def differing(*names: str) -> dict:
    return dict(num_mismatched=len(names), mismatched=[
        {"name": n, "engine_name": n, "trainer_sum": 1.5, "engine_sum": 1.25, "samples_differing": 4} for n in names])


def test_a_weight_push_that_leaves_the_engine_behind_is_critical_at_its_first_step(tmp_path):
    stale = differing("model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight")
    run = write_run(tmp_path, {r: [sync(r, n, **(stale if n >= 3 else {})) for n in range(6)] for r in range(2)})
    [f] = stale_rollout_weights.check(load_evidence([run]), CFG)
    assert (f.id, f.severity, f.step, f.ranks, f.phase) == ("stale-rollout-weights", "critical", 3, (0, 1), "weight-sync")
    assert f.evidence["tensors"] == ["model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight"]
    assert (f.evidence["first_step"], f.evidence["last_matching_step"], f.evidence["num_checks"]) == (3, 2, 12)
    assert (f.evidence["num_mismatched"], f.evidence["num_tensors"], f.evidence["source"]) == (2, 21, "weight_sync")
    assert "step 3" in f.title and "model.embed_tokens.weight" in f.title
    assert_documented([f])


def test_one_rank_whose_engine_fell_behind_is_named_alone(tmp_path):
    per_rank = {0: [sync(0, n) for n in range(4)],
                1: [sync(1, n, **(differing("lm_head.weight") if n >= 2 else {})) for n in range(4)]}
    [f] = stale_rollout_weights.check(load_evidence([write_run(tmp_path, per_rank)]), CFG)
    assert (f.severity, f.step, f.ranks, f.hosts) == ("critical", 2, (1,), ("node-0",))


def test_engine_weights_that_match_after_every_push_give_nothing(tmp_path):
    run = write_run(tmp_path, {r: [sync(r, n) for n in range(6)] for r in range(2)})
    assert not list(stale_rollout_weights.check(load_evidence([run]), CFG))


def test_engine_tensors_no_trainer_tensor_feeds_are_a_warning_and_trainer_only_ones_info(tmp_path):
    engine_only = dict(num_engine_only=2, engine_only=["model.layers.0.mlp.experts.w13_weight",
                                                       "model.layers.0.mlp.experts.w2_weight"])
    [f] = stale_rollout_weights.check(load_evidence([write_run(tmp_path / "a", {0: [sync(0, 0, **engine_only)]})]), CFG)
    assert f.severity == "warning" and f.evidence["engine_only"][0].endswith("w13_weight")
    assert_documented([f])
    trainer_only = dict(num_trainer_only=1, trainer_only=["lm_head.weight"], num_unchecked=1,
                        unchecked=[{"name": "embed", "why": "trainer shape [50, 16], engine embed shape [25, 16]"}])
    [f] = stale_rollout_weights.check(load_evidence([write_run(tmp_path / "b", {0: [sync(0, 0, **trainer_only)]})]),
                                      CFG)
    assert f.severity == "info" and f.evidence["unchecked"] == ["embed: trainer shape [50, 16], engine embed shape [25, 16]"]


def test_a_vllm_server_is_said_not_to_be_compared(tmp_path):
    record = sync(0, 1, engine="trl-vllm-server", checked=False, num_tensors=0, num_elements=0,
                  reason="TRL's vLLM server holds the rollout weights in another process")
    [f] = stale_rollout_weights.check(load_evidence([write_run(tmp_path, {0: [record]})]), CFG)
    assert (f.severity, f.evidence["engine"]) == ("info", "trl-vllm-server") and "another process" in f.title
    assert_documented([f])
