import subprocess
import sys

import pytest
from helpers import clean_env

from grpo_doctor.runlog.eventlog import load_run
from grpo_doctor.schema import Step


@pytest.mark.distributed
def test_demo_trains_two_cpu_ranks_into_out_even_with_a_run_dir_exported(tmp_path):
    # The flag wins over GRPO_DOCTOR_RUN_DIR, which the trainer would otherwise obey.
    out = subprocess.run(
        [sys.executable, "-m", "grpo_doctor.cli.main", "demo", "--steps", "2", "--out", str(tmp_path / "run")],
        env=clean_env(GRPO_DOCTOR_RUN_DIR=str(tmp_path / "exported")), cwd=tmp_path, capture_output=True, text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert not (tmp_path / "exported").exists()
    assert f"run directory: {tmp_path / 'run'}" in out.stdout
    assert "no findings: nothing known to go wrong was seen" in out.stdout
    assert (tmp_path / "run" / "report.html").is_file() and (tmp_path / "run" / "findings.json").is_file()
    run = load_run([tmp_path / "run"])
    assert sorted(run.ranks) == [0, 1] and not run.warnings
    assert all(len(log.of_kind(Step)) == 2 for log in run.ranks.values())


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


def test_demo_rejects_a_malformed_inject_spec_in_one_line(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "grpo_doctor.cli.main", "demo", "--out", str(tmp_path / "run"), "--inject", "hang:rank=x"],
        env=clean_env(), cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 2
    assert out.stderr.startswith("grpo-doctor: error: --inject 'hang:rank=x': ") and "Traceback" not in out.stderr
    assert len(out.stderr.splitlines()) == 2 and not (tmp_path / "run").exists()  # message and hint; nothing started
