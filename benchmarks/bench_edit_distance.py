"""Edit distance of a step's completions: today's numpy (bit-parallel) against rapidfuzz, side by side.

The statistic is `diversity.mean_edit_distance`: the mean normalised Levenshtein distance over a
bounded sample of pairs within each group (32 pairs per step, each sequence's first 64 tokens).
`engine="rapidfuzz"` computes the same pairs from the same prefixes (token ids as Python ints),
so both must give the same number; the script checks that first. Inputs are one step of
64 completions x 512 tokens (Qwen2's vocabulary) in groups of 8, in two forms a GRPO run shows:
sampled text (every pair far apart) and a collapsed policy (each group near-copies of one
completion, 5 % of tokens edited). Then the same for text (whitespace tokens, `from_words`),
and rapidfuzz on what the 64-token cap keeps numpy from doing: all 512 tokens, and raw characters.
Cases take turns call by call, so this shared machine's load swings hit every case alike;
CPU time is the process's. rapidfuzz's one-time import is timed in a fresh interpreter.

Typical use:
    python benchmarks/bench_edit_distance.py [--calls 400]
"""
from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import subprocess
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

from rapidfuzz.distance import Levenshtein  # noqa: E402

from grpo_doctor.checks import diversity  # noqa: E402

VOCAB = 151_936  # Qwen2's: ids well past 2^16, as in real runs


def sampled_step(rng: random.Random, num: int, tokens: int) -> list[list[int]]:
    return [[rng.randrange(VOCAB) for _ in range(tokens)] for _ in range(num)]


def collapsed_step(rng: random.Random, num: int, tokens: int, group: int, rate: float = 0.05) -> list[list[int]]:
    """Each group: near-copies of one completion, `rate` of its tokens substituted, deleted or doubled."""
    def edited(seq: list[int]) -> list[int]:
        out = []
        for tok in seq:
            r = rng.random()
            if r < rate / 3:
                continue
            out.append(rng.randrange(VOCAB) if r < 2 * rate / 3 else tok)
            if 2 * rate / 3 <= r < rate:
                out.append(rng.randrange(VOCAB))
        return out[:tokens]

    bases = sampled_step(rng, num // group, tokens)
    return [edited(bases[i // group]) for i in range(num)]


def rapidfuzz_all_tokens(batch: diversity.TokenBatch, groups: list[list[int]]) -> float | None:
    """The same statistic on whole sequences, which only rapidfuzz can compute (numpy stops at 64)."""
    pairs = diversity.step_pairs(groups)
    rows = {i: batch.row(i).tolist() for i in {i for pair in pairs for i in pair}}
    return math.fsum(Levenshtein.normalized_distance(rows[a], rows[b]) for a, b in pairs) / len(pairs)


def rapidfuzz_chars(texts: list[str], groups: list[list[int]], max_chars: int) -> float:
    """A different measure, for its cost only: characters instead of tokens."""
    pairs = diversity.step_pairs(groups)
    return math.fsum(Levenshtein.normalized_distance(texts[a][:max_chars], texts[b][:max_chars])
                     for a, b in pairs) / len(pairs)


def interleaved(fns, calls: int) -> list[tuple[float, float]]:
    """(median wall ms, median CPU ms) of each function, the functions called in turn."""
    for fn in fns:
        fn()
    walls: list[list[float]] = [[] for _ in fns]
    cpus: list[list[float]] = [[] for _ in fns]
    for _ in range(calls):
        for fn, wall, cpu in zip(fns, walls, cpus, strict=True):
            w0, c0 = time.perf_counter_ns(), time.process_time_ns()
            fn()
            c1, w1 = time.process_time_ns(), time.perf_counter_ns()
            wall.append((w1 - w0) / 1e6)
            cpu.append((c1 - c0) / 1e6)
    return [(statistics.median(w), statistics.median(c)) for w, c in zip(walls, cpus, strict=True)]


def import_ms(module: str, runs: int = 7) -> float:
    """Median wall time of `import module` in a fresh interpreter, less the interpreter's own start."""
    def once(code: str) -> float:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        return time.perf_counter() - t0

    bare = statistics.median(once("pass") for _ in range(runs))
    return 1e3 * (statistics.median(once(f"import {module}") for _ in range(runs)) - bare)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--completions", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--group", type=int, default=8, help="completions per prompt (G)")
    args = parser.parse_args()
    rng = random.Random(0)
    groups = [list(range(i, min(i + args.group, args.completions))) for i in range(0, args.completions, args.group)]
    full = args.tokens
    steps = {"sampled": sampled_step(rng, args.completions, args.tokens),
             "collapsed": collapsed_step(rng, args.completions, args.tokens, args.group)}
    cases = []
    for name, ids in steps.items():
        batch = diversity.TokenBatch.from_sequences(ids)
        texts = [" ".join(f"w{t % 5000}" for t in seq) for seq in ids]  # about 3,000 characters each
        words = diversity.TokenBatch.from_words(texts)
        values = {(engine, kind): diversity.mean_edit_distance(b, groups, engine=engine)
                  for engine in ("numpy", "rapidfuzz") for kind, b in (("ids", batch), ("words", words))}
        same = values["numpy", "ids"] == values["rapidfuzz", "ids"] and values["numpy", "words"] == values["rapidfuzz", "words"]
        print(f"{name}: mean edit distance {values['numpy', 'ids']:.4f} (ids), {values['numpy', 'words']:.4f} "
              f"(words); numpy and rapidfuzz give the same numbers: {'yes' if same else 'NO'}")
        for engine in ("numpy", "rapidfuzz"):
            cases.append((name, "ids, first 64 tokens", engine,
                          lambda b=batch, e=engine: diversity.mean_edit_distance(b, groups, engine=e)))
        for engine in ("numpy", "rapidfuzz"):
            cases.append((name, "text: from_words + distance", engine, lambda t=texts, e=engine: diversity.mean_edit_distance(
                diversity.TokenBatch.from_words(t), groups, engine=e)))
        cases += [
            (name, f"ids, all {full} tokens", "rapidfuzz", lambda b=batch: rapidfuzz_all_tokens(b, groups)),
            (name, "text, first 512 characters", "rapidfuzz", lambda t=texts: rapidfuzz_chars(t, groups, 512)),
        ]
    print(f"\n{args.completions} completions x {args.tokens} tokens, groups of {args.group}, "
          f"{len(diversity.step_pairs(groups))} pairs per step, {args.calls} calls each, taking turns")
    print(f"{'completions':<10} {'input':<30} {'engine':<10} {'median ms':>10} {'CPU ms':>7} {'CPU / numpy':>12}")
    timings = interleaved([fn for *_, fn in cases], args.calls)
    numpy_cpu = {}
    for (name, what, engine, _), (wall, cpu) in zip(cases, timings, strict=True):
        base = numpy_cpu.setdefault((name, what), cpu) if engine == "numpy" else numpy_cpu.get((name, what))
        ratio = f"{cpu / base:.2f}" if base else "-"
        print(f"{name:<10} {what:<30} {engine:<10} {wall:>10.3f} {cpu:>7.3f} {ratio:>12}")
    print(f"\none-time import in a fresh interpreter: rapidfuzz.distance.Levenshtein "
          f"{import_ms('rapidfuzz.distance.Levenshtein'):.0f} ms, numpy {import_ms('numpy'):.0f} ms")


if __name__ == "__main__":
    main()
