"""`grpo-doctor summary` of a run still going says "running" and exits 0; of a run watch ended after a
hang it names the rank the others waited for (issue 23 item 5)."""
import shutil
import subprocess
import sys
import time

from helpers import REPO, clean_env

TRL_HANG = REPO / "tests" / "data" / "trl_reward_hang" / "run"

# Two "ranks" of one process each record a step a second through the public API, then keep going.
JOB = """
import sys, time
import grpo_doctor as gd
gd.init()
for n in range(600):
    with gd.phase("rollout"):
        time.sleep(0.05)
    gd.step(n, loss=0.5)
    if n == 1:
        print("two steps done", flush=True)
    time.sleep(0.2)
"""


def summary(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "grpo_doctor.cli.main", "summary", *args], capture_output=True,
                          text=True, timeout=120, env=clean_env())


def test_summary_of_a_job_still_running_under_watch_says_running_and_exits_0(tmp_path):
    run_dir = tmp_path / "run"
    job = tmp_path / "job.py"
    job.write_text(JOB)
    watch = subprocess.Popen(
        [sys.executable, "-m", "grpo_doctor.cli.main", "watch", "--run-dir", str(run_dir), "--",
         sys.executable, str(job)], env=clean_env(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0"),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
    try:
        for line in watch.stdout:
            if "two steps done" in line:
                break
        time.sleep(1.0)  # the flush thread writes every 0.25 s
        live = summary(str(run_dir))
    finally:
        watch.terminate()
        watch.communicate(timeout=60)
    assert live.returncode == 0, live.stdout + live.stderr
    first = live.stdout.splitlines()[0]
    assert ": running (watched on " in first and "1 of 1 rank(s) going" in first, live.stdout
    assert "no end record" not in live.stdout
    row = live.stdout.splitlines()[2]
    assert row.split()[0] == "0" and "running" in row

    ended = summary(str(run_dir))  # watch is gone and ended the job: no longer "running"
    assert ": running" not in ended.stdout.splitlines()[0]


def test_summary_of_a_hang_watch_ended_names_the_rank_the_others_waited_for(tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(TRL_HANG, run_dir)
    result = summary(str(run_dir))
    assert result.returncode == 1  # both ranks ended by watch's SIGTERM: the run failed
    lines = result.stdout.splitlines()
    rows = {line.split()[0]: line for line in lines[2:4]}
    assert "culprit" in rows["1"] and "culprit" not in rows["0"], result.stdout
    (hang,) = [line for line in lines if line.startswith("hang (")]
    assert "hang-1.json" in hang and "the others waited for rank 1 on vm in train-step/reward at step 3" in hang, hang
    assert "train_grpo.py" in hang  # the culprit's own frame

    as_json = summary(str(run_dir), "--json")
    assert '"culprits": [\n      1\n    ]' in as_json.stdout and '"culprit": true' in as_json.stdout


def test_summary_of_a_run_killed_outright_still_says_no_end_record_and_fails(tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(TRL_HANG, run_dir)
    for path in (run_dir / "ranks").glob("*.jsonl"):  # cut the end records: killed with SIGKILL
        lines = [line for line in path.read_text().splitlines() if '"kind": "end"' not in line
                 and '"kind":"end"' not in line]
        path.write_text("\n".join(lines) + "\n")
    result = summary(str(run_dir))
    assert result.returncode == 1 and "no end record" in result.stdout and ": running" not in result.stdout
