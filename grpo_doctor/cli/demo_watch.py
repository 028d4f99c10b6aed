"""`grpo-doctor demo --scenario hang|seeds`: a field failure caught by `grpo-doctor watch`, on this CPU.

The reference trainer runs twice under `watch`, as a user would run their own job: first as it
should run (quietly, one line: its findings, none expected), then the same job with one fault
injected, its output and watch's verdict streamed to the terminal. The demo then checks
findings.json for the finding the fault must produce and prints where the report is. Watch and
torchrun are child processes in their own session; every wait has a timeout.

Typical use:
    status = run_scenario(SCENARIOS["hang"], out=Path("runs/demo"), nproc=2, steps=6,
                          trainer_args=["--engine", "ddp"], run_timeout_s=900.0)
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from grpo_doctor.cli.errors import UserError
from grpo_doctor.schema import RUN_DIR_ENV

# A fixed stall timeout: the learned one would wait for a minute on a phase first seen stalling.
# 8 s rather than less: a loaded 2-core laptop must not see a hang in the healthy run.
HANG_TIMEOUT_S = 8.0
SECOND_LOOK_S = 2.0
_READER_JOIN_S = 10.0


@dataclass(frozen=True)
class Scenario:
    name: str
    finding_id: str  # what findings.json must hold for the demo to have shown its point
    story: str  # what is wrong with the job, for the line before it starts

    def faults(self, nproc: int, steps: int) -> list[str]:
        if self.name == "hang":
            # The last rank blocks in its reward function halfway through, as a reward model
            # behind a dead HTTP server does; the others wait for it in the next collective.
            return [f"hang:rank={nproc - 1},phase=reward,step={steps // 2}"]
        return ["same-seed-per-node"]


SCENARIOS = {
    "hang": Scenario("hang", "hang", "the last rank stuck in its reward function halfway through"),
    "seeds": Scenario("seeds", "seed-collision",
                      "every rank sampling from one seed (a seed per node, not per rank)"),
}


def trainer_command(nproc: int, steps: int, run_dir: Path, trainer_args: list[str], faults: list[str]) -> list[str]:
    """torchrun (as `python -m torch.distributed.run`) starting the reference trainer on nproc CPU ranks."""
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
        "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
        "-m", "grpo_doctor_trainer.train", "--model", "tiny", "--steps", str(steps), "--run-dir", str(run_dir),
        *trainer_args,
    ]
    for spec in faults:
        command += ["--inject", spec]
    return command


def run_scenario(scenario: Scenario, out: Path, nproc: int, steps: int, trainer_args: list[str],
                 run_timeout_s: float) -> int:
    """0 when the faulty run produced the scenario's finding and the healthy one none; else 1."""
    if scenario.name == "hang" and (nproc < 2 or steps < 2):
        raise UserError("--scenario hang needs --nproc 2 or more and --steps 2 or more",
                        "grpo-doctor demo --nproc 2 --steps 6")
    faults = scenario.faults(nproc, steps)
    print(f"grpo-doctor demo: the reference GRPO trainer (tiny model, {steps} steps) on {nproc} CPU ranks "
          f"under torchrun, supervised by grpo-doctor watch; run directory {out}", flush=True)

    healthy_dir = out / "healthy"
    print("\n1/2 the job as it should run ... ", end="", flush=True)
    started = time.monotonic()
    with open(_mkdir(healthy_dir) / "demo-output.log", "w", encoding="utf-8") as log:
        status = _watch(trainer_command(nproc, steps, healthy_dir, trainer_args, []), healthy_dir,
                        run_timeout_s, lambda line: log.write(line))
    ids = _finding_ids(healthy_dir)
    print(f"exit status {status}, {_describe(ids)}, {time.monotonic() - started:.0f} s "
          f"({healthy_dir / 'report.html'})", flush=True)
    if status != 0 or ids is None or ids:
        log_path = healthy_dir / "demo-output.log"
        tail = log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
        print("\n".join(tail), file=sys.stderr)
        print(f"grpo-doctor demo: the healthy run should end with status 0 and no findings; "
              f"its whole output: {log_path}", file=sys.stderr)
        return 1

    faulty_dir = out / scenario.name
    command = trainer_command(nproc, steps, faulty_dir, trainer_args, faults)
    watch_flags = _watch_flags(faulty_dir)
    shown = ["grpo-doctor", "watch", *watch_flags[4:], "--", "torchrun", *command[3:]]
    print(f"\n2/2 the same job with {scenario.story}:\n$ {' '.join(shown)}", flush=True)
    started = time.monotonic()
    status = _watch(command, faulty_dir, run_timeout_s, _echo)  # watch folds what torchrun prints as it ends
    elapsed_s = time.monotonic() - started
    return _verdict(scenario, faulty_dir, status, elapsed_s)


def _verdict(scenario: Scenario, run_dir: Path, status: int, elapsed_s: float) -> int:
    findings = _findings(run_dir)
    found = next((f for f in findings or [] if f.get("id") == scenario.finding_id), None)
    print()
    if found is None:
        print(f"grpo-doctor demo: no {scenario.finding_id} finding in {run_dir / 'findings.json'} "
              f"(watch's exit status {status}); the output above says what happened", file=sys.stderr)
        return 1
    ranks = ",".join(str(r) for r in found.get("ranks") or []) or "all"
    print(f"grpo-doctor demo: caught: {scenario.finding_id} on rank(s) {ranks}, recorded in "
          f"{run_dir / 'findings.json'} (this run: {elapsed_s:.0f} s)")
    print(f"grpo-doctor demo: open the report: {run_dir / 'report.html'}", flush=True)
    return 0


def _watch_flags(run_dir: Path) -> list[str]:
    return [sys.executable, "-m", "grpo_doctor.cli.main", "watch", "--run-dir", str(run_dir),
            "--hang-timeout", f"{HANG_TIMEOUT_S:g}", "--second-look", f"{SECOND_LOOK_S:g}", "--on-hang", "kill"]


def _watch(command: list[str], run_dir: Path, timeout_s: float, emit: Callable[[str], object]) -> int:
    """Run `grpo-doctor watch ... -- command`, each line of its merged output to emit; its status."""
    # The trainer obeys GRPO_DOCTOR_RUN_DIR over its --run-dir: set to where the demo looks.
    # Unbuffered, so that watch's lines and the job's reach the pipe in the order they happen.
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"), PYTHONUNBUFFERED="1",
               **{RUN_DIR_ENV: str(run_dir)})
    proc = subprocess.Popen([*_watch_flags(run_dir), "--", *command], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                            start_new_session=True)
    reader = threading.Thread(target=lambda: [emit(line) for line in proc.stdout], daemon=True)
    reader.start()
    try:
        status = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        print(f"\ngrpo-doctor demo: still running after {timeout_s:.0f} s; ending it", file=sys.stderr)
        status = end_group(proc)
    except KeyboardInterrupt:
        end_group(proc)
        raise
    reader.join(_READER_JOIN_S)  # a grandchild still holding the pipe must not hold the demo
    return status


def _echo(line: str) -> None:
    sys.stdout.write(line)
    sys.stdout.flush()


def _findings(run_dir: Path) -> list[dict] | None:
    try:
        return json.loads((run_dir / "findings.json").read_text(encoding="utf-8"))["findings"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _finding_ids(run_dir: Path) -> list[str] | None:
    findings = _findings(run_dir)
    return None if findings is None else [f.get("id") for f in findings]


def _describe(ids: list[str] | None) -> str:
    if ids is None:
        return "no findings.json"
    return "no findings" if not ids else f"findings: {', '.join(ids)}"


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def end_group(proc: subprocess.Popen) -> int:
    """SIGTERM, then SIGKILL, to the child's process group; its status. Each wait is bounded."""
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
