import subprocess
import sys

from helpers import clean_env


def test_importing_the_rank_api_pulls_in_no_analysis_or_training_stack():
    code = "import sys, grpo_doctor; print(sorted(m for m in ('pandas','matplotlib','jinja2','torch','numpy') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], env=clean_env(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
