"""`grpo-doctor summary RUN...`: where every rank is, or ended, read from the event log.

Works on a live run (each rank's open phase and seconds since its last record) and on a
finished one (how each rank ended, its error and the phase it was in).

Typical use:
    grpo-doctor summary grpo-doctor-runs/20261121-101502-p4711
    grpo-doctor summary node0/run node1/run --json
"""
from __future__ import annotations

import json
import statistics
import time

from grpo_doctor.cli.errors import UserError
from grpo_doctor.logs.terminal_text import terminal_safe
from grpo_doctor.runlog.eventlog import RankLog, RunDirError, RunLog, load_run
from grpo_doctor.schema import Memory, PhaseEnd, Record, Step


def add_parser(sub) -> None:
    p = sub.add_parser("summary", help="per-rank state of a run: step, open phase, how it ended")
    p.add_argument("paths", nargs="+", metavar="RUN_DIR", help="run directory (one per node if not shared)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.set_defaults(run=run)


def run(args) -> int:
    try:
        log = load_run(args.paths)
    except RunDirError as exc:
        raise UserError(str(exc), exc.hint) from None
    rows = summarise(log)
    if args.json:
        print(json.dumps({"ranks": rows, "warnings": log.warnings}, indent=2))
    else:
        print(format_summary(log, rows))
    failed = any(r["state"] in ("exception", "signal", "no end record") for r in rows)
    return 1 if failed else 0


def summarise(run: RunLog, now: float | None = None) -> list[dict]:
    now = time.time() if now is None else now
    return [_rank_row(log, now) for _, log in sorted(run.ranks.items())]


def _rank_row(log: RankLog, now: float) -> dict:
    header, end = log.header, log.end
    steps = log.of_kind(Step)
    records = [r for r in log.records if isinstance(r, Record)]
    step_times = [b.t - a.t for a, b in zip(steps, steps[1:], strict=False)]
    rss = [m.host_rss_bytes for m in log.of_kind(Memory) if m.host_rss_bytes]
    gpu = [m.peak_allocated_bytes for m in log.of_kind(Memory) if m.peak_allocated_bytes]
    errors = log.errors
    slowest = max(log.of_kind(PhaseEnd), key=lambda p: p.duration_s, default=None)
    state = str(end.reason) if end is not None else "no end record"
    return {
        "rank": log.rank,
        "host": header.host if header else None,
        "pids": sorted(log.pids),
        "steps_done": len(steps),
        "last_step": log.last_step,
        "state": state,
        "signal": end.signal if end else None,
        "open_phase": (end.open_path if end else log.open_path),
        "since_last_record_s": round(now - records[-1].t, 1) if records else None,
        "median_step_s": round(statistics.median(step_times), 3) if step_times else None,
        "slowest_phase": slowest.path if slowest else None,
        "slowest_phase_s": round(slowest.duration_s, 3) if slowest else None,
        "peak_host_rss_bytes": max(rss) if rss else None,
        "peak_gpu_allocated_bytes": max(gpu) if gpu else None,
        "error": f"{errors[-1].exc_type} in {errors[-1].path or 'no phase'}" if errors else None,
        "bad_lines": log.num_bad_lines,
    }


def format_summary(run: RunLog, rows: list[dict]) -> str:
    header = f"{'rank':>4}  {'host':<16} {'steps':>5}  {'state':<14} {'open phase':<22} {'step s':>7}  {'rss MiB':>8}  error"
    lines = [f"run: {', '.join(str(d) for d in run.dirs)}  ({len(rows)} rank(s))", header]
    for r in rows:
        state = r["state"] if r["state"] != "signal" else f"signal {r['signal']}"
        lines.append(
            f"{r['rank']:>4}  {terminal_safe(r['host'] or '?')[:16]:<16} {r['steps_done']:>5}  {state[:14]:<14} "
            f"{terminal_safe(r['open_phase'] or '-')[:22]:<22} {_num(r['median_step_s']):>7}  "
            f"{_num(r['peak_host_rss_bytes'] and r['peak_host_rss_bytes'] / 2**20, 0):>8}  {r['error'] or ''}"
        )
    lines += [f"warning: {w}" for w in run.warnings]
    # Hosts, phases and errors come from the run: an escape sequence there stays text.
    return "\n".join(terminal_safe(line) for line in lines)


def _num(value, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"
