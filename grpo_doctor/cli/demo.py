"""`grpo-doctor demo`: the reference GRPO trainer on this machine's CPU, two ranks under torchrun.

It leaves a run directory with report.html and findings.json, and prints each rank's summary and
the findings. `--inject` passes fault specs to the trainer, so every failure grpo-doctor diagnoses
can be produced on a laptop.

Typical use:
    grpo-doctor demo
    grpo-doctor demo --inject same-seed-per-node --steps 4
"""
from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from grpo_doctor.cli import report, summary
from grpo_doctor.cli.errors import UserError
from grpo_doctor.report.console import format_findings
from grpo_doctor.runlog.eventlog import RunDirError, load_run


def add_parser(sub) -> None:
    p = sub.add_parser("demo", help="run the reference GRPO trainer on 2 CPU ranks and summarise the run")
    p.add_argument("--nproc", type=int, default=2, help="ranks to start (default 2)")
    p.add_argument("--steps", type=int, default=6, help="training steps (default 6)")
    p.add_argument("--out", type=Path, default=None, help="run directory (default grpo-doctor-runs/demo-TIME)")
    p.add_argument("--inject", action="append", default=[], metavar="SPEC",
                   help="fault to inject, e.g. same-seed-per-node, hang:rank=1,phase=rollout,step=2 (repeatable)")
    p.add_argument("--engine", choices=("ddp", "deepspeed"), default="ddp")
    p.add_argument("--dist-timeout-s", type=float, default=60.0,
                   help="collective timeout of the demo job (default 60: a hung demo ends by itself)")
    p.add_argument("--timeout-s", type=float, default=900.0, help="end the demo if it runs longer (default 900)")
    p.set_defaults(run=run)


def run(args) -> int:
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("transformers") is None:
        raise UserError("the demo needs torch and transformers", "pip install 'grpo-doctor[train]'")
    if args.nproc < 1:
        raise UserError(f"--nproc {args.nproc} must be at least 1")
    _check_inject_specs(args.inject)
    out = args.out or Path("grpo-doctor-runs") / time.strftime("demo-%Y%m%d-%H%M%S")
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(args.nproc),
        "--master-addr", "127.0.0.1", "--master-port", str(_free_port()),
        "-m", "grpo_doctor_trainer.train", "--model", "tiny", "--steps", str(args.steps), "--run-dir", str(out),
        "--engine", args.engine, "--dist-timeout-s", str(args.dist_timeout_s),
    ]
    for spec in args.inject:
        command += ["--inject", spec]
    print(f"grpo-doctor demo: {' '.join(command[2:])}", flush=True)
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    status = _run_with_timeout(command, env, args.timeout_s)
    try:
        log = load_run([out])
    except RunDirError as exc:
        raise UserError(
            f"the trainer exited with status {status} before recording anything ({exc})",
            "its own error is printed above",
        ) from None
    print()
    print(summary.format_summary(log, summary.summarise(log)))
    findings, html_path, _ = report.write_report([out])
    print()
    print(format_findings(findings))
    print(f"\nrun directory: {out}\nreport: {html_path}")
    return 0 if status == 0 else 1


def _check_inject_specs(specs: list[str]) -> None:
    """Reject a bad spec here, in one line, rather than after torchrun has started two ranks."""
    from grpo_doctor_trainer.inject import parse_fault

    for spec in specs:
        try:
            parse_fault(spec)
        except ValueError as exc:
            raise UserError(str(exc)) from None


def _run_with_timeout(command: list[str], env: dict, timeout_s: float) -> int:
    proc = subprocess.Popen(command, env=env, start_new_session=True)
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        print(f"grpo-doctor demo: still running after {timeout_s:.0f} s; ending it", file=sys.stderr)
        return _end_group(proc)
    except KeyboardInterrupt:
        _end_group(proc)
        raise


def _end_group(proc: subprocess.Popen) -> int:
    for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            return proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue
    return proc.wait(timeout=10.0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
