"""Zero-code instrumentation's cost: a wrapped collective and an optimizer step, side by side with unwrapped.

In one process: a one-rank gloo group, `all_reduce` of a small tensor called through torch's own
function and through the wrapper `watch --instrument` installs (recording to a temporary run
directory, its flush thread running as in a job); an SGD step on a small model without and with
the global step hook that makes it a heartbeat. The two variants take turns in blocks of calls, so
this shared machine's load swings hit both alike; each figure is the median over blocks of the
per-call wall time. Then the start-up of a Python process that never touches torch (`python -c
pass`) and of one that imports torch, with and without the sitecustomize on PYTHONPATH, in fresh
interpreters, alternating.

Typical use:
    python benchmarks/bench_instrument.py [--blocks 30] [--calls 500] [--starts 8]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.optim.optimizer as optim_module  # noqa: E402

import grpo_doctor  # noqa: E402
from grpo_doctor.rank.auto import INSTRUMENT_ENV, collectives, optimizer, site_dir, state  # noqa: E402


def per_call_us(fn, calls: int, flush=None) -> tuple[float, float, float]:
    """Wall, process CPU (every thread) and calling-thread CPU microseconds per call; `flush` ends the
    block by writing what the calls queued, so the flush thread's encoding and writing count in it."""
    start, cpu, own = time.perf_counter(), time.process_time(), time.thread_time()
    for _ in range(calls):
        fn()
    own = time.thread_time() - own
    if flush is not None:
        flush()
    return ((time.perf_counter() - start) / calls * 1e6, (time.process_time() - cpu) / calls * 1e6,
            own / calls * 1e6)


def side_by_side(plain, wrapped, blocks: int, calls: int, flush) -> tuple[float, ...]:
    a, b = [], []
    for _ in range(blocks):
        a.append(per_call_us(plain, calls))
        b.append(per_call_us(wrapped, calls, flush))
    return medians(a, b)


def medians(a: list[tuple], b: list[tuple]) -> tuple[float, ...]:
    """(wall plain, wall wrapped, CPU plain, CPU wrapped, own-thread CPU plain, own-thread CPU wrapped)"""
    return tuple(statistics.median(x[i] for x in runs) for i in range(3) for runs in (a, b))


def start_s(env: dict[str, str], code: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", type=int, default=30)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--starts", type=int, default=8)
    args = parser.parse_args()

    tmp = tempfile.mkdtemp(prefix="bench-instrument-")
    dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=0, world_size=1)
    grpo_doctor.init(run_dir=tmp)
    state.recorder = grpo_doctor.rank.api.current_recorder()
    rows = []

    tensor = torch.ones(8)
    plain_all_reduce = dist.all_reduce
    wrapped_all_reduce = collectives._wrap_collective(dist, "all_reduce", plain_all_reduce, "tensor")
    flush = grpo_doctor.flush
    rows.append(("all_reduce, 8 floats, gloo, 1 rank",
                 *side_by_side(lambda: plain_all_reduce(tensor), lambda: wrapped_all_reduce(tensor),
                               args.blocks, args.calls, flush)))
    rows.append(("barrier, gloo, 1 rank",
                 *side_by_side(dist.barrier, collectives._wrap_collective(dist, "barrier", dist.barrier, None),
                               args.blocks, args.calls, flush)))

    model = torch.nn.Linear(64, 64)
    model(torch.ones(4, 64)).sum().backward()
    opt = torch.optim.SGD(model.parameters(), lr=1e-6)
    a, b = [], []
    for _ in range(args.blocks):
        a.append(per_call_us(opt.step, args.calls))
        handle = optim_module.register_optimizer_step_post_hook(optimizer._after_step)
        b.append(per_call_us(opt.step, args.calls, flush))
        handle.remove()
    rows.append(("SGD step, Linear(64, 64)", *medians(a, b)))
    num_steps = grpo_doctor.rank.api.current_recorder().num_steps
    grpo_doctor.shutdown()
    dist.destroy_process_group()

    base = {k: v for k, v in os.environ.items() if not k.startswith("GRPO_DOCTOR_")}
    on = {**base, "PYTHONPATH": f"{site_dir()}:{base.get('PYTHONPATH', '')}", INSTRUMENT_ENV: "1",
          "GRPO_DOCTOR_RUN_DIR": tmp}
    for label, code in (("python -c pass (s)", "pass"), ("python -c 'import torch' (s)", "import torch")):
        plain, instrumented = [], []
        for _ in range(args.starts):
            plain.append(start_s(base, code))
            instrumented.append(start_s(on, code))
        rows.append((label, statistics.median(plain), statistics.median(instrumented), None, None, None, None))

    print(f"torch {torch.__version__}, python {sys.version.split()[0]}, {os.cpu_count()} CPUs; "
          f"{args.blocks} blocks x {args.calls} calls; {num_steps} steps recorded")
    print("| call | wall plain | wall wrapped | added | ratio | CPU plain | CPU wrapped | CPU added | "
          "calling thread's CPU added |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for label, plain, wrapped, cpu_plain, cpu_wrapped, own_plain, own_wrapped in rows:
        cpu = (f"{cpu_plain:.1f} | {cpu_wrapped:.1f} | {cpu_wrapped - cpu_plain:.1f} | {own_wrapped - own_plain:.1f}"
               if cpu_plain is not None else "– | – | – | –")
        unit = "s" if label.endswith("(s)") else "µs"
        print(f"| {label} | {plain:.3f} | {wrapped:.3f} | {wrapped - plain:.3f} {unit} | {wrapped / plain:.3f} | {cpu} |")


if __name__ == "__main__":
    main()
