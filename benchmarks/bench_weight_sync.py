"""Cost of the weight-sync check (rank/weight_sync.py): per element, per tensor, per push of the
reference trainer, and a projection for a 7B model.

1. CPU time per parameter element, both sides of a check (trainer and engine), on 16 tensors of
   4 M elements: fp32 against fp32, bf16 against bf16, fp32 master weights against a bf16 engine
   (the cast). The cases take turns call by call; process CPU time and wall time per call.
2. CPU time per tensor pair on 1,000 tensors of 64 elements: the fixed cost (torch dispatch,
   Python) that dominates small models.
3. The reference trainer, one process on CPU, `--steps N`: every push checked; the records' own
   `duration_s` against the step time (the step records' spacing).
4. A 7B model (Llama-2-7B's 291 tensors, 6.74 G elements): the CPU cost from 1 and 2 (weights on
   the CPU), and a GPU projection (NOT a measurement): every element read once on each side at an
   assumed 2.5 TB/s (an H100's HBM3 is 3.35 TB/s at peak), plus the host-side dispatch of 2 measured
   here per tensor (kernels are queued without waiting; the one transfer waits for them).

Typical use:
    python benchmarks/bench_weight_sync.py [--calls 15] [--steps 30]
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
from types import SimpleNamespace

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

from grpo_doctor.rank import api  # noqa: E402
from grpo_doctor.rank.weight_sync import check_weight_sync  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
GPU_BYTES_PER_S = 2.5e12  # assumed achieved HBM read bandwidth of a reduction on an H100 (3.35 TB/s peak)


def llama_7b() -> tuple[int, int]:
    """(tensors, elements) of Llama-2-7B: hidden 4096, intermediate 11008, 32 layers, vocabulary 32000."""
    hidden, inter, layers, vocab = 4096, 11008, 32, 32000
    per_layer = [hidden * hidden] * 4 + [inter * hidden] * 3 + [hidden] * 2
    sizes = [vocab * hidden] + per_layer * layers + [hidden, vocab * hidden]
    return len(sizes), sum(sizes)


def timed(fns, calls: int) -> list[tuple[float, float]]:
    """(median CPU s, median wall s) per call of each function, the functions called in turn."""
    for fn in fns:
        fn()
    cpu: list[list[float]] = [[] for _ in fns]
    wall: list[list[float]] = [[] for _ in fns]
    for _ in range(calls):
        for i, fn in enumerate(fns):
            c0, w0 = time.process_time(), time.perf_counter()
            fn()
            cpu[i].append(time.process_time() - c0)
            wall[i].append(time.perf_counter() - w0)
    return [(statistics.median(c), statistics.median(w)) for c, w in zip(cpu, wall, strict=True)]


def stand_in_recorder() -> None:
    """Records go nowhere: what is timed is the check, not the sink (which costs the same per record)."""
    recorder = SimpleNamespace(ident=SimpleNamespace(rank=0, host="bench", pid=os.getpid()), current_step=0,
                               sink=SimpleNamespace(enqueue=lambda record: None))
    api.current_recorder = lambda: recorder


def per_element(calls: int) -> dict[str, float]:
    torch.manual_seed(0)
    fp32 = [(f"w{i}", torch.randn(4_000_000)) for i in range(16)]
    bf16 = [(n, t.to(torch.bfloat16)) for n, t in fp32]
    copies = {"fp32": [(n, t.clone()) for n, t in fp32], "bf16": [(n, t.clone()) for n, t in bf16]}
    elements = sum(t.numel() for _, t in fp32)
    cases = {"fp32 / fp32": lambda: check_weight_sync(fp32, copies["fp32"]),
             "bf16 / bf16": lambda: check_weight_sync(bf16, copies["bf16"]),
             "fp32 trainer / bf16 engine (cast)": lambda: check_weight_sync(fp32, copies["bf16"])}
    out = {}
    print(f"1. {elements / 1e6:.0f} M elements per side in 16 tensors, {calls} calls each, ns per element of one side "
          "(the check reads both sides: x2 per trainer element)")
    for name, (cpu, wall) in zip(cases, timed(list(cases.values()), calls), strict=True):
        out[name] = cpu / elements / 2 * 1e9
        print(f"   {name:36s} CPU {cpu * 1e3:8.1f} ms  wall {wall * 1e3:8.1f} ms  -> {out[name]:.3f} ns/element/side")
    return out


def per_tensor(calls: int) -> float:
    small = [(f"t{i}", torch.randn(64)) for i in range(1000)]
    other = [(n, t.clone()) for n, t in small]
    [(cpu, wall)] = timed([lambda: check_weight_sync(small, other)], calls)
    us = cpu / len(small) * 1e6
    print(f"2. 1,000 tensors of 64 elements: CPU {cpu * 1e3:.1f} ms, wall {wall * 1e3:.1f} ms -> {us:.1f} µs per "
          "tensor pair (both sides)")
    return us


def trainer_run(steps: int) -> tuple[float, float, int]:
    """(median check ms, median step ms, elements per check) of one reference-trainer process on CPU."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        env.pop("GRPO_DOCTOR_RUN_DIR", None)
        subprocess.run([sys.executable, "-m", "grpo_doctor_trainer.train", "--model", "tiny", "--steps", str(steps),
                        "--run-dir", tmp, "--log-every", str(steps)], cwd=REPO, env=env, check=True,
                       capture_output=True)
        lines = [json.loads(line) for line in (Path(tmp) / "ranks" / "rank-00000.jsonl").read_text().splitlines()]
    checks = [r for r in lines if r["kind"] == "weight_sync"][2:]  # after warm-up
    ends = [r["t"] for r in lines if r["kind"] == "step"]
    step_ms = statistics.median(b - a for a, b in zip(ends[2:], ends[3:], strict=False)) * 1e3
    check_ms = statistics.median(r["duration_s"] for r in checks) * 1e3
    print(f"3. reference trainer, tiny model ({checks[0]['num_tensors']} tensors, {checks[0]['num_elements']:,} "
          f"elements), {steps} steps, 1 process: check {check_ms:.2f} ms per push (median of {len(checks)}), step "
          f"{step_ms:.1f} ms -> {check_ms / step_ms:.1%} of a step")
    return check_ms, step_ms, checks[0]["num_elements"]


def projection(ns: dict[str, float], us_per_tensor: float) -> None:
    tensors, elements = llama_7b()
    print(f"4. Llama-2-7B: {tensors} tensors, {elements / 1e9:.2f} G elements")
    fixed_s = tensors * us_per_tensor / 1e6
    for name, per in ns.items():
        print(f"   CPU, {name:34s} {(2 * elements * per / 1e9 + fixed_s):7.1f} s per check (weights on this CPU)")
    for name, trainer_bytes, engine_bytes in (("bf16 / bf16", 2, 2), ("fp32 trainer / bf16 engine", 4 + 2 + 2, 2)):
        read_s = elements * (trainer_bytes + engine_bytes) / GPU_BYTES_PER_S
        print(f"   GPU projection, {name:27s} {read_s * 1e3:5.1f} ms of memory traffic at "
              f"{GPU_BYTES_PER_S / 1e12:.1f} TB/s + {fixed_s * 1e3:.0f} ms host dispatch (this CPU) "
              f"= {(read_s + fixed_s) * 1e3:.0f} ms per check")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=15)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, 1 thread; load average {os.getloadavg()[0]:.1f}")
    trainer_run(args.steps)
    stand_in_recorder()
    ns = per_element(args.calls)
    us = per_tensor(args.calls)
    projection(ns, us)


if __name__ == "__main__":
    main()
