"""`grpo-doctor probe` against the plain thing (issue 6):

(a) the probe's all_reduce algbw against a plain `torch.distributed.all_reduce` loop over the same
    sizes, side by side in one process group: for each size the two alternate (plain, probe,
    probe, plain, ...) `--rounds` times and each side's median counts. Target: within 10 %.
(b) a missing node / rank named within the rendezvous timeout + 5 s: `grpo-doctor probe` as node 0
    of 2 with node 1 never started, and `python -m grpo_doctor.probe` as ranks 0-1 of 3 with rank 2
    never started; the time from launch to exit (the missing one named) minus the timeout.

Typical use:
    python benchmarks/bench_probe.py [--nproc 2] [--sizes 1K,64K,1M,16M] [--rounds 5] [--rdzv-timeout 10]
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(args: argparse.Namespace) -> None:
    """One rank: both loops on the same sizes, alternating; rank 0 prints JSON rows."""
    import torch.distributed as dist

    from grpo_doctor.probe.options import parse_sizes

    dist.init_process_group("gloo")
    n = dist.get_world_size()
    rows = []
    for size in parse_sizes(args.sizes):
        plain_s, probe_s = [], []
        for round_index in range(args.rounds):
            # ABBA order: whichever runs second in a round finds the caches and sockets warm.
            sides = (plain_loop, probe_loop) if round_index % 2 == 0 else (probe_loop, plain_loop)
            for side in sides:
                (plain_s if side is plain_loop else probe_s).append(side(size, args))
        nbytes = max(n, size // 4) * 4
        rows.append({"size_bytes": nbytes, "plain_gbps": nbytes / statistics.median(plain_s) / 1e9,
                     "probe_gbps": nbytes / statistics.median(probe_s) / 1e9})
    if dist.get_rank() == 0:
        print("ROWS " + json.dumps(rows), flush=True)
    dist.destroy_process_group()


def plain_loop(size: int, args: argparse.Namespace) -> float:
    """What a user would time by hand: s per call, the slowest rank's."""
    import torch
    import torch.distributed as dist

    t = torch.ones(max(dist.get_world_size(), size // 4))
    for _ in range(args.warmup):
        dist.all_reduce(t)
    started = time.perf_counter()
    for _ in range(args.iters):
        dist.all_reduce(t)
    slowest = torch.tensor([time.perf_counter() - started], dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return slowest.item() / args.iters


def probe_loop(size: int, args: argparse.Namespace) -> float:
    import torch

    from grpo_doctor.probe.collectives import sweep_sizes

    (row,) = sweep_sizes(torch.device("cpu"), [size], iters=args.iters, warmup=args.warmup, op_timeout_s=60,
                         ops=("all_reduce",))
    return row["time_us"] / 1e6


def bench_algbw(args: argparse.Namespace) -> list[dict]:
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={args.nproc}", "--master-addr=127.0.0.1",
           f"--master-port={free_port()}", __file__, "--worker", "--sizes", args.sizes, "--rounds", str(args.rounds),
           "--iters", str(args.iters), "--warmup", str(args.warmup)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=dict(os.environ, OMP_NUM_THREADS="1"))
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("ROWS ")), None)
    if line is None:
        raise SystemExit(f"the worker failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    return json.loads(line[5:])


def bench_missing(timeout_s: float) -> dict[str, float]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as tmp:
        started = time.monotonic()
        node = subprocess.run([sys.executable, "-m", "grpo_doctor.cli.main", "probe", "--nnodes", "2", "--node-rank", "0",
                               "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
                               "--rdzv-timeout", str(timeout_s), "--run-dir", tmp], capture_output=True, text=True,
                              timeout=timeout_s + 120, env=env)
        node_s = time.monotonic() - started
        assert node.returncode == 1 and "node(s) 1 never joined" in node.stdout, node.stdout + node.stderr
        port = str(free_port())
        started = time.monotonic()
        ranks = [subprocess.Popen([sys.executable, "-m", "grpo_doctor.probe", "--rdzv-timeout", str(timeout_s),
                                   "--run-dir", tmp],
                                  env=dict(env, RANK=str(r), WORLD_SIZE="3", MASTER_ADDR="127.0.0.1", MASTER_PORT=port),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in (0, 1)]
        outs = [p.communicate(timeout=timeout_s + 120) for p in ranks]
        ranks_s = time.monotonic() - started
        assert "rank(s) 2 never joined" in outs[0][0], outs
    return {"node_s": node_s, "ranks_s": ranks_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--sizes", default="1K,64K,1M,16M")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iters", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rdzv-timeout", type=float, default=10.0)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    rows = bench_algbw(args)
    print(f"(a) all_reduce algbw, {args.nproc} gloo ranks on CPU, median of {args.rounds} alternating rounds of "
          f"{args.iters} calls; load average {os.getloadavg()[0]:.1f}")
    print("| size | plain loop GB/s | probe GB/s | probe / plain |\n| ---: | ---: | ---: | ---: |")
    for row in rows:
        print(f"| {row['size_bytes']:,} B | {row['plain_gbps']:.4f} | {row['probe_gbps']:.4f} | "
              f"{row['probe_gbps'] / row['plain_gbps']:.3f} |")
    missing = bench_missing(args.rdzv_timeout)
    print(f"(b) rendezvous timeout {args.rdzv_timeout:g} s: node 1 of 2 never started -> named and exited after "
          f"{missing['node_s']:.1f} s (+{missing['node_s'] - args.rdzv_timeout:.1f} s); rank 2 of 3 never started -> "
          f"{missing['ranks_s']:.1f} s (+{missing['ranks_s'] - args.rdzv_timeout:.1f} s); target +5 s")


if __name__ == "__main__":
    main()
