import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import clean_env

from grpo_doctor.runlog.eventlog import load_run
from grpo_doctor.schema import Step


@pytest.mark.distributed
@pytest.mark.slow
def test_demo_by_default_catches_the_hung_rank_under_watch_and_points_at_the_report(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "grpo_doctor.cli.main", "demo", "--steps", "4", "--out", str(tmp_path / "demo")],
        # --out wins over GRPO_DOCTOR_RUN_DIR, which the trainer would otherwise obey.
        env=clean_env(GRPO_DOCTOR_RUN_DIR=str(tmp_path / "exported")), cwd=tmp_path, capture_output=True, text=True,
        timeout=300,
    )
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    assert not (tmp_path / "exported").exists()
    healthy = load_run([tmp_path / "demo" / "healthy"])
    assert sorted(healthy.ranks) == [0, 1] and not healthy.warnings
    assert all(len(log.of_kind(Step)) == 4 for log in healthy.ranks.values())
    assert "1/2 the job as it should run ... exit status 0, no findings" in out.stdout
    # watch's verdict: the rank the others wait for, and the injected reward-function stall on its stack
    assert "grpo-doctor:   the others wait for: rank 1 in reward at step 2" in out.stdout
    assert "rank 1: _block_forever (inject.py" in out.stdout
    assert "grpo-doctor: CRITICAL hang: hang on " in out.stdout
    assert "exit status 124: the job hung and watch ended it (--on-hang kill)" in out.stdout
    # what torchrun prints on being stopped is watch's doing: folded by watch into one line, not shown
    assert "Traceback (most recent call last)" not in out.stdout
    assert "line(s) the job printed while watch ended it not shown" in out.stdout
    report = tmp_path / "demo" / "hang" / "report.html"
    assert f"grpo-doctor demo: caught: hang on rank(s) 1, recorded in {report.parent / 'findings.json'}" in out.stdout
    assert f"grpo-doctor demo: open the report: {report}" in out.stdout.splitlines()[-1]
    assert report.is_file()
    findings = json.loads((tmp_path / "demo" / "hang" / "findings.json").read_text())["findings"]
    hang = next(f for f in findings if f["id"] == "hang")
    assert hang["ranks"] == [1] and hang["phase"] == "reward" and hang["step"] == 2
    assert next((f for f in findings if f["role"] == "root-cause"), findings[0])["id"] == "hang"
    assert hang["evidence"]["culprit_code"]["1"]["in_user_code"]
    stack = hang["evidence"]["culprit_stacks"]["1"]
    assert any("_block_forever" in frame for frame in stack)
    assert not any("grpo_doctor/rank" in frame or "sink.py" in frame for frame in stack)
    # the stacks a person reads leave grpo-doctor's own threads out
    (hang_file,) = (tmp_path / "demo" / "hang" / "supervisor").glob("*/hang-1.json")
    texts = list(Path(json.loads(hang_file.read_text())["stack_dirs"][-1]).glob("rank-*.txt"))
    assert len(texts) == 2 and not any("grpo-doctor-flush" in t.read_text() for t in texts)
    assert json.loads((tmp_path / "demo" / "healthy" / "findings.json").read_text())["findings"] == []


def test_demo_refuses_inject_with_a_scenario_in_one_line(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "grpo_doctor.cli.main", "demo", "--scenario", "seeds", "--out", str(tmp_path / "run"),
         "--inject", "crash:rank=1,step=1"],
        env=clean_env(), cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 2 and "--scenario healthy" in out.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.distributed
def test_demo_with_an_injected_crash_fails_and_names_the_rank(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "grpo_doctor.cli.main", "demo", "--steps", "3", "--out", str(tmp_path / "run"),
         "--inject", "crash:rank=1,step=1,phase=backward"],
        env=clean_env(), cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 1
    rank1 = next(line for line in out.stdout.splitlines() if line.strip().startswith("1 "))
    assert "RuntimeError in backward" in rank1
    assert "CRITICAL rank-crash: rank(s) 1 crashed: RuntimeError in backward at step 1" in out.stdout
    findings = json.loads((tmp_path / "run" / "findings.json").read_text())["findings"]
    lead = next((f for f in findings if f["role"] == "root-cause"), findings[0])
    assert (lead["id"], lead["ranks"]) == ("rank-crash", [1])


def test_demo_rejects_a_malformed_inject_spec_in_one_line(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "grpo_doctor.cli.main", "demo", "--out", str(tmp_path / "run"), "--inject", "hang:rank=x"],
        env=clean_env(), cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 2
    assert out.stderr.startswith("grpo-doctor: error: --inject 'hang:rank=x': ") and "Traceback" not in out.stderr
    assert len(out.stderr.splitlines()) == 2 and not (tmp_path / "run").exists()  # message and hint; nothing started
