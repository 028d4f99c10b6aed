"""At a hang watch asks NCCL's RAS (an `ncclras` on PATH here prints a real report of NCCL 2.30.7, see
tests/data/nccl_ras/SOURCES.md): the answer is kept in hang-N.json, said in watch's verdict, and read
by the report as an `nccl-ras` finding naming the missing rank with its node, GPU and pid."""
import json
import os
import subprocess
import sys

from helpers import REPO, clean_env

RAS_REPORT = REPO / "tests" / "data" / "nccl_ras" / "example_incomplete.txt"

# One rank recording through the API, then stuck in `reward` for good.
JOB = """
import time
import grpo_doctor as gd
gd.init()
for n in range(3):
    with gd.phase("rollout"):
        time.sleep(0.05)
    gd.step(n, loss=0.5)
with gd.phase("reward"):
    time.sleep(3600)
"""


def test_a_hang_report_holds_what_nccl_ras_said_and_the_report_names_the_missing_rank(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "ncclras"
    fake.write_text(f"#!{sys.executable}\nimport sys\nsys.stdout.write(open({str(RAS_REPORT)!r}).read())\n")
    fake.chmod(0o755)
    job = tmp_path / "job.py"
    job.write_text(JOB)
    run_dir = tmp_path / "run"
    env = clean_env(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", NCCL_RAS_ADDR="127.0.0.1:9",
                    PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    watch = subprocess.run([sys.executable, "-m", "grpo_doctor.cli.main", "watch", "--run-dir", str(run_dir),
                            "--hang-timeout", "3", "--second-look", "1", "--on-hang", "kill", "--",
                            sys.executable, str(job)], env=env, cwd=tmp_path, capture_output=True, text=True,
                           timeout=180)
    assert watch.returncode == 124, watch.stderr[-3000:]
    assert "NCCL RAS" in watch.stderr and "incomplete" in watch.stderr, watch.stderr[-3000:]
    (hang_file,) = (run_dir / "supervisor").glob("*/hang-1.json")
    asked = json.loads(hang_file.read_text())["nccl_ras"]
    assert asked["via"] == "ncclras" and "INCOMPLETE" in asked["raw"].upper()

    report = subprocess.run([sys.executable, "-m", "grpo_doctor.cli.main", "report", str(run_dir), "--json"],
                            env=clean_env(), capture_output=True, text=True, timeout=180)
    findings = {f["id"]: f for f in json.loads(report.stdout)["findings"]}
    assert "nccl-ras" in findings, list(findings)
    missing = findings["nccl-ras"]["evidence"]["missing_ranks"]
    assert missing and all(m["node"] and m["pid"] for m in missing), missing
