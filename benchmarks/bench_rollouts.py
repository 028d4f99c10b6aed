"""Cost of gd.rollouts() on the rank: every statistic of a step of 64 completions x 512 tokens.

Target (issue 5): <= 5 ms per step. Each call's wall time (perf_counter_ns) and the process's
CPU time are taken, recording on and the flush thread running, beside a baseline that merely
hashes the same token ids (what any cross-rank duplicate check must at least do); the cases
take turns call by call, so the ratios survive this machine's noise. The
parts (conversion, hashes, distinct-n, edit distance) are timed alone below the total, and
seed_audit() against its 1 ms target. Then the optional cross-rank comparison: its bytes per
rank, the keys it computes, and its all_gather in a real 2-rank gloo group on this machine
beside a 1-element gather (the latency floor).

Typical use:
    python benchmarks/bench_rollouts.py [--calls 300] [--completions 64] [--tokens 512] [--group 8]
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import grpo_doctor as gd  # noqa: E402
from grpo_doctor.checks import diversity  # noqa: E402
from grpo_doctor.checks.hashing import hash_token_ids  # noqa: E402
from grpo_doctor.rank.rollouts import CROSS_RANK_SLOTS, cross_rank_keys  # noqa: E402

TARGET_MS = 5.0  # per step, for the statistics of 64 completions x 512 tokens
VOCAB = 151_936  # Qwen2's: ids well past 2^16, as in real runs


def per_call_ms(fn, calls: int) -> list[float]:
    return interleaved_ms([fn], calls)[0][0]


def interleaved_ms(fns, calls: int) -> list[tuple[list[float], list[float]]]:
    """(sorted wall ms, sorted CPU ms) per call of each function, the functions called in turn.

    Taking turns spreads the machine's load (which swings 2-3x here within a minute) over every
    case alike. CPU time is the process's (the flush thread's share included): on this shared
    2-core VM a call's wall time is often 2-3x its CPU time, spent waiting for a core.
    """
    for fn in fns:
        fn()  # warm up (imports, caches)
    walls: list[list[float]] = [[] for _ in fns]
    cpus: list[list[float]] = [[] for _ in fns]
    wall, cpu = time.perf_counter_ns, time.process_time_ns
    for _ in range(calls):
        for fn, wall_out, cpu_out in zip(fns, walls, cpus, strict=True):
            w0, c0 = wall(), cpu()
            fn()
            c1, w1 = cpu(), wall()
            wall_out.append((w1 - w0) / 1e6)
            cpu_out.append((c1 - c0) / 1e6)
    return [(sorted(w), sorted(c)) for w, c in zip(walls, cpus, strict=True)]


def make_step(num_completions: int, num_tokens: int, group: int, seed: int = 0):
    rng = random.Random(seed)
    prompts = [f"Solve problem {i // group}: what is {i // group} * 17?" for i in range(num_completions)]
    ids = [[rng.randrange(VOCAB) for _ in range(num_tokens)] for _ in range(num_completions)]
    texts = [" ".join(f"w{t % 5000}" for t in seq) for seq in ids]  # about 3,000 characters each
    rewards = [rng.choice((0.0, 0.1, 1.0, 1.1)) for _ in range(num_completions)]
    return prompts, texts, rewards, ids


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--completions", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--group", type=int, default=8, help="completions per prompt (G)")
    parser.add_argument("--no-gather", action="store_true", help="skip the 2-rank gloo measurement")
    args = parser.parse_args()
    gd.init(tempfile.mkdtemp(prefix="bench-rollouts-"))
    prompts, texts, rewards, ids = make_step(args.completions, args.tokens, args.group)
    import torch  # the trainer's form: one int64 tensor per completion

    tensors = [torch.tensor(seq) for seq in ids]
    batch = diversity.TokenBatch.from_sequences(ids)
    members = [list(range(i, min(i + args.group, args.completions))) for i in range(0, args.completions, args.group)]
    kwargs = dict(max_length=args.tokens, temperature=1.0)
    record = gd.rollouts(prompts, texts, rewards, completion_ids=ids, **kwargs)

    cases = [
        ("baseline: hash_token_ids of each list", lambda: [hash_token_ids(s) for s in ids], None),
        ("rollouts(), ids as Python lists (TRL)", lambda: gd.rollouts(prompts, texts, rewards, completion_ids=ids,
                                                                         **kwargs), TARGET_MS),
        ("rollouts(), ids as int64 tensors", lambda: gd.rollouts(prompts, texts, rewards, completion_ids=tensors,
                                                                    **kwargs), TARGET_MS),
        ("rollouts(), text only (no ids)", lambda: gd.rollouts(prompts, texts, rewards, **kwargs), TARGET_MS),
        ("  part: lists -> TokenBatch", lambda: diversity.TokenBatch.from_sequences(ids), None),
        ("  part: distinct-1 + distinct-2", lambda: (diversity.distinct_n(batch, 1), diversity.distinct_n(batch, 2)),
         None),
        ("  part: edit distance (bounded sample)", lambda: diversity.mean_edit_distance(batch, members), None),
        ("seed_audit()", lambda: gd.seed_audit("bench"), 1.0),
    ]
    print(f"{args.completions} completions x {args.tokens} tokens, groups of {args.group}, {args.calls} calls each")
    print(f"{'call':<40} {'median ms':>10} {'p90 ms':>8} {'CPU ms':>7} {'CPU / baseline':>15} "
          f"{'target ms':>10} {'CPU / target':>13}")
    baseline = None
    timings = interleaved_ms([fn for _, fn, _ in cases], args.calls)
    for (name, _, target), (walls, cpus) in zip(cases, timings, strict=True):
        median, p90, cpu = statistics.median(walls), walls[int(0.9 * len(walls))], statistics.median(cpus)
        baseline = baseline or cpu
        ratio = f"{cpu / target:.2f}" if target else "-"
        print(f"{name:<40} {median:>10.3f} {p90:>8.3f} {cpu:>7.3f} {cpu / baseline:>15.2f} "
              f"{target or '-':>10} {ratio:>13}")
    gd.shutdown()
    print(f"\ncompare_across_ranks: one all_gather of {CROSS_RANK_SLOTS} int64 per rank per call: "
          f"{8 * CROSS_RANK_SLOTS} bytes sent, world_size x {8 * CROSS_RANK_SLOTS} received "
          f"({8 * CROSS_RANK_SLOTS * 64 // 1024} KiB at 64 ranks)")
    keys_ms = statistics.median(per_call_ms(lambda: cross_rank_keys(record), args.calls))
    print(f"  keys of the {args.completions} completions (before the gather): median {keys_ms:.3f} ms")
    if not args.no_gather:
        gather_cost(args)


def gather_cost(args) -> None:
    """The all_gather alone, 2 gloo ranks: CROSS_RANK_SLOTS int64 against 1 (the latency floor)."""
    import torch.multiprocessing as mp

    store = tempfile.mktemp(prefix="bench-rollouts-store-")
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    procs = [ctx.Process(target=_gather_rank, args=(r, store, args.calls, queue)) for r in (0, 1)]
    for p in procs:
        p.start()
    results = dict(queue.get() for _ in procs)
    for p in procs:
        p.join()
    for size, median_ms in results[0].items():
        print(f"  all_gather of {size:>3} int64, 2 gloo ranks, after a barrier: median {median_ms:.3f} ms")


def _gather_rank(rank, store, calls, queue) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    medians = {}
    for size in (1, CROSS_RANK_SLOTS):
        local = torch.full((size,), rank, dtype=torch.int64)
        gathered = [torch.empty(size, dtype=torch.int64) for _ in range(2)]
        samples = []
        for _ in range(calls):
            dist.barrier()  # both ranks enter together: the figure is the gather, not one rank's lag
            t0 = time.perf_counter_ns()
            dist.all_gather(gathered, local)
            samples.append((time.perf_counter_ns() - t0) / 1e6)
        medians[size] = statistics.median(samples)
    dist.destroy_process_group()
    queue.put((rank, medians))


if __name__ == "__main__":
    main()
