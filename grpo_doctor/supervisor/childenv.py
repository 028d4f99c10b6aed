"""The environment watch gives the job: where to record, and PyTorch's own diagnostics switched on.

A variable the user already set (under either of its names) is never overridden; what watch did
set is returned so that run.json records it.

With `instrument=True` (`watch --instrument`), the zero-code instrumentation's directory goes first
on PYTHONPATH (the user's entries kept after it) and GRPO_DOCTOR_INSTRUMENT=1 is set: every Python
process of the job then loads its sitecustomize (grpo_doctor/rank/auto/).

Typical use:
    env, added = child_environment(os.environ, run_dir)
    env, added = child_environment(os.environ, run_dir, instrument=True)
"""
from __future__ import annotations

import os
import re
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path

from grpo_doctor.schema import RUN_DIR_ENV, RunPaths

# The NCCL flight recorder's settings: torch 2.9 renamed two of them and warns about the old
# names (kept as aliases). (old name, new name)
BUFFER_SIZE = ("TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_FR_BUFFER_SIZE")
DUMP_FILE = ("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "TORCH_FR_DUMP_TEMP_FILE")
# The zero-code instrumentation (grpo_doctor/rank/auto/, a layer watch may not import): its switch, as
# rank/auto/__init__.py spells it, and the directory holding its sitecustomize.py, found beside this
# package (tests/rank/test_auto_instrument.py checks both).
INSTRUMENT_ENV = "GRPO_DOCTOR_INSTRUMENT"
INSTRUMENT_SITE_DIR = Path(__file__).resolve().parents[1] / "rank" / "auto" / "sitedir"


def child_environment(
    environ: Mapping[str, str], run_dir: Path, torch_version: str | None = None, instrument: bool = False
) -> tuple[dict[str, str], dict[str, str]]:
    paths = RunPaths(run_dir.resolve())
    new_names = _renamed_flight_recorder(torch_version if torch_version is not None else _installed_torch())
    wanted = {
        (RUN_DIR_ENV,): str(paths.root),
        # NCCL flight recorder: the last collectives of every rank, dumped when the watchdog fires.
        BUFFER_SIZE: "2000",
        ("TORCH_NCCL_DUMP_ON_TIMEOUT",): "1",
        DUMP_FILE: str(paths.flight_recorder / "nccl_trace_rank_"),
        # Python stacks on SIGSEGV / SIGABRT (NCCL teardown) land in the saved output.
        ("PYTHONFAULTHANDLER",): "1",
        # Output through a pipe is block-buffered otherwise: minutes late, and lost on SIGKILL.
        ("PYTHONUNBUFFERED",): "1",
    }
    # The one exception to "the user's setting wins": the ranks must write where watch reads.
    added = {RUN_DIR_ENV: str(paths.root)} if environ.get(RUN_DIR_ENV) != str(paths.root) else {}
    del wanted[(RUN_DIR_ENV,)]
    for names, value in wanted.items():
        if not any(name in environ for name in names):
            added[names[-1] if new_names else names[0]] = value
    if instrument:
        # Asked for by flag, so it wins over the user's settings; their PYTHONPATH entries stay after ours,
        # empty ones too: Python reads an empty entry as the working directory (PYTHONPATH=":/x").
        # An empty or unset PYTHONPATH has no entries at all.
        site = str(INSTRUMENT_SITE_DIR)
        given = environ.get("PYTHONPATH", "")
        user_path = [p for p in given.split(os.pathsep) if p != site] if given else []
        added["PYTHONPATH"] = os.pathsep.join([site, *user_path])
        added[INSTRUMENT_ENV] = "1"
    return {**environ, **added}, added


def _installed_torch() -> str:
    """The torch beside watch: usually the job's own environment (watch is installed into it)."""
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return ""


def _renamed_flight_recorder(torch_version: str) -> bool:
    match = re.match(r"(\d+)\.(\d+)", torch_version)
    return match is not None and (int(match.group(1)), int(match.group(2))) >= (2, 9)
