"""Alerts: a real HTTP server on 127.0.0.1 receives the webhook POSTs, a real shell runs the command;
a failing or slow endpoint costs one line and a bounded time, never the job."""
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import clean_env, free_port, write_program
from webhook import TOKEN, Endpoint

from grpo_doctor.checks.rng_sharing import SharedRngState
from grpo_doctor.schema.watch_files import HangRank, HangReport
from grpo_doctor.supervisor.alert_payload import finding_from_hang, finding_from_seed_collision
from grpo_doctor.supervisor.alerts import Alerter, AlertSettings, shown_url
from grpo_doctor.supervisor.watch import HANG_EXIT


@pytest.fixture
def endpoint_factory():
    made = []

    def make(**kw) -> Endpoint:
        made.append(Endpoint(**kw))
        return made[-1]
    yield make
    for e in made:
        e.close()


def hang_finding() -> dict:
    report = HangReport(host="node-7", detected_t=time.time(), culprits=(1,),
                        ranks={0: HangRank(pid=10, verdict="stuck", open_phase="step/allreduce", step=3),
                               1: HangRank(pid=11, verdict="stuck", open_phase="rollout/reward", step=3)},
                        groups=("rank 1: compute_reward (reward.py:12)",))
    return finding_from_hang(report, Path("/runs/x/supervisor/node-7/hang-1.json"))


def alerter(tmp_path: Path, notes: list, **settings) -> Alerter:
    fast = {"attempt_timeout_s": 1.0, "backoff_s": 0.05, "exec_timeout_s": 5.0, "end_wait_s": 5.0, **settings}
    return Alerter(AlertSettings(**fast), host="node-7", run_dir=tmp_path / "run",
                   out_path=tmp_path / "run" / "alerts.jsonl", note=notes.append)


def records(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "run" / "alerts.jsonl").read_text().splitlines()]


def test_a_hang_reaches_a_webhook_as_a_chat_message_with_the_finding_alongside(tmp_path, endpoint_factory):
    endpoint, notes = endpoint_factory(), []
    alerts = alerter(tmp_path, notes, notify_urls=(endpoint.url,))
    alerts.send("hang", hang_finding())
    alerts.close()
    (body,) = endpoint.bodies
    text = body["text"]
    assert "CRITICAL hang* hang on node-7" in text and "wait for rank(s) 1 in rollout/reward at step 3" in text
    assert "host node-7" in text and "remedy: Read the stacks" in text and str(tmp_path / "run") in text
    assert body["grpo_doctor"]["finding"]["ranks"] == [1] and body["grpo_doctor"]["event"] == "hang"
    (rec,) = records(tmp_path)
    assert rec["ok"] and rec["outcome"] == "HTTP 200" and rec["target"] == shown_url(endpoint.url)
    assert TOKEN not in json.dumps(rec) and notes == []


def test_a_failing_endpoint_is_tried_three_times_and_costs_one_line_without_its_token(tmp_path, endpoint_factory):
    failing, notes = endpoint_factory(status=500), []
    closed_port = f"http://127.0.0.1:{free_port()}/hooks/{TOKEN}"
    alerts = alerter(tmp_path, notes, notify_urls=(failing.url, closed_port))
    alerts.send("hang", hang_finding())
    alerts.close()
    assert failing.num_requests == 3
    assert len(notes) == 2 and all("failed after 3 attempt(s)" in n and TOKEN not in n for n in notes), notes
    assert any("HTTP 500" in n for n in notes) and any("refused" in n.lower() for n in notes)
    assert sorted(r["attempts"] for r in records(tmp_path)) == [3, 3]


def test_a_client_error_is_not_retried(tmp_path, endpoint_factory):
    gone, notes = endpoint_factory(status=404), []
    alerts = alerter(tmp_path, notes, notify_urls=(gone.url,))
    alerts.send("hang", hang_finding())
    alerts.close()
    assert gone.num_requests == 1 and "HTTP 404" in notes[0]


def test_a_slow_endpoint_holds_the_end_of_the_job_no_longer_than_the_bound(tmp_path, endpoint_factory):
    slow, notes = endpoint_factory(delay_s=3.0), []
    alerts = alerter(tmp_path, notes, notify_urls=(slow.url,), attempt_timeout_s=0.3, end_wait_s=0.5)
    start = time.monotonic()
    alerts.send("hang", hang_finding())
    assert time.monotonic() - start < 0.2  # sending is never a delay
    alerts.close()
    assert time.monotonic() - start < 1.0
    (rec,) = records(tmp_path)
    assert not rec["ok"] and "left behind" in rec["outcome"]
    assert len(notes) == 1 and "still pending" in notes[0] and "127.0.0.1" in notes[0]


def test_the_hang_command_gets_the_finding_on_stdin_and_in_its_environment(tmp_path):
    notes = []
    alerts = alerter(tmp_path, notes, on_hang_exec=f"cat > {tmp_path}/stdin.json; env > {tmp_path}/env.txt")
    alerts.send("hang", hang_finding())
    alerts.close()
    payload = json.loads((tmp_path / "stdin.json").read_text())
    assert payload["finding"]["id"] == "hang" and payload["host"] == "node-7"
    env = dict(line.split("=", 1) for line in (tmp_path / "env.txt").read_text().splitlines() if "=" in line)
    assert (env["GRPO_DOCTOR_FINDING_ID"], env["GRPO_DOCTOR_SEVERITY"], env["GRPO_DOCTOR_RANKS"]) == ("hang", "critical", "1")
    assert env["GRPO_DOCTOR_HANG_FILE"].endswith("hang-1.json") and env["GRPO_DOCTOR_STEP"] == "3"
    assert records(tmp_path)[0]["ok"] and notes == []


def test_a_failing_command_costs_one_line_and_a_slow_one_is_ended_at_its_timeout(tmp_path):
    notes = []
    alerts = alerter(tmp_path, notes, on_hang_exec="echo no pager configured >&2; exit 3",
                     on_finding_exec="sleep 30", exec_timeout_s=0.5)
    start = time.monotonic()
    alerts.send("hang", hang_finding())
    alerts.send("finding", {**hang_finding(), "id": "rank-crash"})
    alerts.close()
    assert time.monotonic() - start < 3.0
    assert sorted(notes) == ["alert to --on-finding-exec (rank-crash) failed: timed out after 0.5 s: ended",
                             "alert to --on-hang-exec (hang) failed: exit status 3: no pager configured"]


def test_at_the_end_the_chat_gets_one_message_per_incident_and_the_command_every_critical_finding(tmp_path, endpoint_factory):
    endpoint, notes = endpoint_factory(), []
    alerts = alerter(tmp_path, notes, notify_urls=(endpoint.url,), on_finding_exec=f"cat > {tmp_path}/ran-$$.json")
    alerts.send("hang", hang_finding(), run=False)  # the hang, posted while the job ran
    root = {**hang_finding(), "id": "rank-crash", "role": "root-cause"}
    consequence = {**hang_finding(), "id": "nccl-timeout", "role": "consequence", "caused_by": "rank-crash@1"}
    alerts.send_findings([root, consequence, hang_finding(), {**hang_finding(), "id": "straggler", "severity": "warning"}],
                         tmp_path / "run" / "report.html")
    alerts.close()
    assert [b["grpo_doctor"]["finding"]["id"] for b in endpoint.bodies].count("rank-crash") == 1
    assert sorted(b["grpo_doctor"]["finding"]["id"] for b in endpoint.bodies) == ["hang", "rank-crash"]
    # One file per command: the commands run side by side, and appends to one file would interleave.
    ran = [json.loads(path.read_text())["finding"]["id"] for path in tmp_path.glob("ran-*.json")]
    assert sorted(ran) == ["hang", "nccl-timeout", "rank-crash"]


def test_a_shared_sampling_seed_is_critical_live_and_a_shared_torch_state_only_a_warning():
    def shared(generator):
        return SharedRngState(ranks=(0, 1), tag="start", step=0, generator=generator, value=1234,
                              shared_generators=(generator,), diverged_at=None)
    assert finding_from_seed_collision(shared("sampling_seed"), {0: "a", 1: "a"})["severity"] == "critical"
    assert finding_from_seed_collision(shared("torch_cuda"), {0: "a"})["severity"] == "warning"


def test_a_notify_url_that_is_not_http_is_a_usage_error_at_start(tmp_path):
    out = subprocess.run([sys.executable, "-m", "grpo_doctor.cli.main", "watch", "--run-dir", str(tmp_path / "run"),
                          "--notify", f"hooks.slack.com/services/{TOKEN}", "--", "true"],
                         env=clean_env(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "only http:// and https://" in out.stderr and TOKEN not in out.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_hang_under_watch_posts_the_webhook_and_runs_the_command(tmp_path, endpoint_factory):
    endpoint = endpoint_factory()
    job = write_program(tmp_path, """
        import time, grpo_doctor as gd
        gd.init()
        for step in range(2):
            with gd.phase("rollout"):
                time.sleep(0.1)
            gd.step(step, loss=1.0)
        with gd.phase("reward"):
            time.sleep(3600)
    """, name="hangs.py")
    cmd = [sys.executable, "-m", "grpo_doctor.cli.main", "watch", "--run-dir", str(tmp_path / "run"),
           "--hang-timeout", "2", "--second-look", "0", "--on-hang", "kill", "--no-report",
           "--notify", endpoint.url, "--on-hang-exec", f"cat > {tmp_path}/hang.json",
           "--", sys.executable, str(job)]
    out = subprocess.run(cmd, env=clean_env(OMP_NUM_THREADS="1"), cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == HANG_EXIT, out.stderr[-3000:]
    (body,) = endpoint.bodies
    assert "CRITICAL hang" in body["text"] and "in reward at step 2" in body["text"], body["text"]
    finding = json.loads((tmp_path / "hang.json").read_text())["finding"]
    assert finding["id"] == "hang" and finding["ranks"] == [0] and finding["phase"] == "reward"
    sent = [json.loads(line) for line in next((tmp_path / "run" / "supervisor").glob("*/alerts.jsonl")).read_text().splitlines()]
    assert sorted(r["target"] for r in sent if r["ok"]) == ["--on-hang-exec", shown_url(endpoint.url)]


@pytest.mark.slow
def test_with_alert_live_a_shared_sampling_seed_is_posted_while_the_job_runs(tmp_path, endpoint_factory):
    endpoint = endpoint_factory()
    rank = write_program(tmp_path, """
        import time, grpo_doctor as gd
        gd.init()
        gd.seed_audit(sampling_seed=7)
        time.sleep(4)
    """, name="rank.py")
    job = write_program(tmp_path, f"""
        import os, subprocess, sys
        procs = [subprocess.Popen([sys.executable, {str(rank)!r}], env={{**os.environ, "RANK": str(r), "LOCAL_RANK": str(r),
                                                                   "WORLD_SIZE": "2"}}) for r in range(2)]
        sys.exit(max(p.wait() for p in procs))
    """, name="launch.py")
    cmd = [sys.executable, "-m", "grpo_doctor.cli.main", "watch", "--run-dir", str(tmp_path / "run"), "--no-report",
           "--alert-live", "--notify", endpoint.url, "--on-finding-exec", f"cat > {tmp_path}/live.json",
           "--", sys.executable, str(job)]
    out = subprocess.run(cmd, env=clean_env(OMP_NUM_THREADS="1"), cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    (body,) = endpoint.bodies
    assert body["grpo_doctor"]["event"] == "live" and "CRITICAL seed-collision* ranks 0-1" in body["text"], body["text"]
    assert json.loads((tmp_path / "live.json").read_text())["finding"]["evidence"]["generator"] == "sampling_seed"
