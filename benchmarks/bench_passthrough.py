"""watch's output passthrough against the job alone (issue 15): a job writing at a set rate (default
50 MB/s, in 64 KiB writes, paced) for a fixed volume; the job itself measures the rate it achieved.
Alone its stdout goes to a pipe drained by `cat > /dev/null` (a job's output always meets a reader);
under `grpo-doctor watch` watch reads, forwards (to /dev/null), saves and scans it. Two kinds of
output: ordinary training lines, and signature-dense lines (every line an NCCL WARN, each one a
parse for the scanner). The two runs alternate (alone, watch, watch, alone, ...) `--rounds` times;
each side's median counts. Target: watch >= 0.95 x alone. Also reports how much of the output was
scanned live (the rest is scanned by `report` from the saved files).

Typical use:
    python benchmarks/bench_passthrough.py [--rate-mb-s 50] [--mb 200] [--rounds 3]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LINES = {
    "ordinary": b"{'loss': 0.0123, 'grad_norm': 0.41, 'learning_rate': 1e-06, 'reward': 0.5, 'epoch': 0.01}\n",
    "signature-dense": b"node-3:4711:4790 [5] NCCL WARN NET/IB : Got async event : port error\n",
}

JOB = r"""
import os, sys, time
line, rate, total = bytes.fromhex(sys.argv[1]), float(sys.argv[2]) * 1e6, int(float(sys.argv[3]) * 1e6)
block = line * max(1, 65536 // len(line))
fd, written, start = 1, 0, time.perf_counter()
while written < total:
    view = memoryview(block)
    while view:
        view = view[os.write(fd, view):]
    written += len(block)
    ahead = written / rate - (time.perf_counter() - start)
    if ahead > 0:
        time.sleep(ahead)
print(f"{written / (time.perf_counter() - start) / 1e6:.3f}", file=sys.stderr)
"""


def run_once(kind: str, under_watch: bool, rate: float, mb: float, tmp: Path) -> tuple[float, dict]:
    job = [sys.executable, "-c", JOB, LINES[kind].hex(), str(rate), str(mb)]
    if under_watch:
        run_dir = tmp / f"run-{time.monotonic_ns()}"
        cmd = [sys.executable, "-m", "grpo_doctor.cli.main", "watch", "--run-dir", str(run_dir), "--no-report", "--", *job]
        out = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=True)
        summary = json.loads(next(run_dir.glob("supervisor/*/summary.json")).read_text())
        rate_line = next(line for line in out.stderr.splitlines() if line.replace(".", "").isdigit())
        return float(rate_line), summary
    drain = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    out = subprocess.run(job, stdout=drain.stdin, stderr=subprocess.PIPE, text=True, check=True)
    drain.stdin.close()
    drain.wait()
    return float(out.stderr.strip()), {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate-mb-s", type=float, default=50.0)
    parser.add_argument("--mb", type=float, default=200.0, help="output volume per run, MB")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; job at {args.rate_mb_s} MB/s, "
          f"{args.mb} MB a run, {args.rounds} rounds alternating")
    print(f"{'output':16} {'alone MB/s':>11} {'watch MB/s':>11} {'ratio':>6}  live-scanned")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for kind in LINES:
            alone, watched, skipped = [], [], []
            for i in range(args.rounds):
                order = (False, True) if i % 2 == 0 else (True, False)
                for under_watch in order:
                    rate, summary = run_once(kind, under_watch, args.rate_mb_s, args.mb, tmp)
                    (watched if under_watch else alone).append(rate)
                    if under_watch:
                        skipped.append(summary.get("live_scan_skipped_bytes", 0))
            a, w = statistics.median(alone), statistics.median(watched)
            scanned = 1 - statistics.median(skipped) / (args.mb * 1e6)
            print(f"{kind:16} {a:11.1f} {w:11.1f} {w / a:6.2f}  {scanned:.0%}")


if __name__ == "__main__":
    main()
