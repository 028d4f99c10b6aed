import dataclasses
import json
import shutil

import pandas as pd
import pytest
from rolloutdata import METRIC_LOGS, rng, rollout, step, write_run
from rundata import header, write_rank

from grpo_doctor.analysis.grpo_metrics import rank_metrics
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


def test_trl_rewards_are_the_reward_functions_columns_with_the_probe_and_advantage_left_out():
    pytest.importorskip("pyarrow")
    # A real TRL 1.16 run (make_trl_probe_fixture.py): functions accuracy and digits_only (None for an
    # empty completion), grpo-doctor's probe column grpo_doctor_rollouts (all NaN), then advantage.
    ev = load_evidence([METRIC_LOGS / "trl_probe"])
    step1 = ev.completions[ev.completions["step"] == 1]
    frame = pd.read_parquet(METRIC_LOGS / "trl_probe" / "completions" / "completions_00001.parquet")
    assert frame["grpo_doctor_rollouts"].isna().all() and frame["digits_only"].isna().any()
    # TRL's total: the nansum over the functions that scored the row (equal weights, TRL's default)
    expected = frame[["accuracy", "digits_only"]].sum(axis=1, min_count=1).tolist()
    assert step1["reward"].tolist() == expected == [0.0, 0.5, 0.0, 0.5, 0.0, 0.0, 0.0, 0.0]
    # the mean of the rows' rewards is the `reward` TRL logged for the step
    state = json.loads((METRIC_LOGS / "trl_probe" / "checkpoint-3" / "trainer_state.json").read_text())
    assert step1["reward"].mean() == pytest.approx(state["log_history"][0]["reward"])


def test_without_its_trainer_state_a_trl_parquet_file_reads_the_columns_before_advantage(tmp_path):
    pytest.importorskip("pyarrow")
    shutil.copy(METRIC_LOGS / "trl_probe" / "completions" / "completions_00001.parquet", tmp_path)
    ev = load_evidence([tmp_path / "completions_00001.parquet"])
    assert ev.completions["reward"].tolist() == [0.0, 0.5, 0.0, 0.5, 0.0, 0.0, 0.0, 0.0]


def _swift_run_with_probe(tmp_path, weights):
    """ms-swift's completions.jsonl and logging.jsonl with the probe as a third reward function (its NaN
    column), `reward_weights` in args.json, and the columns ms-swift writes after advantages."""
    args = json.loads((METRIC_LOGS / "swift_healthy" / "args.json").read_text())
    args.update(reward_funcs=["accuracy", "format", "grpo_doctor_rollouts"], reward_weights=weights)
    (tmp_path / "args.json").write_text(json.dumps(args))
    lines = []
    for line in (METRIC_LOGS / "swift_healthy" / "completions.jsonl").read_text().splitlines():
        table = json.loads(line)
        n = len(table["completion"])
        columns = list(table)
        at = columns.index("advantages")
        table = {k: table[k] for k in columns[:at]} | {"GrpoDoctorRollouts": [float("nan")] * n} | {
            k: table[k] for k in columns[at:]} | {"solution": ["391"] * n, "num_turns": [1] * n}
        lines.append(json.dumps(table))
    (tmp_path / "completions.jsonl").write_text("\n".join(lines) + "\n")
    logging = [json.loads(x) for x in (METRIC_LOGS / "swift_healthy" / "logging.jsonl").read_text().splitlines()]
    logging = [{**x, "rewards/GrpoDoctorRollouts/mean": float("nan")} if "reward" in x else x for x in logging]
    (tmp_path / "logging.jsonl").write_text("".join(json.dumps(x) + "\n" for x in logging))
    return json.loads(lines[0])


def test_ms_swift_rewards_are_weighted_by_its_reward_weights_and_the_probe_is_left_out(tmp_path):
    first = _swift_run_with_probe(tmp_path, weights=[1.0, 0.5, 0.0])
    ev = load_evidence([tmp_path])
    expected = [a + 0.5 * f for a, f in zip(first["AccuracyORM"], first["Format"], strict=True)][:8]
    assert ev.completions["reward"].tolist()[:8] == pytest.approx(expected)
    assert not ev.warnings


def test_ms_swift_reward_weights_that_do_not_fit_the_columns_are_a_warning_and_equal_weights_are_used(tmp_path):
    first = _swift_run_with_probe(tmp_path, weights=[1.0, 0.5])
    ev = load_evidence([tmp_path])
    expected = [a + f for a, f in zip(first["AccuracyORM"], first["Format"], strict=True)][:8]
    assert ev.completions["reward"].tolist()[:8] == pytest.approx(expected)
    assert any("reward_weights" in w and "equal weights" in w for w in ev.warnings)


def test_a_logged_total_reward_column_is_taken_as_it_is(tmp_path):
    # ms-swift before 3.4 wrote only the total, as `reward`
    rows = [{"step": "1", "prompt": "p", "completion": c, "reward": r} for c, r in (("a", 1.5), ("b", 0.5))]
    (tmp_path / "completions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert load_evidence([tmp_path / "completions.jsonl"]).completions["reward"].tolist() == [1.5, 0.5]


def test_single_completion_groups_do_not_dilute_the_duplicate_rate(tmp_path):
    # the same reading as checks.groups.duplicate_rate: only groups of two or more completions count
    rows = [{"step": 1, "prompt": p, "completion": c}
            for p, c in (("p", "same"), ("p", "same"), ("q", "x"), ("r", "y"))]
    (tmp_path / "completions.jsonl").write_text(json.dumps({k: [r[k] for r in rows] for k in rows[0]}) + "\n")
    ev = load_evidence([tmp_path / "completions.jsonl"])
    assert ev.steps.set_index("step").loc[1, "duplicate_rate"] == 0.5


SWIFT_CLI = "/opt/conda/lib/python3.11/site-packages/swift/cli/rlhf.py"  # what `swift rlhf` runs on each rank


def _reward_std_names(tmp_path, argv):
    """The canonical name a rank's logged `reward_std` gets when the rank ran `argv`."""
    for rank in range(2):
        write_rank(tmp_path, rank, [dataclasses.replace(header(rank, world_size=2), argv=argv)]
                   + [step(rank, n, reward=0.5, reward_std=0.3) for n in range(3)])
    return {c for c in rank_metrics(load_evidence([tmp_path])).columns if c.startswith("reward_std")}


def test_a_trl_script_in_a_folder_named_like_swift_is_not_taken_for_ms_swift(tmp_path):
    assert _reward_std_names(tmp_path, ["/home/swiftuser/train.py", "--num_generations", "8"]) == {
        "reward_std_batch"}


def test_ranks_started_by_the_ms_swift_cli_log_the_mean_of_group_stds_unless_rewards_scale_by_batch(tmp_path):
    assert _reward_std_names(tmp_path / "a", [SWIFT_CLI, "--rlhf_type", "grpo"]) == {"reward_std_group_mean"}
    assert _reward_std_names(tmp_path / "b", [SWIFT_CLI, "--rlhf_type", "grpo", "--scale_rewards", "batch"]) == {
        "reward_std_batch"}
    assert _reward_std_names(tmp_path / "c", [SWIFT_CLI, "--scale_rewards=batch"]) == {"reward_std_batch"}


def test_a_real_ms_swift_4_6_output_dir_with_the_probe_reads_its_rewards_from_the_one_weighted_function():
    # tests/data/metric_logs/swift46_probe: written by `swift rlhf --rlhf_type grpo` 4.6.0 on CPU
    # (tests/integrations/test_swift_run.py's job) with --reward_funcs digit_share grpo_doctor_rollouts
    # --reward_weights 1 0 --log_completions true. Its logging.jsonl has no metrics for the probe, its
    # completions.jsonl a NaN GrpoDoctorRollouts column, and steps written as text.
    ev = load_evidence([METRIC_LOGS / "swift46_probe"])
    assert not ev.warnings
    steps = ev.steps.set_index("step")
    assert steps.index.tolist() == [1, 2, 3, 4] and set(steps["source"]) == {"ms-swift"}
    per_step = ev.completions.groupby("step")["reward"].mean()
    assert per_step.tolist() == pytest.approx(steps["reward"].tolist(), rel=1e-6)  # DigitShare alone, weight 1
