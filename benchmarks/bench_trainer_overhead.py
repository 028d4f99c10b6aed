"""Step time of the reference trainer with grpo-doctor recording on against off, in one process.

Target (issue 2): ratio <= 1.02. Separate processes are useless for a 2 % question on this
machine: the same seeded run varies by +-25 % from one process to the next (CPU placement,
allocator layout). So one trainer runs every step of the comparison, and each step is assigned
at random (seeded) to "on" (phases, memory snapshot and step recorded, as train.py does) or
"off" (recording switched off for that step, the flush thread still alive). Steps differ in
generation length, so the figure is the ratio of mean step times over many steps, with the
ratio of medians beside it.

The recording cost is fixed per step (about 16 records), so its ratio depends on the step
length: the default tiny model steps in about 50 ms on this CPU, far shorter than any real GRPO
step; `--trainer-args` runs a heavier step for comparison.

Typical use:
    python benchmarks/bench_trainer_overhead.py [--steps 400] [--sync-phases]
    python benchmarks/bench_trainer_overhead.py --steps 200 --trainer-args "--per-device-batch 16 --max-new-tokens 32"
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

from grpo_doctor_trainer.config import parse_args  # noqa: E402
from grpo_doctor_trainer.dist import init_distributed, shutdown_distributed  # noqa: E402
from grpo_doctor_trainer.train import build_trainer  # noqa: E402

import grpo_doctor as gd  # noqa: E402
from grpo_doctor.rank import api  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--trainer-args", default="", help="extra trainer flags, e.g. '--per-device-batch 16'")
    parser.add_argument("--sync-phases", action="store_true", help="record with sync=True (a no-op without CUDA)")
    args = parser.parse_args()
    cfg = parse_args(["--model", "tiny", "--steps", str(args.steps), *args.trainer_args.split()])
    info = init_distributed(cfg.backend, cfg.dist_timeout_s)
    run_dir = tempfile.mkdtemp(prefix="bench-overhead-")
    gd.init(run_dir, sync=args.sync_phases)
    recorder = api._recorder  # benchmark-only: switch recording per step without a new process
    trainer = build_trainer(cfg, info, tempfile.mkdtemp(prefix="bench-trainer-"))
    choice = random.Random(0)
    times: dict[bool, list[float]] = {True: [], False: []}
    for n in range(args.warmup + args.steps):
        on = choice.random() < 0.5
        api._recorder = recorder if on else None
        api._disabled = not on
        began = time.perf_counter()
        metrics = trainer.run_step(n)
        gd.memory_snapshot("step")
        gd.step(n, **metrics)
        if n >= args.warmup:
            times[on].append(time.perf_counter() - began)
    api._recorder, api._disabled = recorder, False
    flush_cpu_s = time.clock_gettime(time.pthread_getcpuclockid(recorder.sink._thread.ident))
    gd.shutdown()
    shutdown_distributed()
    on, off = times[True], times[False]
    print(f"trainer flags: --model tiny {args.trainer_args}".rstrip())
    print(f"one process, {len(on)} steps recorded / {len(off)} not, randomly interleaved, after {args.warmup} warm-up")
    print(f"{'recording':<10} {'mean step ms':>13} {'median step ms':>15}")
    print(f"{'on':<10} {1000 * statistics.mean(on):>13.2f} {1000 * statistics.median(on):>15.2f}")
    print(f"{'off':<10} {1000 * statistics.mean(off):>13.2f} {1000 * statistics.median(off):>15.2f}")
    print(f"ratio on/off: mean {statistics.mean(on) / statistics.mean(off):.3f}, "
          f"median {statistics.median(on) / statistics.median(off):.3f}   target <= 1.02")
    per_step_us = 1e6 * flush_cpu_s / len(on)
    print(f"flush thread CPU: {1000 * flush_cpu_s:.1f} ms for {len(on)} recorded steps = {per_step_us:.0f} us a step "
          f"({100 * per_step_us / 1e6 / statistics.mean(off):.2f} % of the mean unrecorded step)")


if __name__ == "__main__":
    main()
