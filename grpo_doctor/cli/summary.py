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

from grpo_doctor.logs.terminal_text import terminal_safe
from grpo_doctor.runlog.columns import as_list
from grpo_doctor.runlog.parallel_read import read_run
from grpo_doctor.runlog.rank_log import RankLog, RunLog
from grpo_doctor.runlog.rank_states import NO_END, rank_state
from grpo_doctor.schema import Record, Step

EXIT_HELP = """\
exit status: 0 every rank ended cleanly; 1 a rank ended by an exception or a signal, or has no end
record (still running, or killed outright); 2 not a run directory."""


def add_parser(sub) -> None:
    p = sub.add_parser("summary", help="per-rank state of a run: step, open phase, how it ended",
                       description=__doc__.split("\n\nTypical use")[0], epilog=EXIT_HELP)
    p.add_argument("paths", nargs="+", metavar="RUN_DIR", help="run directory (one per node if not shared)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.set_defaults(run=run)


def run(args) -> int:
    # The report's reader: columns for phases and memory, a big run's files read by window.
    log = read_run(args.paths)
    rows = summarise(log)
    if args.json:
        print(json.dumps({"ranks": rows, "warnings": log.warnings}, indent=2))
    else:
        print(format_summary(log, rows))
    return 1 if any(r["failed"] for r in rows) else 0


def summarise(run: RunLog, now: float | None = None) -> list[dict]:
    now = time.time() if now is None else now
    return [_rank_row(log, now) for _, log in sorted(run.ranks.items())]


def _rank_row(log: RankLog, now: float) -> dict:
    state = rank_state(log)
    steps = [r for r in log.records if type(r) is Step]
    # Consecutive steps only: a file read by window has gaps between its regions.
    step_times = [b.t - a.t for a, b in zip(steps, steps[1:], strict=False) if b.step == a.step + 1]
    slowest = _slowest_phase(log)
    last = log.last_record
    return {
        "rank": state.rank,
        "host": state.host,
        "pids": sorted(log.pids),
        "steps_done": _steps_done(log, steps),
        "last_step": state.last_step,
        "state": state.ended or NO_END,
        "signal": state.signal,
        "failed": state.failed,
        "open_phase": state.open_phase,
        "since_last_record_s": round(now - last.t, 1) if isinstance(last, Record) else None,
        "median_step_s": round(statistics.median(step_times), 3) if step_times else None,
        "slowest_phase": slowest[0] if slowest else None,
        "slowest_phase_s": round(slowest[1], 3) if slowest else None,
        "peak_host_rss_bytes": _column_max(log, "host_rss_bytes"),
        "peak_gpu_allocated_bytes": _column_max(log, "peak_allocated_bytes"),
        "error": state.error,
        "bad_lines": log.num_bad_lines,
    }


def _steps_done(log: RankLog, steps: list[Step]) -> int:
    """Step records written; of a file read by window, the span from its first to its last."""
    if log.sampled and steps:
        return steps[-1].step - steps[0].step + 1
    return len(steps)


def _slowest_phase(log: RankLog) -> tuple[str, float] | None:
    phases = log.tables.phases
    ended = [(d, p) for d, p in zip(as_list(phases["duration_s"]), as_list(phases["path"]), strict=True) if d is not None]
    if not ended:
        return None
    duration_s, path = max(ended, key=lambda pair: pair[0])
    return path, duration_s


def _column_max(log: RankLog, name: str) -> int | None:
    values = [v for v in as_list(log.tables.memory[name]) if v]
    return max(values) if values else None


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
