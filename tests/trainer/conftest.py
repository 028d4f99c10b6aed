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

import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import REPO, LaunchedRun, clean_env, free_port

# A first DeepSpeed run on a fresh machine JIT-compiles its shared-memory op (about a minute).
DEFAULT_TIMEOUT_S = 300


def launch(run_dir: Path, *args: str, nproc: int = 2, timeout_s: float = DEFAULT_TIMEOUT_S) -> LaunchedRun:
    """torchrun --nproc-per-node N -m grpo_doctor_trainer.train --run-dir RUN_DIR ARGS (nproc 0: plain python)."""
    if nproc:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
               "--master-addr", "127.0.0.1", "--master-port", str(free_port()), "-m", "grpo_doctor_trainer.train"]
    else:
        cmd = [sys.executable, "-m", "grpo_doctor_trainer.train"]
    cmd += ["--run-dir", str(run_dir), *args]
    began = time.monotonic()
    result = subprocess.run(cmd, cwd=REPO, env=clean_env(OMP_NUM_THREADS="1"), capture_output=True, text=True,
                            timeout=timeout_s)
    return LaunchedRun(result.returncode, result.stdout + result.stderr, time.monotonic() - began, run_dir)


@pytest.fixture(scope="session")
def launch_trainer():
    return launch
