"""The environment watch gives the job: where to record, and PyTorch's own diagnostics switched on.

A variable the user already set is never overridden; what watch did set is returned so that
run.json records it.

Typical use:
    env, added = child_environment(os.environ, run_dir)
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from grpo_doctor.schema import RUN_DIR_ENV, RunPaths


def child_environment(environ: Mapping[str, str], run_dir: Path) -> tuple[dict[str, str], dict[str, str]]:
    paths = RunPaths(run_dir.resolve())
    wanted = {
        RUN_DIR_ENV: str(paths.root),
        # NCCL flight recorder: the last collectives of every rank, dumped when the watchdog fires.
        "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": str(paths.flight_recorder / "nccl_trace_rank_"),
        # Python stacks on SIGSEGV / SIGABRT (NCCL teardown) land in the saved output.
        "PYTHONFAULTHANDLER": "1",
        # Output through a pipe is block-buffered otherwise: minutes late, and lost on SIGKILL.
        "PYTHONUNBUFFERED": "1",
    }
    added = {k: v for k, v in wanted.items() if k not in environ}
    return {**environ, **added}, added
