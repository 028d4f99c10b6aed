"""Test helpers: run a small Python program as its own process, as a rank would be; a free port for a
launcher; a rank file written from the schema's records; the pids of a process tree."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def clean_env(**extra: str) -> dict[str, str]:
    """The test's environment without launcher or grpo-doctor variables leaking in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRPO_DOCTOR_", "RANK", "LOCAL_RANK", "WORLD_SIZE"))}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def free_port() -> int:
    """A TCP port nobody listens on now, for a launcher's --master-port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_rank(run_dir: Path, rank: int, records, tail: bytes = b"") -> Path:
    """The rank's event log as the rank side writes it: one JSON line per record, then `tail` (a torn line)."""
    from grpo_doctor.schema import RunPaths

    path = RunPaths(run_dir).rank_file(rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(json.dumps(r.to_dict()).encode() + b"\n" for r in records) + tail)
    return path


def tree_pids(pid: int) -> set[int]:
    """The pids of every live descendant of `pid` (watch is the subreaper: double-forked daemons too)."""
    import psutil

    try:
        return {p.pid for p in psutil.Process(pid).children(recursive=True)}
    except psutil.Error:
        return set()


def still_alive(pids: set[int], timeout_s: float) -> set[int]:
    """The pids still running (zombies count as gone) after waiting up to `timeout_s` for them to end."""
    import time

    import psutil

    deadline = time.monotonic() + timeout_s
    while True:
        alive = set()
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.add(pid)
            except psutil.Error:
                pass
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


def write_program(tmp_path: Path, source: str, name: str = "prog.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return path


def run_program(tmp_path: Path, source: str, timeout_s: float = 60, cwd: Path | None = None, **env: str):
    prog = write_program(tmp_path, source)
    return subprocess.run(
        [sys.executable, str(prog)], env=clean_env(**env), cwd=cwd or tmp_path,
        capture_output=True, text=True, timeout=timeout_s,
    )


@dataclass
class LaunchedRun:
    """A training job run to its end (the reference trainer, a TRL script) and its run directory."""

    returncode: int
    output: str  # stdout and stderr of the launcher and every rank, interleaved
    elapsed_s: float
    run_dir: Path

    @property
    def run(self):
        from grpo_doctor.runlog.eventlog import load_run

        return load_run([self.run_dir])

    def explain(self) -> str:
        return f"exit {self.returncode} after {self.elapsed_s:.1f}s; output tail:\n{self.output[-4000:]}"
