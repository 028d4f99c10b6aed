"""Cost of `grpo-doctor report` on a big run: 64 ranks (8 hosts x 8) x 2,000 steps, side by side
with loading alone and with merely parsing the same JSON lines.

Targets (issue 4): the full report (load, rules, findings.json, report.html with plots) in at most
20 s and 4 GB of RAM. Absolute times on the shared development machine vary by about +-25 %, so
every case runs in the same invocation and the table gives ratios to the parse floor:
  (a) `build_report([run_dir], out_dir=out)` (report/build.py), the whole `grpo-doctor report` path, with its parts;
  (a') the same with `--full-read`: every line of every rank file, as the reader did before it read
      big files by window (runlog/window.py): no finding may differ between (a) and (a');
  (b) `load_evidence([run_dir])` alone;
  (c) every rank file read line by line into dicts with the fastest parser importable (orjson
      if installed, else json); the stdlib json parse is shown beside it for reference.
Each case runs in its own child process, which reports its own peak RSS (ru_maxrss) and CPU time,
so neither the generator nor another case counts in a case's memory; CPU time is shown beside wall
time because other jobs' turns on the shared cores inflate the wall time. The load reads rank files
in worker processes: their CPU time is counted in the case's, and the largest worker's peak RSS is
shown beside the case's own (as many workers as CPUs run at once). The load average is printed
before and after the cases.

The synthetic run is what the reference trainer writes with vLLM rollouts (weight-sync, rollout,
reward, ref-logprob, forward, backward, optimizer-step, then a GPU memory snapshot and a step
with 12 metrics: 16 records a step), encoded with the rank sink's encoder. Hosts share one clock
(offsets of a few ms) and rank 37 is a straggler in rollout, so the rules have work. It is written
once into a cache directory under the temp dir (about 480 MB at the default size) and reused.

Typical use:
    python benchmarks/bench_report.py [--ranks 64] [--steps 2000] [--repeat 1]
    git archive REV grpo_doctor | tar -x -C /tmp/base      # an older version, side by side:
    python benchmarks/bench_report.py --baseline /tmp/base
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

from grpo_doctor.schema import End, Header, Memory, PhaseBegin, PhaseEnd, RunPaths, Step

RANKS_PER_HOST = 8
STRAGGLER_RANK = 37
START_T = 1_795_000_000.0
GIB = 2**30
# (phase, median seconds): a 7B policy with vLLM rollouts on one node's share of the batch.
PHASES = [("weight-sync", 0.8), ("rollout", 6.0), ("reward", 0.3), ("ref-logprob", 0.9), ("forward", 1.2),
          ("backward", 2.4), ("optimizer-step", 0.35)]
GENERATOR_VERSION = 2  # bump when the records change, so an old cache is not reused


# ---------------------------------------------------------------------------------------------
# The synthetic run


def run_dir_for(num_ranks: int, num_steps: int, copied: bool = False) -> Path:
    name = f"grpo-doctor-bench-report-v{GENERATOR_VERSION}-{num_ranks}x{num_steps}" + ("-copied" if copied else "")
    return Path(tempfile.gettempdir()) / name


def ensure_run(num_ranks: int, num_steps: int, copied: bool = False) -> Path:
    """The cached run directory, generated first if it is missing or was left half-written."""
    run_dir = run_dir_for(num_ranks, num_steps, copied)
    done = run_dir / ".complete"
    if done.exists():
        return run_dir
    shutil.rmtree(run_dir, ignore_errors=True)
    t0 = time.perf_counter()
    (write_copied_run if copied else write_run)(run_dir, num_ranks, num_steps)
    done.write_text("")
    print(f"generated {run_dir} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return run_dir


def write_run(run_dir: Path, num_ranks: int, num_steps: int) -> None:
    paths = RunPaths(run_dir)
    paths.ranks.mkdir(parents=True)
    paths.run_json.write_text(json.dumps({"command": ["python", "train.py"], "start_t": START_T}))
    # The sink's encoder, so lines are byte for byte what a rank writes.
    encode = json.JSONEncoder(separators=(",", ":"), default=str).encode
    rng = random.Random(0)
    # Steps are synchronised by collectives, so rank timings are drawn step by step for all ranks.
    files = [open(paths.rank_file(rank), "w", encoding="utf-8") for rank in range(num_ranks)]  # noqa: SIM115
    try:
        clocks = [START_T + rng.uniform(0.0, 0.003) for _ in range(num_ranks)]  # same clock, ms apart
        for rank, f in enumerate(files):
            f.write(encode(_header(rank, num_ranks, clocks[rank]).to_dict()) + "\n")
        for step in range(num_steps):
            own = [_draw_durations(rng, rank) for rank in range(num_ranks)]
            # Reward waits in an all-gather for the slowest rollout, backward in the gradient all-reduce.
            rollout_ends = [clocks[rank] + d["weight-sync"] + d["rollout"] for rank, d in enumerate(own)]
            wait_reward = max(rollout_ends)
            wait_backward = wait_reward + max(sum(d[p] for p in ("reward", "ref-logprob", "forward", "backward"))
                                              for d in own)
            for rank, f in enumerate(files):
                lines, clocks[rank] = _encode_step(encode, rng, own[rank], rank, step, clocks[rank], wait_reward,
                                                   wait_backward)
                f.write(lines)
        for rank, f in enumerate(files):
            end = End(**_common(rank, num_steps, clocks[rank] + 0.5), reason="exit")
            f.write(encode(end.to_dict()) + "\n")
    finally:
        for f in files:
            f.close()


def write_copied_run(run_dir: Path, num_ranks: int, num_steps: int) -> None:
    """The same records, fast enough for tens of GB: rank 0's file is drawn once, and every other rank's
    is that file with its own header and its rank, host and pid put in. No rank is a straggler (all
    have rank 0's timings): for the reader's cost at sizes the drawing generator cannot reach."""
    template = run_dir.parent / (run_dir.name + ".template")
    shutil.rmtree(template, ignore_errors=True)
    write_run(template, 1, num_steps)
    body = RunPaths(template).rank_file(0).read_bytes().split(b"\n", 1)[1]
    paths = RunPaths(run_dir)
    paths.ranks.mkdir(parents=True)
    paths.run_json.write_text(json.dumps({"command": ["python", "train.py"], "start_t": START_T}))
    encode = json.JSONEncoder(separators=(",", ":"), default=str).encode
    own = (b'"rank":0,"host":"node-0","pid":40000,', b'"world_size":1')
    for rank in range(num_ranks):
        ids = f'"rank":{rank},"host":"node-{rank // RANKS_PER_HOST}","pid":{40_000 + rank},'.encode()
        with open(paths.rank_file(rank), "wb") as f:
            f.write(encode(_header(rank, num_ranks, START_T).to_dict()).encode() + b"\n")
            f.write(body.replace(own[0], ids))
    shutil.rmtree(template, ignore_errors=True)


def _common(rank: int, step: int | None, t: float) -> dict:
    return dict(rank=rank, host=f"node-{rank // RANKS_PER_HOST}", pid=40_000 + rank, step=step, t=t,
                mono=t - START_T + 86_400.0)


def _header(rank: int, world_size: int, t: float) -> Header:
    local = rank % RANKS_PER_HOST
    launch = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "GROUP_RANK": str(rank // RANKS_PER_HOST), "LOCAL_RANK": str(local),
              "LOCAL_WORLD_SIZE": str(RANKS_PER_HOST), "MASTER_ADDR": "node-0", "MASTER_PORT": "29500",
              "NCCL_DEBUG": "WARN", "NCCL_IB_HCA": "mlx5", "NCCL_SOCKET_IFNAME": "eth0", "NNODES": "8",
              "NODE_RANK": str(rank // RANKS_PER_HOST), "NPROC_PER_NODE": "8", "OMP_NUM_THREADS": "8",
              "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "RANK": str(rank),
              "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_RUN_ID": "grpo-7b",
              "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "WORLD_SIZE": str(world_size)}
    versions = {"python": "3.11.7", "torch": "2.5.1+cu124", "deepspeed": "0.15.4", "vllm": "0.7.3",
                "transformers": "4.48.3", "trl": "0.15.2", "accelerate": "1.3.0", "ms_swift": None,
                "grpo_doctor": "0.1.0", "cuda": "12.4", "nccl": "2.21.5", "cuda_driver": "550.90.07"}
    return Header(**_common(rank, 0, t), local_rank=local, world_size=world_size, node_rank=rank // RANKS_PER_HOST,
                  local_world_size=RANKS_PER_HOST, gpu_uuid=f"GPU-{rank:08x}-5c1e-4f0a-9d2b-0123456789ab",
                  versions=versions, launch=launch, argv=["train.py", "--config", "grpo_7b.yaml"])


def _draw_durations(rng: random.Random, rank: int) -> dict[str, float]:
    """One rank's own phase durations for one step, before the collectives line the ranks up."""
    durations = {}
    for phase, median_s in PHASES:
        d = median_s * rng.lognormvariate(0.0, 0.08)
        if phase == "rollout" and rank == STRAGGLER_RANK:
            d *= 1.7
        durations[phase] = d
    return durations


def _encode_step(encode, rng: random.Random, durations: dict[str, float], rank: int, step: int, t0: float,
                 wait_reward: float, wait_backward: float) -> tuple[str, float]:
    """One rank's 16 lines of one step, and the time its next step starts."""
    out, t = [], t0
    for phase, _ in PHASES:
        d = durations[phase]
        if phase == "reward":
            d += max(wait_reward - t, 0.0)  # waits in the all-gather for the slowest rollout
        if phase == "backward":
            d = max(d, wait_backward - t)
        begin = PhaseBegin(**_common(rank, step, t), phase=phase, path=phase)
        t += d
        end = PhaseEnd(**_common(rank, step, t), phase=phase, path=phase, duration_s=d, synced=False)
        out.append(encode(begin.to_dict()))
        out.append(encode(end.to_dict()))
    t += 0.0005
    memory = Memory(**_common(rank, step, t), tag="step", host_rss_bytes=int(31.5 * GIB), device=rank % RANKS_PER_HOST,
                    allocated_bytes=int((38 + 4 * rng.random()) * GIB), reserved_bytes=int(61 * GIB),
                    peak_allocated_bytes=int(71.2 * GIB), inactive_split_bytes=int(1.3 * GIB), num_alloc_retries=0,
                    num_ooms=0, free_bytes=int(6.4 * GIB), total_bytes=int(79.6 * GIB),
                    gpu_processes=[{"pid": 40_000 + rank, "used_bytes": int(66 * GIB)},  # the trainer, and vLLM
                                   {"pid": 50_000 + rank, "used_bytes": int(6.8 * GIB)}])
    out.append(encode(memory.to_dict()))
    t += 0.0001
    metrics = {"loss": rng.gauss(0.02, 0.01), "reward": rng.random(), "reward_std": 0.2 + 0.1 * rng.random(),
               "frac_reward_zero_std": rng.random() * 0.3, "frac_identical_groups": 0.0,
               "grad_norm": rng.lognormvariate(0.0, 0.3), "lr": 1e-6, "completion_length": 400 + 300 * rng.random(),
               "num_tokens": rng.randrange(200_000, 300_000), "kl": 0.001 * step / 100 + 0.001 * rng.random(),
               "entropy": 0.6 + 0.1 * rng.random(), "clip_ratio": 0.01 * rng.random()}
    out.append(encode(Step(**_common(rank, step, t), metrics=metrics).to_dict()))
    return "\n".join(out) + "\n", t + 0.001


# ---------------------------------------------------------------------------------------------
# The cases, each run in a child process (`--child CASE`)


def child_report(run_dir: Path, out_dir: Path, full_read: bool = False) -> dict:
    """build_report as `grpo-doctor report` runs it, with its parts timed by wrapping module functions."""
    import grpo_doctor.analysis.load as load_mod
    import grpo_doctor.analysis.rules as rules_mod
    import grpo_doctor.report.plots as plots_mod
    import grpo_doctor.report.render as render_mod
    try:
        from grpo_doctor.report.build import build_report
    except ImportError:  # a baseline checkout from before the pipeline moved out of the command
        from grpo_doctor.cli.report import write_report

        def build_report(paths, out_dir):
            result, html_path, findings_path = write_report(paths, out_dir / "report.html")
            return SimpleNamespace(findings=result, html_path=html_path, findings_path=findings_path)

    parts: dict[str, float] = {}

    def timed(module, name, key):
        original = getattr(module, name)

        def wrapper(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                parts[key] = parts.get(key, 0.0) + time.perf_counter() - t0
        setattr(module, name, wrapper)

    # build_report imports these by name when called, so the wrapped module attributes are what it gets.
    timed(load_mod, "load_evidence", "load")
    timed(rules_mod, "run_rules", "rules")
    timed(render_mod, "render_report", "render")
    for name in ("phase_timeline", "memory_over_time", "step_metrics"):
        timed(plots_mod, name, "plots")
    t0 = time.perf_counter()
    built = build_report([run_dir], out_dir=out_dir, full_read=True) if full_read else build_report([run_dir], out_dir=out_dir)
    result, html_path = built.findings, built.html_path
    total = time.perf_counter() - t0
    return {"seconds": total, "parts": parts, "findings": [f.id for f in result.findings],
            "warnings": len(result.warnings), "html_bytes": html_path.stat().st_size}


def child_load(run_dir: Path) -> dict:
    from grpo_doctor.analysis.load import load_evidence

    t0 = time.perf_counter()
    ev = load_evidence([run_dir])
    return {"seconds": time.perf_counter() - t0, "rows": len(ev.phases) + len(ev.steps) + len(ev.memory)}


def child_parse(run_dir: Path, parser: str) -> dict:
    loads = __import__(parser).loads
    t0 = time.perf_counter()
    num = 0
    for path in sorted(RunPaths(run_dir).ranks.glob("rank-*.jsonl")):
        with open(path, "rb") as f:
            records = [loads(line) for line in f]
        num += len(records)
    return {"seconds": time.perf_counter() - t0, "records": num}


def run_child(case: str, run_dir: Path, out_dir: Path, code: Path | None = None) -> dict:
    """One case in a fresh interpreter; with `code`, grpo_doctor is imported from that checkout instead."""
    env = dict(os.environ, PYTHONPATH=str(code)) if code else None  # PYTHONPATH wins over the editable install
    proc = subprocess.run([sys.executable, __file__, "--child", case, "--run-dir", str(run_dir),
                           "--out-dir", str(out_dir)], capture_output=True, text=True, check=False, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"case {case} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def child_main(case: str, run_dir: Path, out_dir: Path) -> None:
    import resource

    if case in ("report", "report-full"):
        result = child_report(run_dir, out_dir, full_read=case == "report-full")
    elif case == "load":
        result = child_load(run_dir)
    else:
        result = child_parse(run_dir, case.removeprefix("parse-"))
    result["code"] = str(Path(sys.modules["grpo_doctor"].__file__).parent) if "grpo_doctor" in sys.modules else None
    usage, workers = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    result["peak_rss_bytes"] = usage.ru_maxrss * 1024  # Linux reports KiB
    result["worker_peak_rss_bytes"] = workers.ru_maxrss * 1024  # the largest of the load's worker processes
    # The child's whole CPU time, imports and worker processes included: on a busy shared machine
    # wall time also counts waiting.
    result["cpu_seconds"] = usage.ru_utime + usage.ru_stime + workers.ru_utime + workers.ru_stime
    print(json.dumps(result))


# ---------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=1, help="rounds of all cases; the best time of each is shown")
    parser.add_argument("--baseline", type=Path, metavar="DIR",
                        help="another checkout's root (e.g. `git archive REV grpo_doctor | tar -x -C DIR`): "
                             "(a) and (b) are also run with its grpo_doctor, side by side")
    parser.add_argument("--no-full-read", action="store_true",
                        help="leave out (a'), the report reading every line (too slow past a few GB)")
    parser.add_argument("--copy-ranks", action="store_true",
                        help="generate rank 0's file once and copy it for every rank (fast; no straggler)")
    parser.add_argument("--no-parse", action="store_true", help="leave out (c), the orjson parse of every line")
    parser.add_argument("--no-json", action="store_true", help="leave out the stdlib json parse (reference only)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--run-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_main(args.child, args.run_dir, args.out_dir)
        return

    run_dir = ensure_run(args.ranks, args.steps, copied=args.copy_ranks)
    files = sorted(RunPaths(run_dir).ranks.glob("rank-*.jsonl"))
    size_mb = sum(p.stat().st_size for p in files) / 1e6
    try:
        import orjson  # noqa: F401
        fast = "orjson"
    except ImportError:
        fast = "json"
    # (key, label, case, checkout to import grpo_doctor from: None for this one)
    cases = [("report", "(a) build_report (grpo-doctor report)", "report", None),
             *([] if args.no_full_read else [("report-full", "(a') the same, --full-read (every line)", "report-full", None)]),
             ("load", "(b) load_evidence", "load", None),
             *([] if args.no_parse else [("parse", f"(c) parse lines into dicts ({fast})", f"parse-{fast}", None)])]
    if fast != "json" and not args.no_json:
        cases.append(("parse-json", "    parse lines into dicts (json)", "parse-json", None))
    if args.baseline:
        cases += [("report-base", "(a) build_report, baseline", "report", args.baseline),
                  ("load-base", "(b) load_evidence, baseline", "load", args.baseline)]
    best: dict[str, dict] = {}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as out:
        for _ in range(args.repeat):
            # Interleaved rounds: a slow spell on the shared machine hits every case alike.
            for key, _label, case, code in cases:
                result = run_child(case, run_dir, Path(out), code)
                print(f"{key}: {result['seconds']:.1f} s wall, {result['cpu_seconds']:.1f} s CPU, "
                      f"{result['peak_rss_bytes'] / 1e9:.2f} GB", file=sys.stderr, flush=True)
                if key not in best or result["seconds"] < best[key]["seconds"]:
                    best[key] = result
    # Without (c), ratios are to nothing: shown as nan.
    floor, floor_cpu = (best["parse"]["seconds"], best["parse"]["cpu_seconds"]) if "parse" in best else (
        float("nan"), float("nan"))
    report = best["report"]
    records = f"{best['parse']['records']:,} records" if "parse" in best else "records not counted"
    print(f"{args.ranks} ranks x {args.steps} steps: {len(files)} files, {size_mb:.0f} MB, "
          f"{records}; {os.cpu_count()} CPUs; best of {args.repeat}; load average "
          f"{' / '.join(f'{x:.1f}' for x in load_before)} before, {' / '.join(f'{x:.1f}' for x in os.getloadavg())} after")
    print(f"findings: {', '.join(report['findings']) or 'none'}; report.html {report['html_bytes'] / 1e6:.1f} MB")
    if "report-full" in best:
        same = best["report-full"]["findings"] == report["findings"]
        print(f"findings with --full-read: {', '.join(best['report-full']['findings']) or 'none'} "
              f"({'the same' if same else 'DIFFERENT'})")
    # CPU s is the child's whole CPU time (interpreter and imports included); wall s is the case itself.
    print(f"{'case':<42} {'wall s':>7} {'CPU s':>7} {'peak RSS GB':>12} {'worker GB':>10} {'x parse (wall)':>15} "
          f"{'x parse (CPU)':>14}")
    for key, label, _case, _code in cases:
        r = best[key]
        print(f"{label:<42} {r['seconds']:>7.2f} {r['cpu_seconds']:>7.2f} {r['peak_rss_bytes'] / 1e9:>12.2f} "
              f"{r['worker_peak_rss_bytes'] / 1e9:>10.2f} {r['seconds'] / floor:>15.1f} {r['cpu_seconds'] / floor_cpu:>14.1f}")
        for part, seconds in r.get("parts", {}).items():
            part_label = f"      {part}" + (" (within render)" if part == "plots" else "")
            print(f"{part_label:<42} {seconds:>7.2f} {'':>7} {'':>12} {'':>10} {seconds / floor:>15.1f}")
    if args.baseline:
        print(f"baseline: grpo_doctor from {best['report-base']['code']}; this checkout's from {report['code']}")
    print(f"targets: report <= 20 s ({report['seconds']:.1f} s wall, {report['cpu_seconds']:.1f} s CPU), "
          f"<= 4 GB ({report['peak_rss_bytes'] / 1e9:.2f} GB)")


if __name__ == "__main__":
    main()
