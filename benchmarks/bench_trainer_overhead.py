"""Step time of the reference trainer with grpo-doctor recording on against off.

Target (issue 2): ratio <= 1.02. Runs are interleaved (on, off, on, off, ...) so that load
from elsewhere on the shared machine hits both sides alike; each run's first steps (warm-up)
are dropped and the median step time of the rest is compared.

Typical use:
    python benchmarks/bench_trainer_overhead.py [--pairs 3] [--steps 30] [--nproc 1]
"""
from __future__ import annotations

import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile

STEP_LINE = re.compile(r"^step (\d+) .* ([0-9.]+)s$")


def step_times_s(nproc: int, steps: int, record: bool, sync: bool) -> list[float]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run_dir = tempfile.mkdtemp(prefix="bench-overhead-")
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}", "--master-addr=127.0.0.1",
           f"--master-port={port}", "-m", "trainer.train", "--model", "tiny", "--steps", str(steps),
           "--log-every", "1", "--run-dir", run_dir]
    cmd += [] if record else ["--no-record"]
    cmd += ["--sync-phases"] if sync and record else []
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, env=env)
    if out.returncode != 0:
        raise SystemExit(f"trainer failed:\n{out.stderr[-3000:]}")
    times = [float(m.group(2)) for line in out.stdout.splitlines() if (m := STEP_LINE.match(line.strip()))]
    return times[3:]  # warm-up


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--nproc", type=int, default=1)
    parser.add_argument("--sync-phases", action="store_true", help="record with sync=True (a no-op without CUDA)")
    args = parser.parse_args()
    on: list[float] = []
    off: list[float] = []
    for _ in range(args.pairs):
        on += step_times_s(args.nproc, args.steps, True, args.sync_phases)
        off += step_times_s(args.nproc, args.steps, False, args.sync_phases)
    on_median, off_median = statistics.median(on), statistics.median(off)
    print(f"ranks {args.nproc}, {args.pairs} interleaved pairs of {args.steps} steps, {len(on)} timed steps a side")
    print(f"{'recording':<10} {'median step s':>14} {'mean step s':>12}")
    print(f"{'on':<10} {on_median:>14.4f} {statistics.mean(on):>12.4f}")
    print(f"{'off':<10} {off_median:>14.4f} {statistics.mean(off):>12.4f}")
    print(f"ratio on/off (median): {on_median / off_median:.3f}   target <= 1.02")


if __name__ == "__main__":
    main()
