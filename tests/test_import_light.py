import subprocess
import sys

from helpers import clean_env


def test_importing_the_rank_api_pulls_in_no_analysis_or_training_stack():
    code = "import sys, grpo_doctor; print(sorted(m for m in ('pandas','matplotlib','jinja2','torch','numpy','rich','rapidfuzz') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], env=clean_env(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_recording_a_step_and_its_rollouts_pulls_in_no_analysis_or_console_library(tmp_path):
    # The rank side's records after init: numpy arrives with the first rollout record (by design),
    # and rapidfuzz with it where installed (optional, never required), but not watch's panel library.
    code = (
        "import sys, grpo_doctor as gd\n"
        f"gd.init(run_dir={str(tmp_path)!r})\n"
        "with gd.phase('rollout'):\n"
        "    gd.rollouts(['p', 'p'], ['a b', 'a c'], [1.0, 0.0], completion_ids=[[1, 2], [1, 3]])\n"
        "gd.step(0, loss=0.1)\n"
        "gd.shutdown()\n"
        "print(sorted(m for m in ('pandas','matplotlib','jinja2','rich') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], env=clean_env(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"
