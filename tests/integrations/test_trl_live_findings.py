"""Issue 25 item 0, "rollout rules live": a real TRL GRPOTrainer job whose reward is constant, under
`grpo-doctor watch`, is said to be degenerate while it runs, not only after it ended.

- With the two documented TRL lines, on 2 ranks (`accelerate launch`, gloo on CPU): watch prints
  `live: CRITICAL constant-reward at step 1` and the local webhook gets it (`--alert-live --notify`)
  while training is still going (TRL's log history, written after train(), is not there yet), at most
  5 logged steps after the first degenerate one (the rule's min_consecutive_steps: the 5th constant step);
  `grpo-doctor summary` shows it during the run; the report at the end names the same ids at the same steps.
- Without them (the job only prints TRL's metric dicts), the printed lines are enough, and the report
  reads them from watch's saved output and agrees.
- A healthy run (a reward that varies) gets no live finding.
"""
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import REPO, clean_env
from webhook import Endpoint

SCRIPT = REPO / "tests" / "integrations" / "trl_grpo.py"
ROLLOUT_IDS = {"constant-reward", "dead-step", "zero-std-groups", "zero-kl", "nan-loss", "entropy-collapse",
               "length-collapse", "stale-rollout-weights"}
TIMEOUT_S = 400
LIVE = "live: CRITICAL constant-reward at step 1"


def watch_trl(tmp: Path, *script_args: str, ranks: int, steps: int, notify: Endpoint | None = None,
              summary: bool = False, reward_delay_s: float = 0.75) -> dict:
    """watch over trl_grpo.py. Each reward call takes `reward_delay_s` (a reward model's or a verifier's
    time): a step of about a second, as the issue's job had, since watch's delay is counted in seconds
    (the ranks' 0.25 s flush, its own 0.5 s round) and the test counts steps."""
    run_dir, history = tmp / "run", tmp / "log_history.json"
    launch = ([sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(ranks),
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "0"]
              if ranks > 1 else [sys.executable])
    alerts = ["--alert-live", "--notify", notify.url] if notify else []
    cmd = [sys.executable, "-m", "grpo_doctor.cli.main", "watch", "--run-dir", str(run_dir), *alerts, "--", *launch,
           str(SCRIPT), "--run-dir", str(run_dir), "--out-dir", str(tmp / "out"), "--steps", str(steps),
           "--batch", "4", "--num-generations", "4", "--log-history", str(history), "--reward-delay", str(reward_delay_s),
           *script_args]
    env = clean_env(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    proc = subprocess.Popen(cmd, cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout_log = lambda: next(run_dir.glob("supervisor/*/stdout.log"), None)  # noqa: E731
    printed = lambda: (p.read_text(errors="replace").count("'loss'") if (p := stdout_log()) else 0)  # noqa: E731
    seen = {"arrivals": [], "summary": None}
    done = threading.Event()

    def on_webhook():  # what the job had done when each alert arrived
        count = 0
        while not done.is_set():
            if notify is not None and len(notify.bodies) > count:
                count = len(notify.bodies)
                seen["arrivals"].append({"ended": history.exists(), "steps_printed": printed(),
                                         "body": notify.bodies[count - 1]})
            time.sleep(0.05)

    threading.Thread(target=on_webhook, daemon=True).start()
    stderr_lines, deadline = [], time.monotonic() + TIMEOUT_S
    for line in proc.stderr:  # watch's notes, as they come
        stderr_lines.append(line)
        if LIVE in line and "said" not in seen:
            seen["said"] = {"ended": history.exists(), "steps_printed": printed()}
            if summary:  # while the job goes on
                seen["summary"] = subprocess.run([sys.executable, "-m", "grpo_doctor.cli.main", "summary",
                                                  str(run_dir)], env=env, capture_output=True, text=True,
                                                 timeout=120).stdout
                seen["summary_ended"] = history.exists()
        if time.monotonic() > deadline:
            proc.kill()
            break
    proc.wait(timeout=60)
    time.sleep(0.2)
    done.set()
    return {"status": proc.returncode, "stderr": "".join(stderr_lines), "run_dir": run_dir, **seen}


def findings_of(run_dir: Path) -> set[tuple[str, int]]:
    found = json.loads((run_dir / "findings.json").read_text())["findings"]
    return {(f["id"], f["step"]) for f in found if f["id"] in ROLLOUT_IDS}


def said_live(run_dir: Path) -> set[tuple[str, int]]:
    path = next(run_dir.glob("supervisor/*/live-findings.json"), None)
    found = json.loads(path.read_text())["findings"] if path else []
    return {(f["id"], f["step"]) for f in found}


@pytest.fixture(scope="module")
def constant_two_ranks(tmp_path_factory):
    endpoint = Endpoint()
    try:
        yield watch_trl(tmp_path_factory.mktemp("constant"), "--reward", "constant", ranks=2, steps=14,
                        notify=endpoint, summary=True)
    finally:
        endpoint.close()


@pytest.mark.distributed
def test_a_constant_reward_is_said_on_the_terminal_and_at_the_webhook_while_the_job_runs(constant_two_ranks):
    run = constant_two_ranks
    assert run["status"] == 0, run["stderr"][-3000:]
    said = run.get("said")
    assert said is not None, run["stderr"][-3000:]
    # step 1 is the first degenerate step; said when the 5th constant step is logged, never after the 6th
    assert not said["ended"] and said["steps_printed"] <= 6, said
    live = [a for a in run["arrivals"] if a["body"]["grpo_doctor"]["event"] == "live"]
    ids = {a["body"]["grpo_doctor"]["finding"]["id"] for a in live}
    assert ids & {"constant-reward", "dead-step"}, run["arrivals"]
    first = live[0]
    assert not first["ended"] and first["steps_printed"] <= 6, first
    assert "seen while the job runs" in first["body"]["text"] and "step 1" in first["body"]["text"]


@pytest.mark.distributed
def test_summary_shows_the_live_finding_during_the_run_and_the_report_agrees(constant_two_ranks):
    run = constant_two_ranks
    assert run["summary"] is not None and LIVE in run["summary"], run["summary"]
    assert "running" in run["summary"] and not run["summary_ended"], run["summary"]
    live, reported = said_live(run["run_dir"]), findings_of(run["run_dir"])
    assert ("constant-reward", 1) in live and live <= reported, (live, reported)
    # the report's webhook message leaves out what was posted live
    finals = [a for a in run["arrivals"] if a["body"]["grpo_doctor"]["event"] == "finding"]
    assert not any(a["body"]["grpo_doctor"]["finding"]["id"] == "constant-reward" for a in finals)


def test_trls_printed_metric_dicts_alone_are_enough(tmp_path):
    run = watch_trl(tmp_path, "--reward", "constant", "--plain", ranks=1, steps=8)
    assert run["status"] == 0, run["stderr"][-3000:]
    line = next((s for s in run["stderr"].splitlines() if LIVE in s), None)
    assert line is not None and "TRL's printed metrics" in line, run["stderr"][-3000:]
    assert not run["said"]["ended"] and run["said"]["steps_printed"] <= 6, run["said"]
    assert not list(run["run_dir"].glob("ranks/*.jsonl"))  # nothing of grpo-doctor ran inside the job
    live, reported = said_live(run["run_dir"]), findings_of(run["run_dir"])
    assert ("constant-reward", 1) in live and live <= reported, (live, reported)


def test_a_healthy_trl_run_gets_no_live_finding(tmp_path):
    run = watch_trl(tmp_path, ranks=1, steps=8, reward_delay_s=0)
    assert run["status"] == 0, run["stderr"][-3000:]
    assert "live:" not in run["stderr"], run["stderr"][-3000:]
    files = list(run["run_dir"].glob("supervisor/*/live-findings.json"))
    assert len(files) == 1 and json.loads(files[0].read_text())["findings"] == []  # judged live, nothing found
    assert findings_of(run["run_dir"]) == set()
