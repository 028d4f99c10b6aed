import json
import subprocess
import sys

from helpers import clean_env, run_program

from grpo_doctor import __version__


def grpo_doctor(*args: str, cwd=None):
    return subprocess.run([sys.executable, "-m", "grpo_doctor.cli.main", *args], env=clean_env(), cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_version_and_help_with_examples():
    assert grpo_doctor("--version").stdout.strip() == f"grpo-doctor {__version__}"
    help_text = grpo_doctor("--help").stdout
    assert "examples:" in help_text and "grpo-doctor demo" in help_text and "exit status" in help_text


def test_summary_of_a_path_that_is_not_a_run_is_one_line_and_a_hint(tmp_path):
    out = grpo_doctor("summary", str(tmp_path / "missing"))
    assert out.returncode == 2
    assert out.stderr.splitlines()[0] == f"grpo-doctor: error: {tmp_path / 'missing'} does not exist"
    assert out.stderr.splitlines()[1].startswith("  hint: ")
    assert "Traceback" not in out.stderr


def test_summary_names_the_crashed_rank_its_phase_and_fails(tmp_path):
    for rank in (0, 1):
        run_program(tmp_path, f"""
            import grpo_doctor as gd
            gd.init("run")
            gd.step(0)
            with gd.phase("backward"):
                if {rank} == 1:
                    raise RuntimeError("NCCL error")
        """, RANK=str(rank), WORLD_SIZE="3")
    out = grpo_doctor("summary", "run", cwd=tmp_path)
    assert out.returncode == 1
    lines = out.stdout.splitlines()
    rank1 = next(line for line in lines if line.strip().startswith("1 "))
    assert "exception" in rank1 and "RuntimeError in backward" in rank1
    assert any("no records from rank(s) 2 of world size 3" in line for line in lines)
    rows = json.loads(grpo_doctor("summary", "run", "--json", cwd=tmp_path).stdout)["ranks"]
    assert [r["state"] for r in rows] == ["exit", "exception"] and rows[1]["steps_done"] == 1
