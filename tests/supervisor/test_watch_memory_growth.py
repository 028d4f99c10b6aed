"""Issue 25 item 1, live: `memory-growth` said by `grpo-doctor watch` while the job runs, before the OOM.

The reference trainer for real (torchrun, two gloo ranks on the CPU) under watch with `--alert-live
--notify` to a local webhook:
- healthy, it says nothing about memory (terminal, live-findings.json, webhook);
- with `--inject leak:rank=1,mb_per_step=32` under an address-space limit (RLIMIT_AS set on the launcher,
  as `prlimit --as` does, so that torchrun's ranks inherit it and record it in their header) `LEAK_ROOM_STEPS`
  leaks above what a healthy rank 1 maps, run until the limit stops it: watch says the leak on the
  terminal, in live-findings.json and at the webhook before the job's end (the failed allocation's error
  record), with a projected step within 20 % of the step the limit stopped it at; `summary` shows it.
"""
from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import REPO, clean_env, free_port
from webhook import Endpoint

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.checks.memory_trend import MIB, MemoryGrowthConfig
from grpo_doctor.runlog.eventlog import load_run
from grpo_doctor.schema.live_findings import read_live_findings

ID = "memory-growth"
LEAK_MIB = 32
LEAK_ROOM_STEPS = 60  # the limit leaves this many leaks of room above a healthy rank 1's address space
HEALTHY_STEPS = 30  # past the check's warm-up and min_points (15 steps): judged, and found nothing
TIMEOUT_S = 300
# What `prlimit --as=N -- CMD` does, without needing util-linux: the launcher and its ranks inherit it.
LIMIT_AS = ("import os, resource, sys; resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[1]), "
            "resource.getrlimit(resource.RLIMIT_AS)[1])); os.execv(sys.argv[2], sys.argv[2:])")


def watch(run_dir: Path, *trainer_args: str, notify: Endpoint, limit_as: int | None = None) -> dict:
    """watch --alert-live over the reference trainer; watch's stderr lines with the wall time each was read."""
    launch = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
              "--master-port", str(free_port()), "-m", "grpo_doctor_trainer.train", "--run-dir", str(run_dir),
              "--log-every", "10", *trainer_args]
    if limit_as is not None:
        launch = [sys.executable, "-c", LIMIT_AS, str(limit_as), *launch]
    cmd = [sys.executable, "-m", "grpo_doctor.cli.main", "watch", "--run-dir", str(run_dir), "--no-report",
           "--alert-live", "--notify", notify.url, "--", *launch]
    began = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=REPO, env=clean_env(OMP_NUM_THREADS="1"), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    lines, deadline = [], time.monotonic() + TIMEOUT_S
    for line in proc.stderr:
        lines.append((time.time(), line.rstrip("\n")))
        if time.monotonic() > deadline:
            proc.kill()
            break
    status = proc.wait(timeout=60)
    stderr = "\n".join(line for _, line in lines)
    live = next(run_dir.glob("supervisor/*/live-findings.json"), None)
    return {"status": status, "lines": lines, "stderr": stderr, "wall_s": time.monotonic() - began,
            "live": read_live_findings(live) if live else None, "run": load_run([run_dir]), "run_dir": run_dir,
            "memory": load_evidence([run_dir]).memory,
            "posts": [(t, b["grpo_doctor"]) for t, b in zip(notify.arrived_t, notify.bodies, strict=True)]}


@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    endpoint = Endpoint()
    try:
        yield watch(tmp_path_factory.mktemp("healthy") / "run", "--steps", str(HEALTHY_STEPS), notify=endpoint)
    finally:
        endpoint.close()


@pytest.mark.distributed
@pytest.mark.slow
def test_a_healthy_run_under_watch_says_nothing_about_memory(healthy):
    run = healthy
    assert run["status"] == 0, run["stderr"][-3000:]
    assert ID not in run["stderr"], run["stderr"][-3000:]
    assert run["live"] is not None and not [f for f in run["live"] if f["id"] == ID]
    assert not [p for _, p in run["posts"] if p.get("finding", {}).get("id") == ID]
    cfg = MemoryGrowthConfig()  # the check did judge: each rank recorded more steps than it needs
    for rank in (0, 1):
        steps = run["memory"].query("rank == @rank")[["step", "host_vms_bytes"]].dropna()["step"].nunique()
        assert steps >= cfg.warmup_points + cfg.min_points + 5, (rank, steps)


@pytest.mark.distributed
@pytest.mark.slow
def test_a_leak_is_said_live_before_the_address_space_limit_stops_it_and_projected_within_20_percent(
        healthy, tmp_path):
    limit = int(healthy["memory"].query("rank == 1")["host_vms_bytes"].max() + LEAK_ROOM_STEPS * LEAK_MIB * MIB)
    endpoint = Endpoint()
    try:
        run = watch(tmp_path / "run", "--steps", "1000", "--inject", f"leak:rank=1,mb_per_step={LEAK_MIB}",
                    notify=endpoint, limit_as=limit)
    finally:
        endpoint.close()
    assert run["status"] != 0, "the leak never reached the address-space limit: " + run["stderr"][-3000:]

    # where and when the limit stopped it: rank 1's failed allocation
    leaking = run["run"].ranks[1]
    assert leaking.header.rlimit_as_bytes == limit
    [error] = leaking.errors
    assert "allocate memory" in error.message or "MemoryError" in error.exc_type, error.message
    stopped, stopped_t = error.step, error.t
    assert LEAK_ROOM_STEPS / 2 < stopped < 2 * LEAK_ROOM_STEPS, stopped

    # the terminal, before the end, with its projection
    said = [(t, line) for t, line in run["lines"] if f"live: CRITICAL {ID}" in line]
    assert said, run["stderr"][-3000:]
    said_t, line = said[0]
    assert "(rank memory records): virtual size (address space) of rank 1" in line, line
    assert "address-space limit (RLIMIT_AS) at about step" in line, line
    projected = int(re.search(r"at about step (\d+)", line).group(1))
    assert said_t < stopped_t, (said_t, stopped_t, line)
    assert abs(projected - stopped) <= 0.2 * stopped, (projected, stopped, line)

    # live-findings.json: said at which step, and its projection by the end
    [entry] = [f for f in run["live"] if f["id"] == ID]
    e = entry["evidence"]
    assert (entry["ranks"], entry["severity"], e["component"], e["capacity_kind"], e["capacity_bytes"]) == (
        [1], "critical", "address-space", "rlimit-as", limit)
    cfg = MemoryGrowthConfig()
    said_at = entry["said_at_step"]
    assert cfg.warmup_points + cfg.min_points - 1 <= said_at < stopped, said_at  # no sooner than the report could
    assert entry["said_t"] < stopped_t
    assert abs(e["projected_step"] - stopped) <= 0.2 * stopped, (e["projected_step"], stopped)

    # the webhook, before the end
    posts = [(t, p) for t, p in run["posts"] if p["event"] == "live" and p["finding"]["id"] == ID]
    assert len(posts) == 1 and posts[0][0] < stopped_t, (run["posts"], stopped_t)

    # summary shows what watch said
    summary = subprocess.run([sys.executable, "-m", "grpo_doctor.cli.main", "summary", str(run["run_dir"])],
                             cwd=REPO, env=clean_env(), capture_output=True, text=True, timeout=120).stdout
    assert f"live: CRITICAL {ID}" in summary and f"said by watch on {entry['hosts'][0]} at step {said_at}" in summary
    print(f"stopped by RLIMIT_AS at step {stopped}; said live at step {said_at} ({stopped_t - said_t:.1f} s before "
          f"the end) projecting step {projected} ({abs(projected - stopped) / stopped:.1%} off), step "
          f"{e['projected_step']} by the end; the webhook {stopped_t - posts[0][0]:.1f} s before the end; "
          f"watch ran {healthy['wall_s']:.0f} s healthy, {run['wall_s']:.0f} s leaking")
