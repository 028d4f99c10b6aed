"""Cost of the rank-side API on the training loop's hot path.

Targets (issue 2): phase() begin+end without sync, median <= 5 us; step() with 10 metrics
<= 20 us; memory_snapshot() <= 1 ms without NVML. Measured per call with perf_counter_ns,
with the background flush thread running as in training; an empty `with nullcontext()` is
timed side by side as the floor of the measurement itself.

Typical use:
    python benchmarks/bench_rank_api.py [--calls 20000]
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time

import grpo_doctor as gd


def per_call_ns(fn, calls: int) -> list[int]:
    clock = time.perf_counter_ns
    samples = []
    for _ in range(calls):
        t0 = clock()
        fn()
        samples.append(clock() - t0)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()
    gd.init(tempfile.mkdtemp(prefix="bench-rank-api-"))
    metrics = {f"m{i}": 0.1 * i for i in range(10)}
    counter = iter(range(10**9))

    def empty():
        with contextlib.nullcontext():
            pass

    def phase():
        with gd.phase("forward"):
            pass

    def step():
        gd.step(next(counter), **metrics)

    cases = [
        ("empty with nullcontext (floor)", empty, args.calls, None),
        ("phase() begin+end, no sync", phase, args.calls, 5_000),
        ("step() with 10 metrics", step, args.calls, 20_000),
        ("memory_snapshot(), no NVML", lambda: gd.memory_snapshot("bench"), args.calls // 10, 1_000_000),
    ]
    print(f"{'call':<34} {'median us':>10} {'p90 us':>8} {'target us':>10} {'ratio to target':>16}")
    for name, fn, calls, target_ns in cases:
        per_call_ns(fn, min(calls, 1000))  # warm up
        samples = sorted(per_call_ns(fn, calls))
        median, p90 = statistics.median(samples), samples[int(0.9 * len(samples))]
        ratio = f"{median / target_ns:.2f}" if target_ns else "-"
        target = f"{target_ns / 1000:.0f}" if target_ns else "-"
        print(f"{name:<34} {median / 1000:>10.2f} {p90 / 1000:>8.2f} {target:>10} {ratio:>16}")
    gd.shutdown()


if __name__ == "__main__":
    main()
