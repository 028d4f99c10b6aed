import json
import shutil

import pandas as pd
import pytest
from rolloutdata import METRIC_LOGS, rng, rollout, step, write_run

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.metric_logs import read_metric_log


def test_a_trl_output_directory_gives_steps_in_the_canonical_names_and_its_completions():
    ev = load_evidence([METRIC_LOGS / "trl_healthy"])
    steps = ev.steps
    assert set(steps["source"]) == {"trl"} and steps["step"].tolist() == list(range(1, 13))
    assert (steps["rank"] == 0).all() and steps["t"].isna().all()
    # TRL's reward_std is the batch std; its names map to one vocabulary
    for name in ("reward_std_batch", "completion_length_mean", "clipped_frac", "entropy", "kl", "reward_func_std_max"):
        assert steps[name].notna().all(), name
    assert "reward_std_group_mean" not in steps and "reward_std" not in steps
    assert steps.loc[0, "completion_length_mean"] == 4.125 and steps.loc[0, "clipped_frac"] == 0.5


def test_trl_completion_parquet_files_give_texts_and_diversity():
    pytest.importorskip("pyarrow")  # pandas reads parquet through it; without it a warning says so
    ev = load_evidence([METRIC_LOGS / "trl_healthy"])
    steps = ev.steps
    # completions/completions_0000{1,2,3}.parquet: rows per step, groups by prompt, the reward column summed
    assert sorted(ev.completions["step"].unique()) == [1, 2, 3]
    assert set(ev.completions["source"]) == {"trl"} and ev.completions["reward"].notna().all()
    assert steps.set_index("step").loc[1:3, "duplicate_rate"].notna().all()


def test_ms_swift_logs_keep_its_group_mean_reward_std_apart_and_read_its_args():
    ev = load_evidence([METRIC_LOGS / "swift_healthy"])
    steps = ev.steps
    assert set(steps["source"]) == {"ms-swift"} and steps["step"].tolist() == list(range(1, 13))  # end lines skipped
    assert steps["reward_std_group_mean"].notna().all() and "reward_std_batch" not in steps
    assert steps["entropy"].notna().all()  # from entropy/mean
    [log] = [m for m in ev.metric_logs if m.path.name == "logging.jsonl"]
    assert log.args["beta"] == 0.04 and log.args["scale_rewards"] == "group"
    # completions.jsonl: one columnar line per logging step
    assert len(ev.completions) == 16 and ev.completions["step"].tolist() == [1] * 8 + [2] * 8


def test_ms_swift_with_batch_scaled_rewards_logs_a_batch_std(tmp_path):
    shutil.copy(METRIC_LOGS / "swift_healthy" / "logging.jsonl", tmp_path)
    args = json.loads((METRIC_LOGS / "swift_healthy" / "args.json").read_text())
    (tmp_path / "args.json").write_text(json.dumps({**args, "scale_rewards": "batch"}))
    steps = load_evidence([tmp_path / "logging.jsonl"]).steps
    assert steps["reward_std_batch"].notna().all() and "reward_std_group_mean" not in steps


def test_identical_completions_in_every_group_show_as_the_duplicate_rate():
    ev = load_evidence([METRIC_LOGS / "swift_case2"])
    assert ev.steps.set_index("step").loc[[1, 2], "duplicate_rate"].tolist() == [0.875, 0.875]


def test_only_the_latest_checkpoint_is_read_and_eval_entries_are_skipped(tmp_path):
    state = json.loads((METRIC_LOGS / "trl_healthy" / "checkpoint-12" / "trainer_state.json").read_text())
    for n in (4, 12):
        (tmp_path / f"checkpoint-{n}").mkdir()
        history = [e for e in state["log_history"] if e["step"] <= n] + [{"eval_loss": 0.5, "step": n}]
        (tmp_path / f"checkpoint-{n}" / "trainer_state.json").write_text(json.dumps({**state, "log_history": history}))
    (tmp_path / "config.json").write_text("{}")
    ev = load_evidence([tmp_path])
    assert ev.steps["step"].tolist() == list(range(1, 13)) and [m.path.parent.name for m in ev.metric_logs] == [
        "checkpoint-12"]


def test_a_json_file_named_trainer_state_without_history_is_a_warning(tmp_path):
    path = tmp_path / "trainer_state.json"
    path.write_text('{"global_step": 3}')
    ev = load_evidence([path])
    assert ev.steps.empty and any("no log_history" in w for w in ev.warnings)
    assert read_metric_log(path).source == "trl"


def test_rollout_and_rng_records_become_tables_and_their_samples_completions(tmp_path):
    per_rank = {r: [step(r, 0, loss=0.1), rollout(r, 0, ["a=", "a="], [f"x{r}", f"y{r}"]),
                    rng(r, 0, torch_cpu=f"c{r}", tp_group=None)] for r in range(2)}
    ev = load_evidence([write_run(tmp_path, per_rank)])
    assert ev.rollouts[["rank", "step", "num_completions", "duplicate_rate", "temperature"]].values.tolist() == [
        [0, 0, 2, 0.0, 1.0], [1, 0, 2, 0.0, 1.0]]
    assert ev.rng[["rank", "tag", "torch_cpu"]].values.tolist() == [[0, "step", "c0"], [1, "step", "c1"]]
    assert [r.rank for r in ev.rollout_records] == [0, 1] and len(ev.rollout_records[0].completion_hashes) == 2
    assert ev.completions[["source", "rank", "completion"]].values.tolist() == [["grpo-doctor", 0, "x0"],
                                                                                ["grpo-doctor", 1, "x1"]]
    assert set(ev.steps["source"]) == {"grpo-doctor"}


def test_a_run_directory_and_a_trl_log_together_keep_their_sources_apart(tmp_path):
    write_run(tmp_path / "run", {0: [step(0, n, loss=0.1, reward_std=0.2) for n in range(3)]})
    ev = load_evidence([tmp_path / "run", METRIC_LOGS / "trl_beta0"])
    counts = ev.steps.groupby("source").size().to_dict()
    assert counts == {"grpo-doctor": 3, "trl": 8}
    assert pd.api.types.is_numeric_dtype(ev.steps["loss"])
