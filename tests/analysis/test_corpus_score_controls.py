"""The corpus scorer counts a control as passed only when something in it was recognised, and says of each
control whether it was (issue 26 part 3): "nothing recognised, so no finding" proves nothing about false alarms."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from corpus_score import judge, score_corpus, table

METRIC_FORMATS = Path(__file__).resolve().parents[1] / "data" / "metric_formats"


def _case(root: Path, name: str, text_from: Path | None, text: str = "") -> None:
    folder = root / "other"
    folder.mkdir(parents=True, exist_ok=True)
    if text_from is not None:
        shutil.copy(text_from, folder / f"{name}.log")
    else:
        (folder / f"{name}.log").write_text(text, encoding="utf-8")
    label = {"source": "NVIDIA-NeMo/RL#1052", "url": "https://github.com/NVIDIA-NeMo/RL/pull/1052",
             "framework": "other", "what": "a healthy step", "control": True, "expect": []}
    (folder / f"{name}.json").write_text(json.dumps(label), encoding="utf-8")


def test_a_control_passes_only_when_recognised():
    assert judge({"control": True, "expect": []}, [], recognised=True) == ""
    assert "not recognised" in judge({"control": True, "expect": []}, [], recognised=False)


def test_the_table_says_of_each_control_whether_it_was_recognised(tmp_path):
    _case(tmp_path, "nemo-rl-step-summary", METRIC_FORMATS / "nemo_rl_training_results.log")
    _case(tmp_path, "prose", None, "The run finished and the model was saved to the output directory.\n")
    results = {r.case: r for r in score_corpus(tmp_path)}
    read, prose = results["other/nemo-rl-step-summary"], results["other/prose"]
    assert (read.passed, read.recognised) == (True, True)
    assert (prose.passed, prose.recognised) == (False, False)
    printed = table(list(results.values()))
    assert "[control, recognised]" in printed and "[control, NOT recognised]" in printed
    assert "controls recognised: 1/2" in printed
