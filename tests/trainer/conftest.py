"""Launch the reference trainer for real (torchrun, gloo, CPU) and read back its run directory.

Typical use (in a test module):
    @pytest.fixture(scope="module")
    def healthy(launch_trainer, tmp_path_factory):
        return launch_trainer(tmp_path_factory.mktemp("healthy"), "--steps", "3")

    def test_it(healthy):
        assert healthy.returncode == 0
        log = healthy.run.ranks[0]
"""
from __future__ import annotations

import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import REPO, clean_env

from grpo_doctor.eventlog import RunLog, load_run

# A first DeepSpeed run on a fresh machine JIT-compiles its shared-memory op (about a minute).
DEFAULT_TIMEOUT_S = 300


@dataclass
class TrainerRun:
    returncode: int
    output: str  # stdout and stderr of torchrun and every rank, interleaved
    elapsed_s: float
    run_dir: Path

    @property
    def run(self) -> RunLog:
        return load_run([self.run_dir])

    def explain(self) -> str:
        return f"exit {self.returncode} after {self.elapsed_s:.1f}s; output tail:\n{self.output[-4000:]}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(run_dir: Path, *args: str, nproc: int = 2, timeout_s: float = DEFAULT_TIMEOUT_S) -> TrainerRun:
    """torchrun --nproc-per-node N -m trainer.train --run-dir RUN_DIR ARGS (nproc 0: plain python)."""
    if nproc:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
               "--master-addr", "127.0.0.1", "--master-port", str(free_port()), "-m", "trainer.train"]
    else:
        cmd = [sys.executable, "-m", "trainer.train"]
    cmd += ["--run-dir", str(run_dir), *args]
    began = time.monotonic()
    result = subprocess.run(cmd, cwd=REPO, env=clean_env(OMP_NUM_THREADS="1"), capture_output=True, text=True,
                            timeout=timeout_s)
    return TrainerRun(result.returncode, result.stdout + result.stderr, time.monotonic() - began, run_dir)


@pytest.fixture(scope="session")
def launch_trainer():
    return launch
