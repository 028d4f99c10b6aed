"""Raw logs against grep (issue 12): the keyword pass over a raw training log, side by side with
`grep -E -c -i` given the same keywords (`detectors.KEYWORDS`) on the same file, every command a
fresh process, so that start-up is in every figure.

Rows: grep with and without -i; the keyword pass alone (a fresh Python that imports
`grpo_doctor.logs` and counts the lines holding a keyword, as `grep -c` does: the two counts are
checked equal) with each engine (`chunk_keywords`: hyperscan, or the stdlib `re` with
GRPO_DOCTOR_KEYWORD_ENGINE=re); `scan_file` (the keyword pass and the parsers on the lines it
finds: what the report runs over a raw log); the import start-up alone; and the whole
`grpo-doctor report FILE` (with its start-up measured alone on a one-line log). Repeats run the
commands round-robin, so a drift of this shared machine's speed touches every row alike.

The log: the line mix of `bench_log_scan.make_log` (rank-prefixed metric dicts, tqdm bars, vLLM
engine stats, NCCL INFO, DeepSpeed INFO, warnings, a few real failures), except that only one
metric dict in `--metric-every` is kept (a trainer prints one per logged step, not 40 % of its
lines); `--metric-every 1` keeps make_log's own mix. `--engines` adds the candidate engines
measured in one process on the chunks in memory (CPU time), those that are installed.

Typical use:
    python benchmarks/bench_rawlog_grep.py [--size-mb 200] [--repeats 5] [--metric-every 400] [--engines]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from bisect import bisect_left
from pathlib import Path

from bench_log_scan import make_log

from grpo_doctor.logs.detectors import KEYWORDS

PYTHON = sys.executable
GRPO_DOCTOR = str(Path(PYTHON).with_name("grpo-doctor"))
# The keyword pass alone, counting hit lines as `grep -c` does.
KEYWORD_PASS = """\
import sys
from grpo_doctor.logs.chunk_keywords import KeywordHits
from grpo_doctor.logs.lines import iter_chunks
n = 0
for chunk in iter_chunks(sys.argv[1]):
    hits, pos, end = KeywordHits(chunk), 0, len(chunk)
    while (hit := hits.next_from(pos)) < end:
        n += 1
        pos = chunk.find(b"\\n", hit) + 1 or end
print(n)
"""
SCAN_FILE = "import sys\nfrom grpo_doctor.logs.signatures import scan_file\nprint(len(scan_file(sys.argv[1])))"
IMPORT_ONLY = "import grpo_doctor.logs.signatures"
ENGINES_MB = 50


def grep_pattern(keywords) -> str:
    """The keywords as one POSIX extended regular expression of literals."""
    return "|".join(re.sub(r"([][\\.()*+?{}|^$])", r"\\\1", word) for word in keywords)


def build_log(path: Path, size_bytes: int, metric_every: int) -> int:
    """Writes about `size_bytes` of log to `path`; returns its line count."""
    written = lines = metric = seed = 0
    with open(path, "w", encoding="utf-8") as f:
        while written < size_bytes:
            block = []
            for line in make_log(50_000, seed=seed):
                if "'loss'" in line:
                    metric += 1
                    if metric % metric_every:
                        continue
                block.append(line + "\n")
            text = "".join(block)
            f.write(text)
            written += len(text.encode())
            lines += len(block)
            seed += 1
    return lines


def timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, str, str]:
    """(wall s, CPU s of the child, its stdout, its stderr)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode not in (0, 1, 3):  # grep: 1 no match; report: 1 a critical finding, 3 nothing recognised
        raise SystemExit(f"{cmd[:3]} exited {done.returncode}: {done.stderr[-2000:]}")
    return wall, cpu, done.stdout.strip(), done.stderr


def engines_table(path: Path) -> None:
    """Candidate engines in one process, the chunks in memory: CPU s to find every hit line."""
    from grpo_doctor.logs import chunk_keywords
    from grpo_doctor.logs.lines import iter_chunks

    chunks, size = [], 0
    for chunk in iter_chunks(path):  # the first `ENGINES_MB` of the log: the slowest engines take seconds a pass
        chunks.append(chunk)
        size += len(chunk)
        if size >= ENGINES_MB * 1e6:
            break
    raw = [word.encode() for word in KEYWORDS]

    def hit_lines(next_hit) -> int:  # next_hit(chunk) -> (pos -> offset or -1)
        n = 0
        for chunk in chunks:
            find, pos = next_hit(chunk), 0
            while (hit := find(pos)) >= 0:
                n += 1
                pos = chunk.find(b"\n", hit) + 1 or len(chunk)
        return n

    def listed(offsets_of):  # all hits of a chunk at once, then walked like KeywordHits does
        def next_hit(chunk):
            offsets = offsets_of(chunk)
            return lambda pos: offsets[i] if (i := bisect_left(offsets, pos)) < len(offsets) else -1
        return next_hit

    def from_hits(searches=None):
        def next_hit(chunk):
            hits = chunk_keywords.KeywordHits(chunk, searches)
            return lambda pos: -1 if (h := hits.next_from(pos)) == len(chunk) else h
        return next_hit

    cases = {"re, anchored passes (stdlib engine)": lambda: hit_lines(from_hits(chunk_keywords.SEARCHES))}
    one_re = re.compile(b"|".join(map(re.escape, raw)))
    cases["re, one alternation"] = lambda: hit_lines(lambda c: lambda p: (m.start() if (m := one_re.search(c, p)) else -1))
    if chunk_keywords.HYPERSCAN is not None:
        cases["hyperscan (all hits, one pass)"] = lambda: hit_lines(from_hits())
    try:
        import re2
        alternation = re2.compile(b"|".join(map(re.escape, raw)))
        cases["google-re2, one alternation"] = lambda: hit_lines(
            lambda c: lambda p: (m.start() if (m := alternation.search(c, p)) else -1))
        keyword_set = re2.Set.SearchSet(re2.Options())
        for word in raw:
            keyword_set.Add(re.escape(word))
        keyword_set.Compile()
        # A set says which keywords a chunk holds, not where: only the chunks with a hit, counted.
        cases["google-re2 Set (which chunks hold a hit)"] = lambda: sum(1 for c in chunks if keyword_set.Match(c))
    except ImportError:
        print("(google-re2 not installed: left out)")
    try:
        import ahocorasick_rs
        automaton = ahocorasick_rs.BytesAhoCorasick(raw)
        cases["ahocorasick_rs"] = lambda: hit_lines(listed(
            lambda c: sorted(end - 1 for _, _, end in automaton.find_matches_as_indexes(c, overlapping=True))))
    except ImportError:
        print("(ahocorasick_rs not installed: left out)")
    size_mb = sum(map(len, chunks)) / 1e6
    print(f"\nengines in one process ({size_mb:.0f} MB in memory), best of 3, CPU s")
    print(f"{'engine':<44} {'lines':>7} {'CPU s':>7} {'MB/s':>7}")
    for name, fn in cases.items():
        best, n = float("inf"), 0
        for _ in range(3):
            t0 = time.process_time()
            n = fn()
            best = min(best, time.process_time() - t0)
        print(f"{name:<44} {n:>7} {best:>7.3f} {size_mb / best:>7.0f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=float, default=200.0, help="size of the log (default: 200)")
    parser.add_argument("--repeats", type=int, default=5, help="runs of each command (default: 5)")
    parser.add_argument("--metric-every", type=int, default=400,
                        help="keep one metric dict line in this many (default: 400; 1: make_log's 40 %% of lines)")
    parser.add_argument("--no-report", action="store_true", help="leave out the whole `grpo-doctor report`")
    parser.add_argument("--engines", action="store_true", help="also measure candidate engines in one process")
    args = parser.parse_args()
    grep = shutil.which("grep")
    if grep is None:
        raise SystemExit("grep is not on PATH")
    pattern = grep_pattern(KEYWORDS)
    stdlib = {**os.environ, "GRPO_DOCTOR_KEYWORD_ENGINE": "re"}
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        path, tiny = Path(tmp) / "train.log", Path(tmp) / "one-line.log"
        num_lines = build_log(path, int(args.size_mb * 1e6), args.metric_every)
        tiny.write_text("step 1 done\n", encoding="utf-8")
        size_mb = path.stat().st_size / 1e6
        report = [GRPO_DOCTOR, "report", "--json", "--out", str(Path(tmp) / "out")]
        rows = [
            ("grep -E -c -i (the issue's reference)", [grep, "-E", "-c", "-i", pattern, str(path)], None),
            ("grep -E -c", [grep, "-E", "-c", pattern, str(path)], None),
            ("keyword pass, hyperscan", [PYTHON, "-c", KEYWORD_PASS, str(path)], None),
            ("keyword pass, stdlib re", [PYTHON, "-c", KEYWORD_PASS, str(path)], stdlib),
            ("scan_file, hyperscan", [PYTHON, "-c", SCAN_FILE, str(path)], None),
            ("scan_file, stdlib re", [PYTHON, "-c", SCAN_FILE, str(path)], stdlib),
            ("start-up: import grpo_doctor.logs", [PYTHON, "-c", IMPORT_ONLY], None),
        ]
        if not args.no_report:
            rows += [("grpo-doctor report FILE", [*report, str(path)], None),
                     ("start-up: grpo-doctor report, 1-line log", [*report, str(tiny)], None)]
        walls: dict[str, list[float]] = {name: [] for name, _, _ in rows}
        cpus: dict[str, list[float]] = {name: [] for name, _, _ in rows}
        outputs: dict[str, str] = {}
        for _ in range(args.repeats):
            for name, cmd, env in rows:
                wall, cpu, out, err = timed(cmd, env)
                walls[name].append(wall)
                cpus[name].append(cpu)
                outputs[name] = out
                _check_output(name, out, err)
        counts = {outputs[name] for name in ("grep -E -c", "keyword pass, hyperscan", "keyword pass, stdlib re")}
        if len(counts) != 1:
            raise SystemExit(f"the hit-line counts differ: {counts}")
        reference = statistics.median(walls[rows[0][0]])
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu_model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "?")
        print(f"{size_mb:.1f} MB, {num_lines:,} lines, one metric dict in {args.metric_every}; "
              f"{counts.pop()} lines hold a keyword (grep -c -i: {outputs[rows[0][0]]}); "
              f"{outputs['scan_file, hyperscan']} signatures")
        print(f"{os.cpu_count()} cores, {cpu_model}; load average {os.getloadavg()[0]:.1f}; "
              f"{args.repeats} repeats round-robin; hyperscan engine: "
              f"{'yes' if 'hyperscan' in _engine_in_use() else 'NOT INSTALLED (stdlib both times)'}")
        best = min(walls[rows[0][0]])
        print(f"{'command (fresh process)':<42} {'wall s min':>10} {'median':>7} {'max':>6} {'CPU s med':>9} "
              f"{'x grep -i (min)':>15} {'(median)':>8}")
        for name, _, _ in rows:
            w = walls[name]
            print(f"{name:<42} {min(w):>10.2f} {statistics.median(w):>7.2f} {max(w):>6.2f} "
                  f"{statistics.median(cpus[name]):>9.2f} {min(w) / best:>15.1f} {statistics.median(w) / reference:>8.1f}",
                  flush=True)
        if args.engines:
            engines_table(path)


def _check_output(name: str, out: str, err: str) -> None:
    """A run that failed early would look fast: each must print what it was asked for."""
    if name.startswith("grpo-doctor report") or "1-line log" in name:
        if not out.startswith("{") or "findings" not in json.loads(out):
            raise SystemExit(f"{name}: no findings in its output; stderr: {err[-2000:]}")
    elif not name.startswith("start-up") and not out.isdigit():
        raise SystemExit(f"{name}: printed {out[:200]!r}, not a count; stderr: {err[-2000:]}")


def _engine_in_use() -> str:
    from grpo_doctor.logs.chunk_keywords import ENGINE
    return ENGINE


if __name__ == "__main__":
    main()
