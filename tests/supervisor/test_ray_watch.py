"""watch around a real Ray job on this machine (Ray runs on CPU): two actors in a gloo process group,
a third actor outside it, the job's script never importing grpo_doctor (ray_jobs/gloo_actors.py).

Each test starts a local Ray instance from the wrapped command (`ray.init()`), so each takes
15-40 s: they are few, and each checks everything a user would see of its failure.
"""
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from helpers import clean_env, free_port
from webhook import Endpoint

pytest.importorskip("ray", reason="Ray is in the dev extra: pip install -c constraints-dev.txt -e '.[dev]'")

JOB = Path(__file__).parent / "ray_jobs" / "gloo_actors.py"
GRPO_DOCTOR = [sys.executable, "-m", "grpo_doctor.cli.main"]
pytestmark = [pytest.mark.slow, pytest.mark.distributed]


def watch(tmp_path: Path, fault: str, *flags: str, rank_from: str = "", timeout_s: float = 240):
    run_dir = tmp_path / "run"
    env = ray_env(FAULT=fault, RANK_FROM=rank_from)
    proc = subprocess.run([*GRPO_DOCTOR, "watch", "--run-dir", str(run_dir), *flags, "--",
                           sys.executable, str(JOB)], env=env, capture_output=True, text=True, timeout=timeout_s)
    return proc, run_dir


def ray_env(**extra: str) -> dict[str, str]:
    # Ray 2.5x's token authentication keeps one token in ~/.ray: Ray instances started by tests running at
    # once would overwrite each other's. Nothing here listens beyond this machine.
    return clean_env(FAULT_STEP="2", GLOO_PORT=str(free_port()), RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled",
                     **extra)


def findings(run_dir: Path) -> list[dict]:
    return json.loads((run_dir / "findings.json").read_text())["findings"]


def test_an_actor_stuck_in_its_reward_function_is_caught_named_by_its_role_and_alerted(tmp_path):
    """The issue's own case: OpenRLHF-style actors (RANK set inside the actor), zero-code instrumentation."""
    endpoint = Endpoint()
    try:
        proc, run_dir = watch(tmp_path, "hang-reward", "--instrument", "--hang-timeout", "15", "--second-look", "2",
                              "--on-hang", "kill", "--notify", endpoint.url)
    finally:
        endpoint.close()
    out = proc.stderr
    assert proc.returncode == 124, out[-3000:]
    # The rank files came from the instrumented actors, not from the script.
    assert sorted(p.name for p in (run_dir / "ranks").glob("rank-*.jsonl")) == ["rank-00000.jsonl", "rank-00001.jsonl"]
    hang = json.loads(next((run_dir / "supervisor").glob("*/hang-1.json")).read_text())
    assert hang["culprits"] == [1], out[-3000:]
    assert hang["ranks"]["1"]["role"].startswith("ray::PolicyWorker")
    assert any(f["function"].endswith("reward") for f in hang["stacks"]["1"]["frames"])
    assert "all_reduce" in hang["stacks"]["0"]["frames"][0]["function"] or "all_reduce" in json.dumps(hang["stacks"]["0"])
    # The actor outside the group is looked at too, and told idle rather than stuck.
    assert [a["role"] for a in hang["actors"]] == ["ray::RolloutWorker"]
    assert hang["actors"][0]["verdict"].startswith("idle")
    assert "the others wait for: rank 1 (ray::PolicyWorker" in out
    hang_findings = [f for f in findings(run_dir) if f["id"] == "hang"]
    assert hang_findings and hang_findings[0]["ranks"] == [1]
    assert endpoint.bodies, "the webhook was never called"
    assert "hang" in endpoint.bodies[0]["text"] and "rank" in endpoint.bodies[0]["text"]


def test_a_sigkilled_actor_is_named_as_the_rank_that_died_and_the_other_as_its_consequence(tmp_path):
    """verl-style actors (RANK through the runtime_env, readable from outside), not instrumented."""
    proc, run_dir = watch(tmp_path, "kill", "--hang-timeout", "60", rank_from="runtime-env")
    out = proc.stderr
    assert proc.returncode == 1, out[-3000:]
    # Not instrumented: no end record can say how it ended; watch's end-of-job lines name it by its role.
    assert any(line.startswith("grpo-doctor:   rank 1: pid") and "(ray::PolicyWorker) exited" in line
               for line in out.splitlines()), out[-3000:]
    crashes = [f for f in findings(run_dir) if f["id"] == "rank-crash"]
    root = [f for f in crashes if f.get("role") == "root-cause"]
    assert [f["ranks"] for f in root] == [[1]], json.dumps(crashes, indent=1)[:3000]
    assert all(f["ranks"] != [0] or f["severity"] == "warning" for f in crashes)


def test_a_task_that_raises_names_its_rank_and_the_exception(tmp_path):
    proc, run_dir = watch(tmp_path, "raise", "--hang-timeout", "60", rank_from="runtime-env")
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "ValueError: reward model returned no score for prompt 17" in (
        next((run_dir / "supervisor").glob("*/stderr.log")).read_text())
    root = [f for f in findings(run_dir) if f["id"] == "rank-crash" and f.get("role") == "root-cause"]
    assert [f["ranks"] for f in root] == [[1]]
    assert "PolicyWorker.train_step" in root[0]["title"]



def test_one_watch_per_node_around_ray_start_catches_a_hang_even_where_no_rank_is_known(tmp_path):
    """A multi-node Ray cluster as verl and OpenRLHF users start one: `ray start --block` under watch on
    every node, the driver started elsewhere. Here one node; its workers are watch's, the driver is not.
    Not instrumented, and RANK set inside the actors (OpenRLHF): no rank can be known from outside, so
    the Ray workers themselves are looked at, and the one the others wait for is named by pid and role."""
    run_dir, port = tmp_path / "run", free_port()
    env = ray_env(FAULT="hang-reward")
    ray = str(Path(sys.executable).parent / "ray")
    # Its own temp dir (short: Ray's socket paths must fit 107 bytes), so that the address `ray start`
    # leaves behind is never found by another test's ray.init().
    temp_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    node = subprocess.Popen([*GRPO_DOCTOR, "watch", "--run-dir", str(run_dir), "--hang-timeout", "10",
                             "--second-look", "2", "--on-hang", "kill", "--", ray, "start", "--head", "--block", "--num-cpus", "3",
                             "--port", str(port), "--include-dashboard", "false", "--temp-dir", temp_dir],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    driver = None
    try:
        deadline = time.monotonic() + 60
        # stdout.log and stderr.log are each created by their own tee thread, in no set order: read what is there.
        while "Ray runtime started" not in "".join(
                saved.read_text() for saved in (run_dir / "supervisor").glob("*/std*.log")):
            assert time.monotonic() < deadline and node.poll() is None, "ray start did not come up under watch"
            time.sleep(0.5)
        driver = subprocess.Popen([sys.executable, str(JOB)], env={**env, "RAY_ADDRESS": f"127.0.0.1:{port}"},
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, out = node.communicate(timeout=180)
    finally:
        for proc in (node, driver):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
        shutil.rmtree(temp_dir, ignore_errors=True)
    assert node.returncode == 124, out[-3000:]
    assert "hang on" in out and "no progress from the job's Ray workers (no rank known)" in out
    hang = json.loads(next((run_dir / "supervisor").glob("*/hang-1.json")).read_text())
    assert hang["ranks"] == {} and len(hang["actors"]) == 3
    (waited_for,) = [a for a in hang["actors"] if a.get("waited_for")]
    assert waited_for["role"].startswith("ray::PolicyWorker") and "reward" in waited_for["where"]
    assert f"the others wait for: Ray worker pid {waited_for['pid']} (ray::PolicyWorker" in out
    (finding,) = [f for f in findings(run_dir) if f["id"] == "hang"]
    assert f"the other Ray workers wait for pid {waited_for['pid']}" in finding["title"]
