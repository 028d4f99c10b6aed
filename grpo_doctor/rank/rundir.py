"""Where a rank writes: GRPO_DOCTOR_RUN_DIR (set by the supervisor), else the caller's
argument, else a new directory under ./grpo-doctor-runs/.

The new directory's name must come out the same in every local rank without the ranks
talking to each other, so it is derived from the launcher (the parent process, e.g. the
torchrun agent): its start time and pid. A process started by hand gets its own.

Typical use:
    run_dir = resolve_run_dir(explicit=None)   # -> Path("grpo-doctor-runs/20261121-101502-p4711")
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import psutil

from grpo_doctor.schema import DEFAULT_RUNS_ROOT, RUN_DIR_ENV


def resolve_run_dir(explicit: str | os.PathLike | None, environ=None) -> Path:
    env = os.environ if environ is None else environ
    if env.get(RUN_DIR_ENV):
        return Path(env[RUN_DIR_ENV])
    if explicit is not None:
        return Path(explicit)
    return Path(DEFAULT_RUNS_ROOT) / default_run_name(env)


def default_run_name(environ) -> str:
    launched = "LOCAL_RANK" in environ  # a launcher started us and our siblings
    pid = os.getppid() if launched else os.getpid()
    try:
        started = psutil.Process(pid).create_time()
    except psutil.Error:
        started = time.time()
    return time.strftime("%Y%m%d-%H%M%S", time.localtime(started)) + f"-p{pid}"
