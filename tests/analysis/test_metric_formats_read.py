"""Read means read (issue 26 part 3): a healthy GRPO log in a metric format no framework reader knows is
recognised (findings.json `inputs[].recognised` non-empty) and raises nothing; classic RL (stable-baselines
tables, policy-gradient blocks, A3C lines) raises nothing either; a NaN in any of the formats is `nan-loss`.
The logs are real (tests/data/metric_formats/SOURCES.md)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpo_doctor.report.build import build_report

DATA = Path(__file__).resolve().parents[1] / "data" / "metric_formats"
GRPO_FORMATS = {"mlx_lm_iter_lines.log": "metric-lines", "nemo_rl_training_results.log": "metric-block",
                "cosmos_rl_key_value.log": "metric-lines", "trl_custom_metric_blocks.log": "metric-block"}
CLASSIC_RL = ("sb3_ppo_tables.log", "deeprm_pg_blocks.log", "grounding_a3c_lines.log")


def _report(path: Path, tmp_path: Path) -> dict:
    built = build_report([path], out_dir=tmp_path / "out")
    return json.loads(built.findings_path.read_text(encoding="utf-8"))


@pytest.mark.parametrize(("name", "fmt"), sorted(GRPO_FORMATS.items()))
def test_a_healthy_grpo_log_in_each_format_is_read_and_judged_healthy(name, fmt, tmp_path):
    data = _report(DATA / name, tmp_path)
    [read] = data["inputs"]
    assert any(fmt in what for what in read["recognised"]), read
    assert "rollouts" in read["areas"]
    assert data["findings"] == []


@pytest.mark.parametrize("name", CLASSIC_RL)
def test_classic_rl_metrics_never_raise_a_finding(name, tmp_path):
    assert _report(DATA / name, tmp_path)["findings"] == []


def test_classic_rl_lines_without_a_loss_are_read_and_said_not_judged(tmp_path):
    """Read means read: an A3C run's reward lines are step metrics of another kind of training, not nothing."""
    [read] = _report(DATA / "grounding_a3c_lines.log", tmp_path)["inputs"]
    assert any("without LLM rollouts (episodes: not judged)" in what for what in read["recognised"]), read
    assert "rollouts" not in read["areas"]  # nothing of GRPO's was judged


@pytest.mark.parametrize(("name", "before", "after"), [
    ("mlx_lm_iter_lines.log", "Iter 14: Train loss 0.650", "Iter 14: Train loss nan"),
    ("nemo_rl_training_results.log", "Loss: 0.1032", "Loss: nan"),
    ("cosmos_rl_key_value.log", "Reward: 1.5", "Reward: nan"),
    ("sb3_ppo_tables.log", "-0.00677 ", "nan      "),  # classic RL too: a NaN loss is a fault whatever trained
])
def test_a_nan_in_any_format_is_nan_loss(name, before, after, tmp_path):
    text = (DATA / name).read_text(encoding="utf-8")
    assert before in text
    log = tmp_path / name
    log.write_text(text.replace(before, after), encoding="utf-8")
    [finding] = _report(log, tmp_path)["findings"]
    assert finding["id"] == "nan-loss" and finding["evidence"]["source"] == "text"


def test_wandb_sparklines_alone_are_known_lines_not_steps(tmp_path):
    data = _report(DATA / "wandb_run_history_trl.log", tmp_path)
    assert data["findings"] == [] and data["inputs"][0]["recognised"] == ["known lines: W&B output x15"]
