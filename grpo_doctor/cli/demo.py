"""`grpo-doctor demo`: the reference GRPO trainer on this machine's CPU, two ranks under torchrun.

By default it shows a failure from the field caught: the job runs healthy, then again with one rank
hung in its reward function, both under `grpo-doctor watch`, which names the rank the others wait
for, with its stack, ends the job and writes the report (`--scenario seeds`: every rank sampling
from one seed). `--scenario healthy` runs the trainer once, without watch, and prints each rank's
summary and the findings; `--inject` passes fault specs to that run, so every failure grpo-doctor
diagnoses can be produced on a laptop. The trainer (grpo_doctor_trainer) is only ever run as a
child process, never imported here: its dependencies stay out of the command, and an --inject spec
is checked by the trainer's own parser in a short child before torchrun starts two ranks.

Typical use:
    grpo-doctor demo
    grpo-doctor demo --scenario seeds
    grpo-doctor demo --inject same-seed-per-node --steps 4
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

from grpo_doctor.cli import summary
from grpo_doctor.cli.demo_watch import SCENARIOS, end_group, run_scenario, trainer_command
from grpo_doctor.cli.errors import UserError
from grpo_doctor.report.build import build_report
from grpo_doctor.report.console import format_findings
from grpo_doctor.runlog.eventlog import RunDirError
from grpo_doctor.runlog.parallel_read import read_run
from grpo_doctor.schema import DEFAULT_RUNS_ROOT, RUN_DIR_ENV

# Run in a child interpreter: each spec through the trainer's own parser, the first bad one's
# one-line message on stderr and status 3.
CHECK_INJECT = """\
import sys
from grpo_doctor_trainer.inject import parse_fault
for spec in sys.argv[1:]:
    try:
        parse_fault(spec)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        sys.exit(3)
"""
BAD_SPEC_STATUS = 3


EXIT_HELP = """\
exit status: with --scenario hang or seeds, 0 when the healthy run had no findings and the faulty one
the expected finding, else 1; with --scenario healthy (or --inject), 0 the trainer finished, 1 it
failed (an injected fault, usually: the findings say why); 2 usage error or nothing recorded."""


def add_parser(sub) -> None:
    p = sub.add_parser("demo", help="run the reference GRPO trainer on 2 CPU ranks and summarise the run",
                       description=__doc__.split("\n\nTypical use")[0], epilog=EXIT_HELP)
    p.add_argument("--scenario", choices=(*SCENARIOS, "healthy"), default=None,
                   help="hang (the default): a healthy run, then one rank hung, under watch; seeds: the same with "
                        "every rank sampling from one seed; healthy: one run, no watch (the default with --inject)")
    p.add_argument("--nproc", type=int, default=2, help="ranks to start")
    p.add_argument("--steps", type=int, default=6, help="training steps")
    p.add_argument("--out", type=Path, default=None, metavar="DIR",
                   help=f"directory for the run's records, report.html and findings.json, in DIR/healthy and "
                        f"DIR/hang (or DIR/seeds) with a scenario (default: ${RUN_DIR_ENV} "
                        f"if set, else {DEFAULT_RUNS_ROOT}/demo-TIME); the flag wins over the variable")
    p.add_argument("--inject", action="append", default=[], metavar="SPEC",
                   help="fault to inject, e.g. same-seed-per-node, hang:rank=1,phase=rollout,step=2 "
                        "(repeatable; default: none)")
    p.add_argument("--engine", choices=("ddp", "deepspeed"), default="ddp", help="how the trainer shards the model")
    p.add_argument("--dist-timeout", type=float, default=60.0, metavar="SECONDS",
                   help="collective timeout of the demo job in seconds (a hung demo ends by itself)")
    p.add_argument("--run-timeout", type=float, default=900.0, metavar="SECONDS",
                   help="end a demo run if it runs longer than this many seconds")
    # The spellings before the timeouts were named alike: still accepted, so scripts keep working.
    p.add_argument("--dist-timeout-s", type=float, dest="dist_timeout", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    p.add_argument("--timeout-s", type=float, dest="run_timeout", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    p.set_defaults(run=run)


def run(args) -> int:
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("transformers") is None:
        raise UserError("the demo needs torch and transformers", "pip install 'grpo-doctor[train]'")
    if args.nproc < 1:
        raise UserError(f"--nproc {args.nproc} must be at least 1")
    scenario = args.scenario or ("healthy" if args.inject else "hang")
    if args.inject and scenario != "healthy":
        raise UserError(f"--inject runs the trainer once, as asked: it does not go with --scenario {scenario}",
                        "grpo-doctor demo --scenario healthy --inject SPEC")
    _check_inject_specs(args.inject)
    out = args.out or Path(os.environ.get(RUN_DIR_ENV) or Path(DEFAULT_RUNS_ROOT) / time.strftime("demo-%Y%m%d-%H%M%S"))
    trainer_args = ["--engine", args.engine, "--dist-timeout-s", str(args.dist_timeout)]
    if scenario != "healthy":
        return run_scenario(SCENARIOS[scenario], out, args.nproc, args.steps, trainer_args, args.run_timeout)
    command = trainer_command(args.nproc, args.steps, out, trainer_args, args.inject)
    print(f"grpo-doctor demo: {' '.join(command[2:])}", flush=True)
    # The trainer obeys GRPO_DOCTOR_RUN_DIR over its --run-dir: set to where this demo looks, so a
    # variable exported for another run cannot send the records elsewhere.
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"), **{RUN_DIR_ENV: str(out)})
    status = _run_with_timeout(command, env, args.run_timeout)
    try:
        log = read_run([out])
    except RunDirError as exc:
        raise UserError(
            f"the trainer exited with status {status} before recording anything ({exc})",
            "its own error is printed above",
        ) from None
    print()
    print(summary.format_summary(log, summary.summarise(log)))
    built = build_report([out])
    print()
    print(format_findings(built.findings))
    print(f"\nrun directory: {out}\nreport: {built.html_path}")
    return 0 if status == 0 else 1


def _check_inject_specs(specs: list[str]) -> None:
    """Reject a bad spec here, in one line, rather than after torchrun has started two ranks."""
    if not specs:
        return
    checked = subprocess.run([sys.executable, "-c", CHECK_INJECT, *specs], capture_output=True, text=True,
                             stdin=subprocess.DEVNULL)
    lines = checked.stderr.strip().splitlines() or ["(no output)"]
    if checked.returncode == BAD_SPEC_STATUS:
        raise UserError(lines[-1], "grpo-doctor demo --help shows examples")
    if checked.returncode != 0:
        raise UserError(f"the reference trainer cannot be started to check --inject: {lines[-1]}",
                        "pip install 'grpo-doctor[train]' (it installs grpo_doctor_trainer)")


def _run_with_timeout(command: list[str], env: dict, timeout_s: float) -> int:
    proc = subprocess.Popen(command, env=env, start_new_session=True)
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        print(f"grpo-doctor demo: still running after {timeout_s:.0f} s; ending it", file=sys.stderr)
        return end_group(proc)
    except KeyboardInterrupt:
        end_group(proc)
        raise
