"""`grpo-doctor watch [options] -- CMD...`: supervise a training run, catch hangs and crashes live.

Typical use:
    grpo-doctor watch -- torchrun --nproc-per-node 8 train.py --config grpo.yaml
    grpo-doctor watch --hang-timeout 120 --on-hang kill -- accelerate launch train.py
"""
from __future__ import annotations

import argparse
import dataclasses
import errno
import math
import os
import signal
import sys
import time
from pathlib import Path

from grpo_doctor.cli.errors import UserError
from grpo_doctor.logs.terminal_text import terminal_safe
from grpo_doctor.plan.sizes import parse_size
from grpo_doctor.schema import DEFAULT_RUNS_ROOT, RUN_DIR_ENV
from grpo_doctor.supervisor.alerts import AlertSettings, url_problem
from grpo_doctor.supervisor.fail_slow import FailSlowSettings
from grpo_doctor.supervisor.fleet import CHANNELS
from grpo_doctor.supervisor.launch import LaunchError, find_executable
from grpo_doctor.supervisor.progress import HangPolicy
from grpo_doctor.supervisor.watch import HANG_EXIT, Watch, WatchOptions

COMMAND_NOT_FOUND_EXIT = LaunchError.exit_status

EPILOG = f"""\
exit status: the command's own (128+N when a signal N ended it); {HANG_EXIT} when a hang was
detected and watch ended the job (--on-hang kill); {COMMAND_NOT_FOUND_EXIT} when the command does not exist;
2 for a usage error. The last line watch prints states the status it exits with.

A rank counts as stalled when it wrote no event for longer than FACTOR x the longest interval
seen in the phase it is in (never less than FLOOR s; a phase not yet seen to finish gets INITIAL s).
When every running rank has stalled, watch takes all stacks twice, SECOND_LOOK s apart, names the
ranks the others wait for and writes supervisor/HOST/hang-N.json. Without grpo-doctor events (an
uninstrumented script) a hang is output silence with idle rank CPUs for --uninstrumented-timeout s.
Every time is in seconds.

Before the job starts, watch plans its GPU memory (as `grpo-doctor plan` does) when it recognises the
command (ms-swift, TRL, verl, OpenRLHF) and prints a warning when it will not fit; the job starts anyway.

When the command ends, watch builds report.html and findings.json in the run directory (as
`grpo-doctor report RUN_DIR` would) and prints the most severe findings; --no-report skips this.

Alerts (docs/alerts.md): at a hang, and for each critical finding at the end, watch POSTs the finding
to every --notify URL (a Slack or Mattermost incoming webhook) and runs --on-hang-exec /
--on-finding-exec with the finding as JSON on stdin and GRPO_DOCTOR_* variables. In the background:
a failing endpoint costs one line, and watch's exit waits at most 10 s for what is pending.
"""


def add_parser(sub) -> None:
    p = sub.add_parser("watch", help="run a training command and catch hangs and crashes as they happen",
                       description="Run CMD (torchrun, accelerate launch, deepspeed, python ...) under supervision.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run-dir", type=Path, default=None,
                   help=f"run directory: the job's records and watch's files (default: ${RUN_DIR_ENV} if set, "
                        f"else {DEFAULT_RUNS_ROOT}/watch-TIME); the flag wins over the variable")
    p.add_argument("--hang-timeout", type=float, default=None, metavar="SECONDS",
                   help="fixed stall timeout in seconds for every phase, and for an uninstrumented job's silence "
                        "(default: learned per phase, see below)")
    p.add_argument("--hang-factor", type=float, default=HangPolicy.factor, metavar="FACTOR",
                   help="a phase stalls after FACTOR x the longest interval seen in it")
    p.add_argument("--hang-floor", type=float, default=HangPolicy.floor_s, metavar="FLOOR",
                   help="the learned stall timeout is never below FLOOR seconds")
    p.add_argument("--hang-initial", type=float, default=HangPolicy.initial_s, metavar="INITIAL",
                   help="stall timeout in seconds for a phase not yet seen to finish")
    p.add_argument("--uninstrumented-timeout", type=float, default=600.0, metavar="SECONDS",
                   help="without grpo-doctor events: seconds of output silence and idle rank CPUs that make a hang")
    p.add_argument("--on-hang", choices=("report", "kill"), default="report",
                   help="after reporting a hang: keep waiting (report) or end the job (kill)")
    p.add_argument("--second-look", type=float, default=5.0, metavar="SECOND_LOOK",
                   help="seconds between the two stack captures")
    p.add_argument("--native", action="store_true", help="include C/C++ frames in the stacks (slower)")
    p.add_argument("--sample-interval", type=float, default=1.0, metavar="SECONDS",
                   help="GPU and process sampling period in seconds")
    p.add_argument("--no-report", action="store_true", help="do not build report.html / findings.json at the end")
    p.add_argument("--gpu-memory", metavar="SIZE", default=None,
                   help="memory of one GPU (e.g. 80GiB) for the memory plan made at start, where NVML cannot say")
    p.add_argument("--notify", action="append", default=[], metavar="URL",
                   help="POST each alert as JSON to URL (http/https; a Slack or Mattermost incoming webhook "
                        "takes it as it is); repeatable")
    p.add_argument("--on-hang-exec", metavar="CMD", default=None,
                   help="shell command run when a hang is found, after the stacks are taken: the finding as JSON "
                        "on stdin, GRPO_DOCTOR_* variables in its environment")
    p.add_argument("--on-finding-exec", metavar="CMD", default=None,
                   help="shell command run for each critical finding of the report at the end, as --on-hang-exec")
    p.add_argument("--alert-live", action="store_true",
                   help="also alert on each critical finding watch says while the job runs, once per id (a constant "
                        "reward, dead steps, a NaN loss, a shared sampling seed, memory growing toward an OOM; docs/watch.md, "
                        "Live findings)")
    p.add_argument("--instrument", action="store_true",
                   help="zero-code instrumentation: every Python process of the job records its torch.distributed "
                        "collectives and rollout calls as phases and its optimizer steps as steps, without code "
                        "changes (docs/instrument.md)")
    p.add_argument("--fleet", choices=CHANNELS, default="auto",
                   help="on a job of several nodes (one watch per node; NNODES/NODE_RANK or Slurm's variables): how "
                        "the watches meet to judge a hang over every node's ranks, once: through the shared run "
                        "directory (dir), a TCPStore hosted by node 0's watch (store; needs torch), both (auto), "
                        "or not at all (off: each node judged alone); docs/clusters.md")
    p.add_argument("--fleet-port", type=int, default=None, metavar="PORT",
                   help="port of the fleet's TCPStore on the job's master address (default: MASTER_PORT + 11)")
    p.add_argument("--fail-slow-every", type=float, default=FailSlowSettings.interval_s, metavar="SECONDS",
                   help="a job that moves, but slowly: seconds between rounds of every rank's stack, taken once its "
                        "steps are under way and when its pace falls (0: never); the rank outside the others' "
                        "stack in most rounds is named (docs/watch.md, Fail-slow)")
    p.add_argument("--fail-slow-rounds", type=int, default=FailSlowSettings.rounds, metavar="N",
                   help="rounds in one survey (default %(default)s)")
    p.add_argument("command", nargs="+", metavar="-- CMD", help="the launch command, after --")
    p.set_defaults(run=run)


def run(args) -> int:
    for name in ("hang_timeout", "hang_factor", "hang_floor", "hang_initial", "uninstrumented_timeout",
                 "second_look", "sample_interval"):
        value = getattr(args, name)
        if value is None:
            continue
        flag = f"--{name.replace('_', '-')}"
        if not math.isfinite(value):
            raise UserError(f"{flag} {value} is not a finite number", f"give {flag} a number of seconds, e.g. {flag} 60"
                            if name != "hang_factor" else f"give {flag} a number, e.g. {flag} {HangPolicy.factor:g}")
        if value <= 0 and not (name == "second_look" and value == 0):
            raise UserError(f"{flag} {value:g} must be positive")
    alerts = _alert_settings(args)
    # Before the run directory exists: a command that cannot start leaves nothing behind (exit 127).
    find_executable(args.command, os.environ.get("PATH"))
    run_dir = args.run_dir or Path(os.environ.get(RUN_DIR_ENV) or Path(DEFAULT_RUNS_ROOT) / time.strftime("watch-%Y%m%d-%H%M%S"))
    _check_run_dir(run_dir, "--run-dir" if args.run_dir else RUN_DIR_ENV if os.environ.get(RUN_DIR_ENV) else "the run directory")
    opts = WatchOptions(
        command=list(args.command),
        run_dir=run_dir,
        policy=HangPolicy(factor=args.hang_factor, floor_s=args.hang_floor, initial_s=args.hang_initial,
                          fixed_s=args.hang_timeout),
        uninstrumented_timeout_s=args.hang_timeout or args.uninstrumented_timeout,
        on_hang=args.on_hang,
        second_look_s=args.second_look,
        native=args.native,
        sample_interval_s=args.sample_interval,
        gpu_memory_bytes=parse_size(args.gpu_memory) if args.gpu_memory else None,
        instrument=args.instrument,
        alerts=alerts,
        fleet=args.fleet,
        fleet_port=args.fleet_port,
        fail_slow=_fail_slow_settings(args),
    )
    watch = Watch(opts)
    status = watch.run()  # LaunchError (127) and RunDirBusy (2) are DoctorErrors: main() prints them
    # In a run directory several nodes share, the deciding watch writes the one report (watch.writes_report).
    built = None if args.no_report or not watch.writes_report else _report_at_end(run_dir)
    if built is not None:
        watch.alerter.send_findings([f.to_dict() for f in built.findings.findings], built.html_path)
    watch.alerter.close()  # a bounded wait (AlertSettings.end_wait_s)
    hang_ended = status == HANG_EXIT and opts.on_hang == "kill" and bool(watch.hangs)
    print(f"grpo-doctor: {exit_line(status, hang_ended)}", file=sys.stderr)
    return status


def _fail_slow_settings(args) -> FailSlowSettings:
    every, rounds = args.fail_slow_every, args.fail_slow_rounds
    if not math.isfinite(every) or every < 0 or 0 < every < 1:
        raise UserError(f"--fail-slow-every {every:g} is not 0 or a number of seconds from 1",
                        "e.g. --fail-slow-every 5 (the default), or 0 to take no stack rounds")
    if not 2 <= rounds <= 100:
        raise UserError(f"--fail-slow-rounds {rounds} is not 2 to 100", "e.g. --fail-slow-rounds 10 (the default)")
    return FailSlowSettings(interval_s=every, rounds=rounds)


def _check_run_dir(run_dir: Path, given_by: str) -> None:
    """Refuses, before the job starts, a run directory that no write could ever reach: one behind a
    symbolic link loop. One that merely cannot be written now (read-only, full, a name too long for
    the file system) still starts the job: watch says so once and the job's status is watch's."""
    if _link_loop_on_the_way(run_dir):
        raise UserError(f"{given_by} {terminal_safe(str(run_dir))}: a symbolic link on the way points back "
                        "into itself (a symbolic link loop)",
                        f"remove or repair the link (ls -l each part of the path), or give {given_by} another "
                        "directory") from None


def _link_loop_on_the_way(path: Path) -> bool:
    """ELOOP from the path or the nearest ancestor that exists (os.stat says it on every Python; pathlib's
    resolve() raised RuntimeError for it until 3.13, and no longer does)."""
    for part in (path, *path.parents):
        try:
            os.stat(part)
            return False  # it exists, or its nearest existing ancestor does: no loop on the way
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return True
            if exc.errno not in (errno.ENOENT, errno.ENOTDIR):
                return False  # anything else is said by the first write, once
    return False


def _alert_settings(args) -> AlertSettings:
    for url in args.notify:
        if (problem := url_problem(url)) is not None:
            raise UserError(problem, "give the webhook's full address, e.g. --notify https://hooks.slack.com/services/...")
    alerts = AlertSettings(notify_urls=tuple(args.notify), on_hang_exec=args.on_hang_exec,
                           on_finding_exec=args.on_finding_exec, live=args.alert_live)
    if args.alert_live and not (alerts.notify_urls or alerts.on_finding_exec):
        print("grpo-doctor: --alert-live has no effect without --notify or --on-finding-exec", file=sys.stderr)
    if args.no_report and args.on_finding_exec and not args.alert_live:
        print("grpo-doctor: --on-finding-exec has no effect with --no-report (no findings are made at the end)",
              file=sys.stderr)
    return alerts


def exit_line(status: int, hang_ended: bool) -> str:
    """The last line watch prints: the status it exits with and what it means."""
    if hang_ended:
        return f"exit status {status}: the job hung and watch ended it (--on-hang kill)"
    if status > 128:
        try:
            name = signal.Signals(status - 128).name
        except ValueError:
            name = f"signal {status - 128}"
        return f"exit status {status}: the command was ended by {name} (128 + {status - 128})"
    return f"exit status {status}: the command's own"


def _report_at_end(run_dir: Path, num_groups: int = 2):
    """The report of what just ran, led by its root cause as `grpo-doctor report` prints it; its
    failure is one line and never changes watch's exit status. Returns the built report (None on failure)."""
    from grpo_doctor.report.build import build_report
    from grpo_doctor.report.console import format_findings
    from grpo_doctor.report.incident_groups import group_findings

    try:
        built = build_report([run_dir])
        result, html_path = built.findings, built.html_path
    except Exception as exc:  # noqa: BLE001 - the job is over; nothing here may hide its status
        print(f"grpo-doctor: no report ({type(exc).__name__}: {terminal_safe(exc)}); try: grpo-doctor report {run_dir}",
              file=sys.stderr)
        return None
    groups = group_findings(result.findings)
    shown = [f for g in groups[:num_groups] for f in (g.lead, *g.consequences)]
    text = format_findings(dataclasses.replace(result, findings=shown, warnings=[]))
    for line in text.splitlines():
        print(f"grpo-doctor: {line}", file=sys.stderr)
    if len(groups) > num_groups:
        print(f"grpo-doctor: ... and {len(result.findings) - len(shown)} more finding(s): grpo-doctor report {run_dir}",
              file=sys.stderr)
    print(f"grpo-doctor: report: {html_path}", file=sys.stderr)
    return built
