"""CPU cost of the supervisor's GPU and process sampler.

Target: sampling 8 ranks at 1 Hz costs at most 2% of one core. Eight real sleeping child
processes stand in for the ranks; the Sampler samples them (and every GPU, where NVML is there)
for --seconds. Measured side by side in one run, all at once:
  - in this process: the sampling thread's own CPU time (time.thread_time inside the thread),
    next to an idle thread that wakes at the same rate and does nothing;
  - in two dedicated processes: the whole process's CPU time (interpreter, GC, every thread),
    one running the Sampler, one running only the idle thread.

Typical use:
    python benchmarks/bench_sampler_cpu.py [--seconds 20] [--ranks 8] [--interval-s 1.0]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from grpo_doctor.host.nvml import Nvml
from grpo_doctor.supervisor.sampler import Sampler

TARGET_PCT = 2.0
RANK_CODE = "import time; print('ready', flush=True); time.sleep(3600)"


class IdleThread:
    """The floor: a thread that wakes at the sampler's rate and does nothing."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s, self.cpu_s, self.wakes = interval_s, 0.0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        next_wake = time.monotonic()
        while not self._stop.is_set():
            self.wakes += 1
            self.cpu_s = time.thread_time()
            next_wake = max(next_wake + self.interval_s, time.monotonic())
            self._stop.wait(next_wake - time.monotonic())
        self.cpu_s = time.thread_time()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5.0)


def run_worker(kind: str, pids: list[int], seconds: float, interval_s: float) -> None:
    """One dedicated process: the whole process's CPU over the window, as JSON on stdout."""
    out = Path(tempfile.mkdtemp(prefix="bench-sampler-")) / "samples.jsonl"
    cpu0, t0 = time.process_time(), time.monotonic()
    if kind == "sampler":
        runner = Sampler(out, interval_s=interval_s, notify=lambda message: None)
        runner.set_targets(dict(enumerate(pids)))
    else:
        runner = IdleThread(interval_s)
    runner.start()
    time.sleep(seconds)
    runner.stop()
    print(json.dumps({"cpu_s": time.process_time() - cpu0, "wall_s": time.monotonic() - t0}))


def start_ranks(num_ranks: int) -> list[subprocess.Popen]:
    cmd = [sys.executable, "-c", RANK_CODE]
    ranks = [subprocess.Popen(cmd, stdout=subprocess.PIPE) for _ in range(num_ranks)]
    for proc in ranks:
        assert proc.stdout.readline().strip() == b"ready"
    return ranks


def start_worker(kind: str, pids: list[int], args: argparse.Namespace) -> subprocess.Popen:
    cmd = [sys.executable, __file__, "--worker", kind, "--pids", ",".join(map(str, pids)),
           "--seconds", str(args.seconds), "--interval-s", str(args.interval_s)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--interval-s", type=float, default=1.0)
    parser.add_argument("--worker", choices=["sampler", "idle"], help=argparse.SUPPRESS)
    parser.add_argument("--pids", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        run_worker(args.worker, [int(p) for p in args.pids.split(",")], args.seconds, args.interval_s)
        return

    ranks = start_ranks(args.ranks)
    pids = [p.pid for p in ranks]
    nvml = Nvml()
    num_gpus = nvml.device_count() if nvml.available else 0
    try:
        workers = {kind: start_worker(kind, pids, args) for kind in ("sampler", "idle")}
        out = Path(tempfile.mkdtemp(prefix="bench-sampler-")) / "samples.jsonl"
        sampler = Sampler(out, nvml=nvml, interval_s=args.interval_s, notify=lambda message: None)
        sampler.set_targets(dict(enumerate(pids)))
        idle = IdleThread(args.interval_s)
        t0 = time.monotonic()
        sampler.start()
        idle.start()
        time.sleep(args.seconds)
        sampler.stop()
        idle.stop()
        wall_s = time.monotonic() - t0
        results = {kind: json.loads(w.communicate(timeout=args.seconds + 60)[0])
                   for kind, w in workers.items()}
    finally:
        for proc in ranks:
            proc.kill()
            proc.wait(timeout=10)
    num_rounds = sum(1 for line in out.read_text().splitlines() if '"rank": 0,' in line)

    rows = [
        ("idle thread, wakes at 1/interval", "thread", idle.cpu_s, wall_s, idle.wakes),
        (f"Sampler thread, {args.ranks} ranks, {num_gpus} GPUs", "thread", sampler.cpu_s, wall_s, num_rounds),
        ("idle thread, own process", "process", results["idle"]["cpu_s"], results["idle"]["wall_s"], None),
        (f"Sampler, own process, {args.ranks} ranks", "process", results["sampler"]["cpu_s"],
         results["sampler"]["wall_s"], None),
    ]
    nvml_state = f"available, {num_gpus} GPUs" if nvml.available else "unavailable (GPU sampling off)"
    print(f"interval {args.interval_s} s, {args.seconds:.0f} s window, python {sys.version.split()[0]}, "
          f"NVML {nvml_state}")
    print(f"{'what':44} {'measured':>8} {'rounds':>6} {'CPU s':>8} {'% of 1 core':>11} {'ms/round':>8}")
    for what, measured, cpu_s, wall, rounds in rows:
        per_round = f"{1000 * cpu_s / rounds:8.3f}" if rounds else f"{'':8}"
        pct = 100 * cpu_s / wall
        print(f"{what:44} {measured:>8} {rounds or '':>6} {cpu_s:8.4f} {pct:11.3f} {per_round}")
    sampler_pct = 100 * sampler.cpu_s / wall_s
    idle_pct = 100 * idle.cpu_s / wall_s
    ratio = f"{sampler.cpu_s / idle.cpu_s:.0f}x the idle thread" if idle.cpu_s else "idle thread measured 0"
    verdict = "within" if sampler_pct <= TARGET_PCT else "OVER"
    print(f"sampler thread: {sampler_pct:.3f}% of one core ({ratio}, floor {idle_pct:.3f}%), "
          f"{verdict} the {TARGET_PCT}% target")


if __name__ == "__main__":
    main()
