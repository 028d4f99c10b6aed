"""`grpo-doctor summary RUN...`: where every rank is, or ended, read from the event log.

Works on a live run (each rank's open phase and seconds since its last record) and on a
finished one (how each rank ended, its error and the phase it was in). `--follow` keeps it up to
date on a live run: on a terminal the table is redrawn in place every `--interval` seconds;
otherwise (a pipe, a log file) a new table is printed only when it changed. It stops by itself
when the run has ended (every rank wrote its end record, or watch wrote its summary.json), when
no file of the run has grown for `--quiet-timeout` seconds (a run killed outright writes no
end), or at Ctrl-C.

Typical use:
    grpo-doctor summary grpo-doctor-runs/20261121-101502-p4711
    grpo-doctor summary node0/run node1/run --json
    grpo-doctor summary grpo-doctor-runs/20261121-101502-p4711 --follow --interval 5
"""
from __future__ import annotations

import json
import math
import shutil
import statistics
import sys
import time
from pathlib import Path

from grpo_doctor.checks.stack_groups import headline
from grpo_doctor.cli.errors import UserError
from grpo_doctor.cli.summary_live import LiveState
from grpo_doctor.logs.terminal_text import terminal_safe
from grpo_doctor.runlog.columns import as_list
from grpo_doctor.runlog.parallel_read import read_run
from grpo_doctor.runlog.rank_log import RankLog, RunLog
from grpo_doctor.runlog.rank_states import NO_END, rank_state
from grpo_doctor.schema import Record, RunPaths, Step
from grpo_doctor.schema.errors import DoctorError
from grpo_doctor.schema.run_paths import WatchPaths
from grpo_doctor.schema.watch_files import phase_words

EXIT_HELP = """\
exit status: 0 every rank ended cleanly or is still running (its watch or its process alive); 1 a
rank ended by an exception or a signal, or has no end record and is gone (killed outright); 2 not a
run directory. With --follow: the same, once
the run has ended or gone quiet; 130 at Ctrl-C."""
RUNNING = "running"  # no end record, and the job is still going (cli/summary_live.py)
INTERVAL_S = 2.0
QUIET_TIMEOUT_S = 900.0


def add_parser(sub) -> None:
    p = sub.add_parser("summary", help="per-rank state of a run: step, open phase, how it ended",
                       description=__doc__.split("\n\nTypical use")[0], epilog=EXIT_HELP)
    p.add_argument("paths", nargs="+", metavar="RUN_DIR", help="run directory (one per node if not shared)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON (with --follow: one line per change)")
    p.add_argument("--follow", action="store_true",
                   help="keep refreshing until the run ends (every rank ended, or watch wrote summary.json), goes "
                        "quiet, or Ctrl-C: redrawn in place on a terminal, else printed again when it changes")
    p.add_argument("--interval", type=float, default=INTERVAL_S, metavar="SECONDS",
                   help=f"with --follow: seconds between reads of the run (default: {INTERVAL_S:g})")
    p.add_argument("--quiet-timeout", type=float, default=QUIET_TIMEOUT_S, metavar="SECONDS",
                   help="with --follow: stop when no rank file or supervisor file grew for this long "
                        f"(default: {QUIET_TIMEOUT_S:g})")
    p.set_defaults(run=run)


def run(args) -> int:
    for name, value in (("--interval", args.interval), ("--quiet-timeout", args.quiet_timeout)):
        if not (math.isfinite(value) and value > 0):  # every wait has an end: no inf, no nan
            raise UserError(f"{name} {value:g} is not a positive number of seconds", f"e.g. {name} 5")
    if not args.follow:
        if (args.interval, args.quiet_timeout) != (INTERVAL_S, QUIET_TIMEOUT_S):
            print("grpo-doctor: --interval and --quiet-timeout take effect only with --follow", file=sys.stderr)
        return _print_once(args)
    return follow(args.paths, args.interval, args.quiet_timeout, as_json=args.json)


def _print_once(args) -> int:
    # The report's reader: columns for phases and memory, a big run's files read by window.
    log = read_run(args.paths)
    live = LiveState.of(log.dirs)
    rows = summarise(log, live=live)
    if args.json:
        print(json.dumps(_as_json(log, rows, live), indent=2))
    else:
        print(format_summary(log, rows, live))
    return 1 if any(r["failed"] for r in rows) else 0


def _as_json(log: RunLog | None, rows: list[dict], live: LiveState) -> dict:
    """The same keys with and without --follow."""
    return {"ranks": rows, "hang": _hang_json(live), "live_findings": live.findings,
            "warnings": log.warnings if log is not None else []}


def summarise(run: RunLog, now: float | None = None, live: LiveState | None = None) -> list[dict]:
    now = time.time() if now is None else now
    live = live or LiveState()
    return [_rank_row(log, now, live) for _, log in sorted(run.ranks.items())]


def _rank_row(log: RankLog, now: float, live: LiveState) -> dict:
    state = rank_state(log)
    header_t = log.header.t if log.header is not None else None
    running = state.ended is None and live.running(state.host, sorted(log.pids), header_t)
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
        "last_step": state.last_step,  # the last step it finished
        "step": state.shown_step,  # the step it is in (or stopped in); the last one if it ended cleanly
        "state": state.ended or (RUNNING if running else NO_END),
        "signal": state.signal,
        "failed": state.failed and not running,
        "culprit": live.hang is not None and state.rank in live.hang.culprits,
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


def format_summary(run: RunLog, rows: list[dict], live: LiveState | None = None) -> str:
    live = live or LiveState()
    header = f"{'rank':>4}  {'host':<16} {'steps':>5}  {'state':<23} {'open phase':<22} {'step s':>7}  {'rss MiB':>8}  error"
    lines = [f"run: {', '.join(str(d) for d in run.dirs)}  ({len(rows)} rank(s)){_run_state(rows, live)}", header]
    for r in rows:
        state = r["state"] if r["state"] != "signal" else f"signal {r['signal']}"
        state = f"{state}, culprit" if r["culprit"] else state
        lines.append(
            f"{r['rank']:>4}  {terminal_safe(r['host'] or '?')[:16]:<16} {r['steps_done']:>5}  {state[:23]:<23} "
            f"{terminal_safe(r['open_phase'] or '-')[:22]:<22} {_num(r['median_step_s']):>7}  "
            f"{_num(r['peak_host_rss_bytes'] and r['peak_host_rss_bytes'] / 2**20, 0):>8}  {r['error'] or ''}"
        )
    if live.hang is not None:
        lines.append(_hang_line(live))
    lines += [_live_finding_line(f) for f in live.findings]
    lines += [f"warning: {w}" for w in run.warnings]
    # Hosts, phases and errors come from the run: an escape sequence there stays text.
    return "\n".join(terminal_safe(line) for line in lines)


def _run_state(rows: list[dict], live: LiveState) -> str:
    """": running (watched on vm), steps 12-14, last record 3 s ago" for a live run; nothing otherwise."""
    going = [r for r in rows if r["state"] == RUNNING]
    if not going:
        return ""
    steps = sorted(r["step"] for r in going if r["step"] is not None)
    span = (f", at step {steps[0]}" if steps[0] == steps[-1] else f", at steps {steps[0]}-{steps[-1]}") if steps else ""
    idle = [r["since_last_record_s"] for r in going if r["since_last_record_s"] is not None]
    quiet = f", newest record {min(idle):.0f} s ago" if idle else ""
    where = f" (watched on {', '.join(sorted(live.watched_hosts))})" if live.watched_hosts else ""
    return f": running{where}, {len(going)} of {len(rows)} rank(s) going{span}{quiet}"


def _hang_line(live: LiveState) -> str:
    hang = live.hang
    where = []
    for rank in hang.culprits:
        info = hang.ranks.get(rank)
        at = ""
        if info is not None and (info.open_phase or info.step is not None):
            at = f" {phase_words(info)} at step {info.step}"
        host = (info.host if info is not None and info.host else None) or hang.host
        stack = hang.stacks.get(rank)
        top = f": {headline(stack.frames)}" if stack is not None and stack.frames else ""
        where.append(f"rank {rank} on {host}{at}{top}")
    who = "; ".join(where) if where else "no single rank (see the stacks)"
    return f"hang ({live.hang_file}): the others waited for {who}"


def _live_finding_line(f: dict) -> str:
    """One finding watch said while the job ran (live-findings.json), and whether a later step cleared it."""
    said = f"said by watch on {f['watch_host']}"
    if f.get("said_at_step") is not None:  # None: said from watch's samples, which have no step
        said += f" at step {f['said_at_step']}"
    if f["state"] == "cleared":
        said += f", cleared at step {f.get('cleared_at_step')}" if f.get("cleared_at_step") is not None else ", cleared"
    step = f" at step {f['step']}" if f.get("step") is not None else ""
    return f"live: {f['severity'].upper()} {f['id']}{step}: {f['title']} ({said})"


def _hang_json(live: LiveState) -> dict | None:
    if live.hang is None:
        return None
    return {"file": str(live.hang_file), "host": live.hang.host, "culprits": list(live.hang.culprits)}


def _num(value, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def follow(paths: list, interval_s: float, quiet_timeout_s: float, as_json: bool = False, out=None) -> int:
    """Reads the run every `interval_s` until it has ended or gone quiet; see the module docstring."""
    out = sys.stdout if out is None else out
    redraw = out.isatty() and not as_json
    drawn_lines, last_changed, last_size, last_growth = 0, None, -1, time.monotonic()
    try:
        while True:
            log = _read_when_there(paths)
            live = LiveState.of(log.dirs) if log is not None else LiveState()
            rows = summarise(log, live=live) if log is not None else []
            if as_json:
                block = json.dumps(_as_json(log, rows, live))
                # The seconds since each rank's last record change at every read: not a change of the run.
                changed = json.dumps([[{**r, "since_last_record_s": None} for r in rows], _hang_json(live),
                                      live.findings])
            else:
                block = format_summary(log, rows, live) if log is not None else _waiting_text(paths)
                changed = block
            size = _run_size_bytes(paths)
            now = time.monotonic()
            if size != last_size:
                last_size, last_growth = size, now
            ended = log is not None and _run_ended(log, rows)
            quiet = now - last_growth >= quiet_timeout_s
            if redraw:
                status = ("the run has ended" if ended else f"nothing new for {quiet_timeout_s:g} s: stopped"
                          if quiet else f"refreshed {time.strftime('%H:%M:%S')}, every {interval_s:g} s; Ctrl-C stops")
                drawn_lines = _draw_in_place(out, f"{block}\n{status}", drawn_lines)
            elif changed != last_changed:
                text = block if as_json else f"-- {time.strftime('%H:%M:%S')}\n{block}"
                print(text if last_changed is None or as_json else "\n" + text, file=out, flush=True)
            last_changed = changed
            if ended or quiet:
                if log is None:
                    read_run(paths)  # still no rank file: the error it gives without --follow
                if quiet and not redraw:
                    print(f"grpo-doctor: nothing new in the run for {quiet_timeout_s:g} s: stopped following",
                          file=sys.stderr)
                return 1 if any(r["failed"] for r in rows) else 0
            time.sleep(interval_s)
    except KeyboardInterrupt:
        if redraw:
            out.write("\n")
        return 130


def _read_when_there(paths: list) -> RunLog | None:
    """The run as read now; None while a directory that exists holds no rank file yet (a run that is
    starting). A path that does not exist is an error at once, as without --follow."""
    try:
        return read_run(paths)
    except DoctorError:
        if all(Path(p).is_dir() for p in paths):
            return None
        raise


def _waiting_text(paths: list) -> str:
    return f"run: {terminal_safe(', '.join(str(p) for p in paths))}: no rank file yet, waiting"


def _run_ended(log: RunLog, rows: list[dict]) -> bool:
    """Every rank wrote its end record, or watch wrote summary.json for every host it supervised."""
    if rows and all(r["state"] not in (NO_END, RUNNING) for r in rows):
        return True
    hosts = [h for d in log.dirs for h in RunPaths(d).supervisor.glob("*") if h.is_dir()]
    return bool(hosts) and all(WatchPaths(h).summary_json.exists() for h in hosts)


def _run_size_bytes(paths: list) -> int:
    """The size of the run's rank and supervisor files: it grows while anything is written."""
    total = 0
    for d in paths:
        for path in [*RunPaths(Path(d)).ranks.glob("*.jsonl"), *RunPaths(Path(d)).supervisor.glob("*/*")]:
            try:
                total += path.stat().st_size
            except OSError:
                continue  # rotated or removed between the listing and the stat
    return total


def _draw_in_place(out, block: str, drawn_lines: int) -> int:
    """Replaces the previously drawn lines with `block`: cursor up, clear to the end of the screen.
    Lines are cut at the terminal's width and the block at its height (the last line, the status,
    kept), so that nothing wraps or scrolls off and the count of lines to go back over stays true."""
    size = shutil.get_terminal_size()
    width, height = max(20, size.columns - 1), max(4, size.lines - 1)
    lines = [line[:width] for line in block.split("\n")]
    if len(lines) > height:
        lines = [*lines[:height - 2], f"... {len(lines) - height + 1} more lines (without --follow: all)", lines[-1]]
    up = f"\x1b[{drawn_lines}F" if drawn_lines else ""
    out.write(up + "\x1b[J" + "\n".join(lines) + "\n")
    out.flush()
    return len(lines)
