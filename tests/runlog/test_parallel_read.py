import threading
from types import SimpleNamespace

import pandas as pd
import pytest

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.runlog import parallel_read
from grpo_doctor.schema import PhaseBegin, PhaseEnd, RunPaths, Step
from tests.analysis.rundata import common, header, write_rank

TABLES = ("phases", "steps", "memory", "errors", "rollouts", "rng")


def write_run(run_dir, num_ranks=4, num_steps=20):
    for rank in range(num_ranks):
        records = [header(rank, num_ranks)]
        for step in range(num_steps):
            t = 100.0 + step
            records += [PhaseBegin(**common(rank, step=step, t=t), phase="rollout", path="rollout"),
                        PhaseEnd(**common(rank, step=step, t=t + 0.5), phase="rollout", path="rollout",
                                 duration_s=0.5, synced=False),
                        Step(**common(rank, step=step, t=t + 0.6), metrics={"loss": 0.1 * step, "lr": 1e-6})]
        write_rank(run_dir, rank, records[:-2] if rank == 2 else records)  # rank 2 stops inside step 19


@pytest.fixture
def pools(monkeypatch):
    """Counts the worker pools started; two CPUs whatever this machine has."""
    started = []

    class CountingPool(parallel_read.ProcessPoolExecutor):
        def __init__(self, *args, **kwargs):
            started.append(self)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(parallel_read, "ProcessPoolExecutor", CountingPool)
    monkeypatch.setattr(parallel_read.os, "cpu_count", lambda: 2)
    # The test runner's own threads (a pytest-xdist worker runs execnet's I/O thread) are counted out,
    # so that the reader forks, or refuses to beside a thread the test starts, as under plain pytest.
    runner_threads, count = threading.active_count() - 1, threading.active_count
    monkeypatch.setattr(parallel_read, "threading", SimpleNamespace(active_count=lambda: count() - runner_threads))
    return started


def test_rank_files_read_in_workers_give_the_evidence_read_here(tmp_path, pools, monkeypatch):
    write_run(tmp_path)
    RunPaths(tmp_path).rank_file(5).mkdir()  # unreadable: a warning, from the worker as from here
    here = load_evidence([tmp_path])
    assert not pools  # a small run
    monkeypatch.setattr(parallel_read, "MIN_PARALLEL_BYTES", 0)
    in_workers = load_evidence([tmp_path])
    assert len(pools) == 1
    for name in TABLES:
        pd.testing.assert_frame_equal(getattr(in_workers, name), getattr(here, name))
    assert in_workers.warnings == here.warnings
    assert any("rank-00005.jsonl: cannot be read" in w for w in in_workers.warnings)
    assert in_workers.run.ranks[2].open_path == "rollout" and in_workers.run.ranks[2].last_step == 18


def test_small_runs_are_read_here(tmp_path, pools):
    write_run(tmp_path)
    ev = load_evidence([tmp_path])
    assert not pools  # no worker started for four ranks of 20 steps
    assert len(ev.phases) == 80 and len(ev.steps) == 79 and ev.run.ranks[2].last_step == 18
    assert parallel_read._total_bytes(sorted(RunPaths(tmp_path).ranks.iterdir())) < parallel_read.MIN_PARALLEL_BYTES


def test_no_worker_is_forked_while_other_threads_run(tmp_path, pools, monkeypatch):
    write_run(tmp_path)
    monkeypatch.setattr(parallel_read, "MIN_PARALLEL_BYTES", 0)
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        ev = load_evidence([tmp_path])
    finally:
        stop.set()
        other.join()
    assert not pools and len(ev.phases) == 80 and ev.phases["end_t"].isna().sum() == 1
