"""Rank files are strict JSON: a NaN or infinite metric is written as a string that `jq` and every
strict reader take, and read back as the float; files with bare NaN tokens (older versions) still read."""
import json
import math
import shutil
import subprocess
import sys

import pytest
from helpers import clean_env, run_program

from grpo_doctor.runlog.decoder import read_rank_file
from grpo_doctor.runlog.eventlog import load_run
from grpo_doctor.schema import Error, PhaseBegin, Rollout, RunPaths, Step

DIVERGING = """
    import grpo_doctor as gd
    gd.init("run")
    for n in range(6):
        with gd.phase("NaN"):  # a phase may be called anything: text stays text
            pass
        loss = 0.5 if n < 3 else float("nan")
        gd.step(n, loss=loss, grad_norm=float("inf") if n >= 3 else 1.0, kl=-float("inf"), note="NaN")
    gd.rollouts(["p", "p"], ["a", "b"], [float("nan"), float("inf")], temperature=1.0)
    raise RuntimeError("NaN")
"""


def _strict(text: str):
    def refuse(token):
        raise ValueError(f"bare {token} is not JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module")
def diverged_run(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("diverged")
    out = run_program(tmp_path, DIVERGING)
    assert out.returncode == 1 and "RuntimeError: NaN" in out.stderr, out.stderr
    return tmp_path / "run"


def test_every_line_of_a_rank_file_with_nan_and_inf_metrics_is_strict_json(diverged_run):
    rank_file = RunPaths(diverged_run).rank_file(0)
    lines = rank_file.read_text().splitlines()
    records = [_strict(line) for line in lines]
    steps = [r for r in records if r["kind"] == "step"]
    assert steps[3]["metrics"] == {"loss": "NaN", "grad_norm": "Infinity", "kl": "-Infinity", "note": "NaN"}
    [rollout] = [r for r in records if r["kind"] == "rollout"]
    assert rollout["reward_mean"] == "Infinity" and [s["reward"] for s in rollout["samples"]] == ["NaN", "Infinity"]


@pytest.mark.skipif(shutil.which("jq") is None, reason="jq is not installed")
def test_jq_reads_a_rank_file_with_a_nan_loss(diverged_run):
    out = subprocess.run(["jq", "-c", 'select(.kind == "step") | .metrics.loss', str(RunPaths(diverged_run).rank_file(0))],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0.5"] * 3 + ['"NaN"'] * 3


def test_both_whole_file_modes_give_the_floats_back_and_leave_text_alone(diverged_run):
    rank_file = RunPaths(diverged_run).rank_file(0)
    for log in (read_rank_file(rank_file, columns=False), read_rank_file(rank_file)):
        assert log.num_bad_lines == 0
        step = log.of_kind(Step)[3]
        assert math.isnan(step.metrics["loss"]) and step.metrics["grad_norm"] == math.inf
        assert step.metrics["kl"] == -math.inf
        [rollout] = log.of_kind(Rollout)
        assert rollout.reward_mean == math.inf and math.isnan(rollout.samples[0]["reward"])
        assert log.errors[-1].message == "NaN" and isinstance(log.errors[-1], Error)
    assert {r.phase for r in read_rank_file(rank_file, columns=False).of_kind(PhaseBegin)} == {"NaN"}
    columns = read_rank_file(rank_file).tables.steps
    assert [math.isnan(v) for v in columns["loss"]] == [False] * 3 + [True] * 3


def test_the_nan_loss_is_found_in_a_rank_file_the_sink_wrote(diverged_run):
    out = subprocess.run([sys.executable, "-m", "grpo_doctor.cli.main", "report", str(diverged_run), "--json",
                          "--out", str(diverged_run.parent / "report.html")],
                         env=clean_env(), capture_output=True, text=True, timeout=300)
    findings = {f["id"]: f for f in json.loads(out.stdout)["findings"]}
    assert findings["nan-loss"]["step"] == 3, out.stdout


def test_a_rank_file_with_bare_nan_tokens_from_an_older_version_still_reads(tmp_path):
    ranks = RunPaths(tmp_path).ranks
    ranks.mkdir(parents=True)
    (ranks / "rank-00000.jsonl").write_text(
        '{"schema":1,"kind":"step","rank":0,"host":"vm","pid":7,"step":0,"t":1.0,"mono":1.0,'
        '"metrics":{"loss":NaN,"grad_norm":Infinity,"kl":-Infinity}}\n')
    for log in (load_run([tmp_path]).ranks[0], read_rank_file(ranks / "rank-00000.jsonl")):
        [step] = log.of_kind(Step)
        assert math.isnan(step.metrics["loss"]) and step.metrics["grad_norm"] == math.inf
        assert step.metrics["kl"] == -math.inf and log.num_bad_lines == 0


ODD_KEYS = """
    import enum
    import grpo_doctor as gd
    from grpo_doctor.rank import api   # the integrations' way to carry a metric into the next step

    class Split(enum.Enum):
        TRAIN = 1

    gd.init("run")
    api.add_to_next_step(("reward", "accuracy"), 0.5)   # a key JSON has no form for
    api.add_to_next_step(Split.TRAIN, 1.0)
    api.add_to_next_step(float("nan"), 2.0)
    gd.step(0, loss=0.25)
    gd.flush()
    gd.step(1, loss=0.125)
    print("trained on")
"""


def test_a_metric_whose_key_json_cannot_write_neither_reaches_training_nor_stops_recording(tmp_path):
    out = run_program(tmp_path, ODD_KEYS)
    assert out.returncode == 0 and "trained on" in out.stdout, out.stderr
    assert "Traceback" not in out.stderr, out.stderr  # not in training, not in the writer's thread
    lines = RunPaths(tmp_path / "run").rank_file(0).read_text().splitlines()
    steps = [r for r in map(_strict, lines) if r["kind"] == "step"]
    assert [s["metrics"] for s in steps] == [
        {"('reward', 'accuracy')": 0.5, "Split.TRAIN": 1.0, "NaN": 2.0, "loss": 0.25}, {"loss": 0.125}]
