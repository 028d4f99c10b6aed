"""Entry point of the `grpo-doctor` command.

Typical use:
    grpo-doctor demo                       # run the reference trainer on 2 CPU ranks
    grpo-doctor summary grpo-doctor-runs/20261121-101502-p4711
"""
from __future__ import annotations

import argparse
import sys

from grpo_doctor._version import __version__
from grpo_doctor.cli import demo, probe, report, summary, watch
from grpo_doctor.cli.errors import UserError
from grpo_doctor.logs.terminal_text import show_warnings_terminal_safe, terminal_safe

SUBCOMMANDS = (watch, demo, summary, report, probe)

EPILOG = """\
examples:
  grpo-doctor watch -- torchrun --nproc-per-node 8 train.py    supervise a run; catch hangs in seconds
  grpo-doctor demo                              2-rank GRPO run on this CPU, leaves a run directory
  grpo-doctor demo --inject hang:rank=1,phase=rollout,step=2 --dist-timeout-s 20
  grpo-doctor summary grpo-doctor-runs/RUN      per-rank state of a run, live or finished
  grpo-doctor summary node0/RUN node1/RUN       one run directory per node
  grpo-doctor report RUN [LOGS...]              findings with remedies; writes findings.json
  grpo-doctor probe --nproc-per-node 8          on every node before training: rendezvous, settings, collectives

inside a training script:
  import grpo_doctor as gd
  with gd.phase("rollout"): ...
  gd.step(n, loss=loss, reward=reward)

exit status: 0 success; 1 the run (or what was checked) failed; 2 usage or input error.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="grpo-doctor",
        description="Finds why distributed GRPO training hangs, runs out of memory or degenerates.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"grpo-doctor {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in SUBCOMMANDS:
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    show_warnings_terminal_safe()
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return args.run(args)
    except UserError as exc:
        if args.debug:
            raise
        # The message may repeat a value read from a file: escape sequences in it stay text.
        print(f"grpo-doctor: error: {terminal_safe(exc)}", file=sys.stderr)
        if exc.hint:
            print(f"  hint: {terminal_safe(exc.hint)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
