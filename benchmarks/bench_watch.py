"""How fast and how cheaply `grpo-doctor watch` finds a hang.

1. latency, 4 ranks: the reference trainer under torchrun (gloo, CPU) with rank 3 stuck in
   rollout. Measured: from the last record any rank wrote (the moment the last rank stopped
   making progress) to the last stack file on disk, first and second look, against the stall
   timeout in force. Target: <= timeout + 5 s.
2. latency, 64 processes: a synthetic launcher with 64 instrumented "ranks" (no torch); rank 63
   sticks in rollout, the others in reward.
3. supervisor CPU, 8 ranks at 1 Hz sampling: watch's own CPU time (children excluded) over a
   steady run of 8 synthetic ranks, as % of one core. Target: <= 2 %.
4. against the watchdog: the same hang (rank 1 stuck), once under watch (time to the named
   stuck rank) and once left to the collective timeout (time until the job fails, naming no
   rank), side by side. The timeout is set to 120 s to keep the benchmark short; PyTorch's
   defaults are 600 s (NCCL) and 1800 s (gloo), so the ratio at defaults is also printed.

Typical use:
    python benchmarks/bench_watch.py [--parts latency4,latency64,cpu,watchdog]
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
SYNTHETIC_LAUNCHER = """
import os, subprocess, sys
n = int(sys.argv[1]); stop_at = int(sys.argv[2])
rank_code = '''
import os, sys, time, grpo_doctor as gd
rank, stop_at = int(os.environ["RANK"]), int(sys.argv[1])
gd.init()
for step in range(10**9):
    with gd.phase("rollout"):
        time.sleep(0.2 if rank != int(os.environ["WORLD_SIZE"]) - 1 or step < stop_at else 10**6)
    with gd.phase("reward"):
        time.sleep(0.05 if step < stop_at else 10**6)
    gd.step(step, loss=0.1)
'''
procs = [subprocess.Popen([sys.executable, "-c", rank_code, str(stop_at)],
                          env=dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(n)))
         for r in range(n)]
for p in procs:
    p.wait()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env() -> dict[str, str]:
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))


def watch(run_dir: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "grpo_doctor.cli.main", "watch", "--run-dir", str(run_dir), *args, "--"]


def last_record_t(run_dir: Path) -> float:
    last = 0.0
    for path in (run_dir / "ranks").glob("rank-*.jsonl"):
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("kind") in ("phase_begin", "phase_end", "step"):
                last = max(last, record["t"])
    return last


def latency(run_dir: Path) -> tuple[float, float, float]:
    """(first look s, second look s, timeout s) measured from the last progress."""
    report = json.loads(next((run_dir / "supervisor").glob("*/hang-1.json")).read_text())
    stopped_t = last_record_t(run_dir)
    first, second = (max(p.stat().st_mtime for p in Path(d).glob("rank-*")) for d in report["stack_dirs"])
    timeout_s = max(r.get("timeout_s") or 0.0 for r in report["ranks"].values())
    return first - stopped_t, second - stopped_t, timeout_s


def bench_trainer_latency(tmp: Path, nproc: int) -> None:
    run_dir = tmp / f"trainer-{nproc}"
    cmd = watch(run_dir, "--hang-floor", "10", "--hang-factor", "5", "--on-hang", "kill") + [
        sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}", "--master-addr=127.0.0.1",
        f"--master-port={free_port()}", "-m", "grpo_doctor_trainer.train", "--model", "tiny", "--steps", "30",
        "--inject", f"hang:rank={nproc - 1},phase=rollout,step=4"]
    subprocess.run(cmd, env=env(), cwd=tmp, capture_output=True, timeout=900)
    first, second, timeout_s = latency(run_dir)
    print(f"{nproc} trainer ranks (gloo)     timeout {timeout_s:6.1f} s   first look {first:6.1f} s "
          f"(timeout +{first - timeout_s:.1f})   second look {second:6.1f} s (timeout +{second - timeout_s:.1f})")


def bench_synthetic_latency(tmp: Path, n: int) -> None:
    run_dir = tmp / f"synthetic-{n}"
    launcher = tmp / "launcher.py"
    launcher.write_text(textwrap.dedent(SYNTHETIC_LAUNCHER))
    cmd = watch(run_dir, "--hang-floor", "10", "--hang-factor", "5", "--on-hang", "kill") + [
        sys.executable, str(launcher), str(n), "6"]
    subprocess.run(cmd, env=env(), cwd=tmp, capture_output=True, timeout=900)
    first, second, timeout_s = latency(run_dir)
    print(f"{n} synthetic ranks          timeout {timeout_s:6.1f} s   first look {first:6.1f} s "
          f"(timeout +{first - timeout_s:.1f})   second look {second:6.1f} s (timeout +{second - timeout_s:.1f})")


def bench_cpu(tmp: Path, n: int, duration_s: float) -> None:
    launcher = tmp / "launcher.py"
    launcher.write_text(textwrap.dedent(SYNTHETIC_LAUNCHER))
    run_dir = tmp / f"cpu-{n}"
    proc = subprocess.Popen(watch(run_dir) + [sys.executable, str(launcher), str(n), str(10**9)], env=env(), cwd=tmp,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        me = psutil.Process(proc.pid)
        time.sleep(10)  # start-up and the ranks' imports
        before, t0 = me.cpu_times(), time.monotonic()
        time.sleep(duration_s)
        after, t1 = me.cpu_times(), time.monotonic()
    finally:
        proc.send_signal(2)
        time.sleep(1)
        proc.send_signal(2)
        proc.wait(timeout=60)
    cpu_s = (after.user - before.user) + (after.system - before.system)
    print(f"supervisor CPU, {n} ranks, 1 Hz sampling, {t1 - t0:.0f} s: {100 * cpu_s / (t1 - t0):.2f} % of one core "
          f"(target <= 2 %)")


def bench_vs_watchdog(tmp: Path, timeout_s: int) -> None:
    base = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--master-addr=127.0.0.1"]
    trainer = ["-m", "grpo_doctor_trainer.train", "--model", "tiny", "--steps", "30", "--dist-timeout-s", str(timeout_s),
               "--inject", "hang:rank=1,phase=rollout,step=4"]
    run_dir = tmp / "vs-watch"
    subprocess.run(watch(run_dir, "--on-hang", "kill") + base + [f"--master-port={free_port()}"] + trainer,
                   env=env(), cwd=tmp, capture_output=True, timeout=900)
    report = json.loads(next((run_dir / "supervisor").glob("*/hang-1.json")).read_text())
    named_s = report["detected_t"] - hang_began_t(run_dir)
    plain_dir = tmp / "vs-plain"
    subprocess.run(base + [f"--master-port={free_port()}"] + trainer + ["--run-dir", str(plain_dir)], env=env(),
                   cwd=tmp, capture_output=True, timeout=timeout_s + 300)
    ends = [json.loads(line)["t"] for p in (plain_dir / "ranks").glob("*.jsonl") for line in p.read_text().splitlines()
            if '"kind":"error"' in line]
    failed_s = min(ends) - hang_began_t(plain_dir)
    print(f"same hang, 2 ranks: watch names rank {report['culprits']} after {named_s:.1f} s (default policy); "
          f"the {timeout_s} s collective timeout fails the job after {failed_s:.1f} s, naming no rank")
    print(f"ratio watchdog/watch: {failed_s / named_s:.0f}x here; at PyTorch's defaults "
          f"{600 / named_s:.0f}x (NCCL, 600 s), {1800 / named_s:.0f}x (gloo, 1800 s)")


def hang_began_t(run_dir: Path) -> float:
    """When rank 1 entered the rollout in which it hangs (step 4)."""
    for line in (run_dir / "ranks" / "rank-00001.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record.get("kind") == "phase_begin" and record.get("phase") == "rollout" and record.get("step") == 4:
            return record["t"]
    raise SystemExit(f"no hang recorded in {run_dir}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--parts", default="latency4,latency64,cpu,watchdog")
    parser.add_argument("--cpu-seconds", type=float, default=30.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-watch-") as tmp_name:
        tmp = Path(tmp_name)
        parts = args.parts.split(",")
        if "latency4" in parts:
            bench_trainer_latency(tmp, 4)
        if "latency64" in parts:
            bench_synthetic_latency(tmp, 64)
        if "cpu" in parts:
            bench_cpu(tmp, 8, args.cpu_seconds)
        if "watchdog" in parts:
            bench_vs_watchdog(tmp, 120)


if __name__ == "__main__":
    main()
