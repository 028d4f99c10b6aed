"""Never silent: every input says what was recognised in it, and the report names what it could not check."""
import json
import os
import subprocess
import sys
from pathlib import Path

from helpers import clean_env, run_program

LOGS = Path(__file__).parent.parent / "data" / "logs"


def _report(*paths, tmp_path):
    out = subprocess.run([sys.executable, "-m", "grpo_doctor.cli.main", "report", *map(str, paths),
                          "--out", str(tmp_path / "out" / "report.html")],
                         env=clean_env(), capture_output=True, text=True, timeout=120)
    data = json.loads((tmp_path / "out" / "findings.json").read_text())
    return out, data


def test_an_empty_file_says_it_was_empty_and_that_nothing_was_checked(tmp_path):
    (tmp_path / "train.log").write_text("")
    out, data = _report(tmp_path / "train.log", tmp_path=tmp_path)
    assert out.returncode == 3, out.stderr
    assert data["findings"] == [] and data["not_checked"] == ["crashes", "hangs", "memory", "rollouts", "network"]
    assert data["inputs"][0]["lines_read"] == 0 and data["inputs"][0]["recognised"] == []
    assert f"{tmp_path / 'train.log'}: empty" in out.stdout


def test_random_text_is_named_as_unrecognised_with_its_line_count(tmp_path):
    (tmp_path / "noise.txt").write_text("\n".join(os.urandom(24).hex() for _ in range(40)) + "\n")
    out, data = _report(tmp_path / "noise.txt", tmp_path=tmp_path)
    assert out.returncode == 3
    assert data["inputs"][0]["lines_read"] == data["inputs"][0]["unmatched_lines"] == 40
    assert any("noise.txt (40 lines): nothing recognised" in w for w in data["warnings"])
    assert "nothing recognised" in out.stdout


def test_an_unrecognised_file_beside_a_recognised_log_is_named_and_the_verdict_stands(tmp_path):
    (tmp_path / "notes.md").write_text("# what I tried\nrestarted the job twice\n")
    out, data = _report(LOGS / "torchrun_nccl_timeout.log", tmp_path / "notes.md", tmp_path=tmp_path)
    assert out.returncode == 1  # the log's critical findings decide
    recognised = {Path(i["path"]).name: i["recognised"] for i in data["inputs"]}
    assert recognised["notes.md"] == [] and any("nccl-timeout" in r for r in recognised["torchrun_nccl_timeout.log"])
    assert data["not_checked"] == ["network"]  # one metric line in the log reaches rollouts
    assert any(w.startswith(f"{tmp_path / 'notes.md'} (2 lines): nothing recognised") for w in data["warnings"])


def test_a_healthy_run_directory_reaches_crashes_hangs_and_rollouts(tmp_path):
    run_program(tmp_path, """
        import grpo_doctor as gd
        gd.init("run")
        for n in range(3):
            with gd.phase("rollout"):
                pass
            gd.step(n, loss=0.1, reward=0.5)
    """, RANK="0", WORLD_SIZE="1")
    out, data = _report(tmp_path / "run", tmp_path=tmp_path)
    assert out.returncode == 0, out.stderr
    entry = data["inputs"][0]
    assert entry["recognised"] == ["rank records of 1 rank(s)"] and entry["rows_used"] > 0
    assert {"crashes", "hangs", "rollouts"}.isdisjoint(data["not_checked"])
    assert "network" in data["not_checked"]
