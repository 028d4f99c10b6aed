"""Rank files read in parallel worker processes, for `eventlog.load_run(..., read_files=...)`.

Parsing is most of a big run's load (2 M lines for 64 ranks x 2,000 steps) and rank files are
independent, so each is read by the decoder (`decoder.read_rank_file`) in a worker process, which sends back its
records and compact columns (arrays, not millions of Python objects to pickle). A small run is
read in this process: starting workers costs more than a few MB take to read.

Workers are forked (Linux only): a fresh interpreter would run the caller's `__main__` again,
which a user's script without a main guard does not survive. Forking a process that runs other
threads can deadlock the child, so while other threads run (`grpo-doctor watch` reporting at the
end of a job) the files are read in this process too.

Typical use:
    run = read_run(["runs/job-17"])      # the reader of the report, watch's summary and `summary`
"""
from __future__ import annotations

import functools
import multiprocessing
import os
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from grpo_doctor.runlog.decoder import read_rank_file
from grpo_doctor.runlog.eventlog import load_run
from grpo_doctor.runlog.rank_log import RankLog, RunLog
from grpo_doctor.runlog.window import RUN_BUDGET_BYTES, file_budget_bytes, plan_read, prefetch

# Below this many bytes of rank files, the files are read here (workers start in about 0.1 s; a
# worker reads about 50 MB/s).
MIN_PARALLEL_BYTES = 16 * 1024 * 1024


def read_rank_files(files: list[Path], run_budget_bytes: int | None = RUN_BUDGET_BYTES
                    ) -> list[RankLog | OSError]:
    """Each file's log, or the OSError that reading it raised, in the order given. The run's read
    budget is shared by its files (window.py); None reads every line of every file."""
    budget = None if run_budget_bytes is None else file_budget_bytes(len(files), run_budget_bytes)
    if budget is not None:
        _prefetch(files, budget)
    read = functools.partial(_read, budget_bytes=budget)
    num_workers = min(len(files), os.cpu_count() or 1)
    if num_workers < 2 or _total_bytes(files) < MIN_PARALLEL_BYTES or not _can_fork():
        return [read(path) for path in files]
    try:
        with ProcessPoolExecutor(num_workers, mp_context=multiprocessing.get_context("fork")) as pool:
            return list(pool.map(read, files))
    except OSError:  # no process to be had (fork failed: a limit on processes or memory); a file's own
        return [read(path) for path in files]  # OSError comes back as a value, never raised here


def read_run(paths: Sequence[str | Path], run_budget_bytes: int | None = RUN_BUDGET_BYTES) -> RunLog:
    """`load_run` with every rank file read into column batches (decoder.py), in parallel for a big run,
    files beyond their share of the read budget by window; None reads every line."""
    return load_run(paths, read_files=functools.partial(read_rank_files, run_budget_bytes=run_budget_bytes))


def _prefetch(files: list[Path], budget_bytes: int) -> None:
    """The regions of the files read by window, asked of the disk all at once (window.prefetch)."""
    for path in files:
        try:
            size = path.stat().st_size
        except OSError:
            continue
        plan = plan_read(size, budget_bytes)
        if not plan.whole:
            prefetch(path, plan)


def _read(path: Path, budget_bytes: int | None) -> RankLog | OSError:
    try:
        return read_rank_file(path, budget_bytes=budget_bytes)
    except OSError as exc:
        return exc


def _total_bytes(files: list[Path]) -> int:
    total = 0
    for path in files:
        try:
            total += path.stat().st_size
        except OSError:
            pass  # reading it will say why
    return total


def _can_fork() -> bool:
    return sys.platform.startswith("linux") and threading.active_count() == 1
