"""Metric files recognised by content: TensorBoard event files, W&B exports, verl's file logger.

The event files are written here by the writers the trainers use (torch.utils.tensorboard's SummaryWriter,
and tensorboard's own Writer for TF2-style tensor summaries); the W&B exports in the layouts the W&B app and
API write ("Step","<run> - <metric>","<run> - <metric>__MIN","<run> - <metric>__MAX"; `_step` records);
verl's file logger as verl/utils/tracking.py FileLogger writes it ({"step": N, "data": {...}}).
"""
import csv
import json

import pytest

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.metric_files import read_metric_files
from grpo_doctor.analysis.rules import run_rules

ROLLOUT_IDS = {"entropy-collapse", "nan-loss", "dead-step", "zero-std-groups", "constant-reward", "zero-kl",
               "length-collapse"}
COLLAPSING = [1.5, 1.48, 1.41, 1.1, 0.7, 0.3, 0.05, 0.01, 0.004, 0.002]
STEADY = [1.5 - 0.01 * n for n in range(10)]


def _rollout_ids(*paths):
    findings, _ = run_rules(load_evidence(list(paths)))
    return sorted(f.id for f in findings if f.id in ROLLOUT_IDS)


def _hf_metrics(n, entropy):
    """One logging step of a TRL GRPO run as its W&B / TensorBoard callbacks name it (train/ prefix)."""
    return {"train/loss": 0.01 * (n % 3), "train/grad_norm": 0.4, "train/learning_rate": 1e-6,
            "train/reward": 0.3 + 0.02 * n, "train/reward_std": 0.35, "train/frac_reward_zero_std": 0.2,
            "train/kl": 0.001 * n, "train/entropy": entropy, "train/completions/mean_length": 310.0,
            "train/completions/clipped_ratio": 0.02}


def _write_torch_events(directory, entropies, names=_hf_metrics):
    tensorboard = pytest.importorskip("torch.utils.tensorboard")
    writer = tensorboard.SummaryWriter(str(directory))
    for n, entropy in enumerate(entropies, start=1):
        for tag, value in names(n, entropy).items():
            writer.add_scalar(tag, value, n)
    writer.add_scalar("eval/loss", 0.5, 5)
    writer.close()
    [path] = directory.glob("events.out.tfevents.*")
    return path


def test_a_tensorboard_event_file_from_torch_summarywriter_is_read_and_its_collapse_found(tmp_path):
    path = _write_torch_events(tmp_path / "runs" / "Jun10_12-00-00_node1", COLLAPSING)
    [log] = read_metric_files(path)
    assert (log.format, log.source, log.num_rows) == ("tensorboard", "trl", 10)
    assert log.steps[0]["entropy"] == 1.5 and log.steps[0]["reward_std_batch"] == 0.35  # float32 read back as logged
    assert "eval_loss" not in log.steps[4] and "loss" in log.steps[4]
    assert _rollout_ids(tmp_path) == ["entropy-collapse"]  # found below the output directory (runs/<date>/)


def test_a_healthy_tensorboard_log_gives_no_rollout_finding(tmp_path):
    _write_torch_events(tmp_path, STEADY)
    assert _rollout_ids(tmp_path) == []


def test_verl_names_in_tensorboard_are_read_as_verl(tmp_path):
    def verl_names(n, entropy):
        return {"actor/entropy": entropy, "actor/pg_loss": 0.01, "actor/grad_norm": 0.2, "critic/score/mean": 0.4,
                "critic/score/max": 1.0, "critic/score/min": 0.0, "critic/advantages/max": 1.2,
                "critic/advantages/min": -1.2, "val-core/gsm8k/acc/mean@1": 0.5}
    path = _write_torch_events(tmp_path, COLLAPSING, verl_names)
    [log] = read_metric_files(path)
    assert log.source == "verl" and log.steps[-1]["entropy"] == 0.002 and log.steps[0]["reward_range_batch"] == 1.0
    assert _rollout_ids(path) == ["entropy-collapse"]


def test_tensor_summaries_written_by_tensorboards_own_writer_are_read(tmp_path):
    summary = pytest.importorskip("tensorboard.summary")
    writer = summary.Writer(str(tmp_path))
    for n, entropy in enumerate(COLLAPSING, start=1):
        writer.add_scalar("train/entropy", entropy, step=n)
    writer.close()
    [path] = tmp_path.glob("events.out.tfevents.*")
    [log] = read_metric_files(path)
    assert [row["entropy"] for row in log.steps] == COLLAPSING


def _chart_export(path, run_values, metric):
    """The W&B app's chart export: one metric of every run drawn, with __MIN / __MAX columns."""
    header = ["Step"] + [f"{run} - {metric}{suffix}" for run in run_values for suffix in ("", "__MIN", "__MAX")]
    with path.open("w", newline="") as f:
        out = csv.writer(f, quoting=csv.QUOTE_ALL)
        out.writerow(header)
        for i in range(len(next(iter(run_values.values())))):
            out.writerow([i + 1] + [v for values in run_values.values() for v in (values[i],) * 3])


def test_wandb_chart_exports_of_one_run_are_merged_by_step_and_read(tmp_path):
    _chart_export(tmp_path / "wandb_export_entropy.csv", {"grpo-qwen-7b": COLLAPSING}, "train/entropy")
    _chart_export(tmp_path / "wandb_export_grad.csv", {"grpo-qwen-7b": [0.4] * 10}, "train/grad_norm")
    [log] = read_metric_files(tmp_path / "wandb_export_entropy.csv")
    assert (log.format, log.source, log.num_rows) == ("wandb-csv", "trl", 10)
    ev = load_evidence([tmp_path / "wandb_export_entropy.csv", tmp_path / "wandb_export_grad.csv"])
    assert ev.steps[["entropy", "grad_norm"]].notna().all().all() and len(ev.steps) == 10
    assert _rollout_ids(tmp_path / "wandb_export_entropy.csv") == ["entropy-collapse"]


def test_a_wandb_chart_with_two_runs_keeps_them_apart(tmp_path):
    path = tmp_path / "chart.csv"
    _chart_export(path, {"collapsing": COLLAPSING, "steady": STEADY}, "actor/entropy")
    logs = read_metric_files(path)
    assert sorted(log.source for log in logs) == ["verl (collapsing)", "verl (steady)"]
    findings, _ = run_rules(load_evidence([path]))
    assert [(f.id, f.evidence["source"]) for f in findings if f.id in ROLLOUT_IDS] == [
        ("entropy-collapse", "verl (collapsing)")]


def test_a_wandb_history_as_json_records_csv_or_lines_is_read(tmp_path):
    records = [{"_step": n, "_runtime": 10.0 * n, "_timestamp": 1.7e9 + n, "train/global_step": 2 * n,
                **_hf_metrics(n, e)} for n, e in enumerate(COLLAPSING, start=1)]
    (tmp_path / "history.json").write_text(json.dumps(records))
    (tmp_path / "history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    with (tmp_path / "history.csv").open("w", newline="") as f:
        out = csv.DictWriter(f, fieldnames=list(records[0]))
        out.writeheader()
        out.writerows(records)
    for name, fmt in (("history.json", "wandb-json"), ("history.jsonl", "wandb-json"), ("history.csv", "wandb-csv")):
        [log] = read_metric_files(tmp_path / name)
        assert (log.format, [r["step"] for r in log.steps][:3]) == (fmt, [2, 4, 6]), name  # the trainer's step
        assert _rollout_ids(tmp_path / name) == ["entropy-collapse"], name


def test_a_healthy_wandb_history_gives_no_rollout_finding(tmp_path):
    records = [{"_step": n, **_hf_metrics(n, e)} for n, e in enumerate(STEADY, start=1)]
    (tmp_path / "run.json").write_text(json.dumps(records))
    assert _rollout_ids(tmp_path / "run.json") == []


def test_verls_file_logger_is_recognised_by_content_and_a_nan_is_found(tmp_path):
    lines = [{"step": n, "data": {"actor/entropy": 1.2, "actor/pg_loss": 0.02, "actor/grad_norm": 0.3,
                                  "critic/score/mean": 0.4, "val-core/acc": 0.3}} for n in range(1, 7)]
    lines[-1]["data"]["actor/grad_norm"] = float("nan")  # Python's json writes NaN; orjson (verl's) writes null
    path = tmp_path / "my_experiment.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    [log] = read_metric_files(path)
    assert (log.format, log.source, log.num_rows) == ("verl-jsonl", "verl", 6)
    findings, _ = run_rules(load_evidence([path]))
    [f] = [f for f in findings if f.id in ROLLOUT_IDS]
    assert (f.id, f.severity, f.step, f.evidence["metrics"]) == ("nan-loss", "critical", 6, ["grad_norm"])


def test_a_text_file_is_no_metric_file(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("Step,Loss\n1,0.5\n")
    assert read_metric_files(path) == []
