"""What a TRL user reads on a first try (issue 23): a real TRL GRPOTrainer job on 2 CPU ranks under
`accelerate launch`, whose reward function blocks on rank 1 from its third call, under
`grpo-doctor watch --on-hang kill`; once with the two documented TRL lines, once with `--instrument`
alone and no code change.

Checked as the user meets it: the first remedy names the reward function and a timeout; no
flight-recorder or probe advice on a one-node gloo job watch ended itself; nothing the job printed
while watch ended it (torchrun's SignalException traceback) is shown, counted or quoted; watch states
one exit status. And `--instrument` alone names rank 1 within twice the time the TRL lines take
(the same hang policy in both runs, timed side by side from the moment rank 1 starts hanging to
the verdict line).
"""
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import REPO, clean_env

SCRIPT = REPO / "tests" / "data" / "trl_reward_hang" / "train_grpo.py"
TIMEOUT_S = 300

pytestmark = pytest.mark.distributed


def watch_trl(tmp: Path, *script_args: str, instrument: bool) -> dict:
    run_dir, mark = tmp / "run", tmp / "hang-began"
    cmd = [sys.executable, "-m", "grpo_doctor.cli.main", "watch", "--run-dir", str(run_dir), "--hang-floor", "5",
           "--hang-factor", "3", "--second-look", "1", "--on-hang", "kill", *(["--instrument"] if instrument else []),
           "--", sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "0",
           str(SCRIPT), "--run-dir", str(run_dir), "--out-dir", str(tmp / "out"), *script_args]
    env = clean_env(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", HANG_MARK=str(mark))
    proc = subprocess.Popen(cmd, cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    verdict_t = None
    stderr_lines = []
    deadline = time.monotonic() + TIMEOUT_S
    for line in proc.stderr:  # watch's notes are on stderr, as they come
        stderr_lines.append(line)
        if verdict_t is None and "the others wait for:" in line:
            verdict_t = time.time()
        if time.monotonic() > deadline:
            proc.kill()
            break
    stdout = proc.stdout.read()
    proc.wait(timeout=60)
    began = float(mark.read_text()) if mark.exists() else None
    return {"status": proc.returncode, "stderr": "".join(stderr_lines), "stdout": stdout, "run_dir": run_dir,
            "hang_to_verdict_s": verdict_t - began if verdict_t and began else None}


@pytest.fixture(scope="module")
def with_trl_lines(tmp_path_factory):
    return watch_trl(tmp_path_factory.mktemp("trl-lines"), instrument=False)


@pytest.fixture(scope="module")
def instrument_alone(tmp_path_factory):
    return watch_trl(tmp_path_factory.mktemp("instrument"), "--without-trl-lines", instrument=True)


def test_the_first_remedy_names_the_reward_function_and_a_timeout_and_nothing_off_the_point(with_trl_lines):
    run = with_trl_lines
    assert run["status"] == 124, run["stderr"][-3000:]
    findings = json.loads((run["run_dir"] / "findings.json").read_text())["findings"]
    hang = findings[0]
    assert hang["id"] == "hang" and hang["ranks"] == [1], [f["title"] for f in findings]
    (hang_file,) = (run["run_dir"] / "supervisor").glob("*/hang-1.json")
    assert hang["evidence"]["odd_ranks"] == json.loads(hang_file.read_text())["odd_ranks"] == [1]  # one story
    first = hang["hints"][0].lower()
    assert "timeout" in first and "reward" in first, hang["hints"]
    every_hint = " ".join(h for f in findings for h in f["hints"]).lower()
    assert "flight" not in every_hint and "torch_fr" not in every_hint and "probe" not in every_hint, every_hint


def test_nothing_the_job_printed_while_watch_ended_it_is_shown_counted_or_quoted(with_trl_lines):
    run = with_trl_lines
    # accelerate's launcher is torchrun's agent: watch's SIGTERM makes it print a SignalException traceback.
    saved = (run["run_dir"] / "supervisor").glob("*/stderr.log")
    assert any("SignalException" in p.read_text(errors="replace") for p in saved)  # the job did print it
    assert "SignalException" not in run["stderr"] and "SignalException" not in run["stdout"]
    assert re.search(r"\d+ line\(s\) the job printed while watch ended it not shown", run["stderr"])
    findings = json.loads((run["run_dir"] / "findings.json").read_text())["findings"]
    assert not any("SignalException" in json.dumps(f) for f in findings), [f["title"] for f in findings]
    assert "seen in the output" not in run["stderr"]  # no worker-died / python-traceback counted
    html = (run["run_dir"] / "report.html").read_text()
    assert "SignalException" not in html


def test_watch_states_one_exit_status(with_trl_lines):
    statuses = [line for line in with_trl_lines["stderr"].splitlines() if "exit status" in line]
    assert len(statuses) == 1 and "exit status 124" in statuses[0], statuses


def test_instrument_alone_names_the_hung_rank_within_twice_the_time_the_trl_lines_take(with_trl_lines,
                                                                                         instrument_alone):
    run = instrument_alone
    assert run["status"] == 124, run["stderr"][-3000:]
    verdict = next(line for line in run["stderr"].splitlines() if "the others wait for:" in line)
    assert "rank 1" in verdict and "no phase" not in verdict, verdict
    with_lines, alone = with_trl_lines["hang_to_verdict_s"], run["hang_to_verdict_s"]
    assert with_lines is not None and alone is not None
    assert alone <= 2 * with_lines, (alone, with_lines)
