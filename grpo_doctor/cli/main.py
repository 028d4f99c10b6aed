"""Entry point of the `grpo-doctor` command.

Every error a user can fix is a `DoctorError` (grpo_doctor/schema/errors.py), caught here once:
one or two lines (the message, then its hint), exit status 2 (127 from watch for a command that
cannot be run), a traceback only with --debug. --debug is accepted before or after the command.
A reader that goes away (`grpo-doctor summary --json RUN | head -1`) ends the command quietly.

Typical use:
    grpo-doctor demo                       # run the reference trainer on 2 CPU ranks
    grpo-doctor summary grpo-doctor-runs/20261121-101502-p4711
"""
from __future__ import annotations

import argparse
import os
import sys

from grpo_doctor._version import __version__
from grpo_doctor.cli import demo, plan, probe, report, summary, watch
from grpo_doctor.cli.help_format import HelpFormatter
from grpo_doctor.logs.terminal_text import show_warnings_terminal_safe, terminal_safe
from grpo_doctor.schema.errors import DoctorError

SUBCOMMANDS = (watch, demo, summary, report, probe, plan)
BROKEN_PIPE_EXIT = 141  # 128 + SIGPIPE: what a shell reports for `yes | head -1`'s writer

EPILOG = """\
examples:
  grpo-doctor watch -- torchrun --nproc-per-node 8 train.py    supervise a run; catch hangs in seconds
  grpo-doctor demo                              2-rank GRPO run on this CPU, leaves a run directory
  grpo-doctor demo --inject hang:rank=1,phase=rollout,step=2 --dist-timeout 20
  grpo-doctor summary grpo-doctor-runs/RUN      per-rank state of a run, live or finished
  grpo-doctor summary node0/RUN node1/RUN       one run directory per node
  grpo-doctor report RUN [LOGS...]              findings with remedies; writes findings.json
  grpo-doctor report LOGS... --out DIR          report.html and findings.json into DIR
  grpo-doctor probe --nproc-per-node 8          on every node before training: rendezvous, settings, collectives
  grpo-doctor plan --gpu-memory 80GiB -- swift rlhf --rlhf_type grpo ...   will it fit in GPU memory, what to change

inside a training script:
  import grpo_doctor as gd
  with gd.phase("rollout"): ...
  gd.step(n, loss=loss, reward=reward)

conventions: --out DIR is where a command's files go; every --*-timeout is in seconds;
a flag wins over the environment variable it stands for (GRPO_DOCTOR_RUN_DIR, NNODES, ...).

exit status: 0 success; 1 the run (or what was checked) failed; 2 usage or input error;
each command's --help lists its own.
"""

DEBUG_HELP = "show tracebacks for errors (accepted before or after the command)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="grpo-doctor",
        description="Finds why distributed GRPO training hangs, runs out of memory or degenerates.",
        epilog=EPILOG,
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"grpo-doctor {__version__}")
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in SUBCOMMANDS:
        module.add_parser(sub)
    for command in sub.choices.values():
        command.formatter_class = HelpFormatter
        # SUPPRESS: when not given after the command, the value parsed before it stands.
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    show_warnings_terminal_safe()
    if args.command is None:
        parser.print_help()
        return 2
    try:
        status = args.run(args)
        sys.stdout.flush()  # a closed pipe shows here, inside the handler, not at interpreter exit
        return status
    except DoctorError as exc:
        if args.debug:
            raise
        # The message may repeat a value read from a file: escape sequences in it stay text.
        print(f"grpo-doctor: error: {terminal_safe(exc)}", file=sys.stderr)
        if exc.hint:
            print(f"  hint: {terminal_safe(exc.hint)}", file=sys.stderr)
        return exc.exit_status
    except BrokenPipeError:
        _discard_stdout()
        return BROKEN_PIPE_EXIT
    except KeyboardInterrupt:
        return 130


def _discard_stdout() -> None:
    """What is still buffered for the closed pipe goes nowhere, so the interpreter's own flush at
    exit cannot fail again ("Exception ignored ... BrokenPipeError")."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
