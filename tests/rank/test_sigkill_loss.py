"""How much a rank killed with SIGKILL loses: the records it made but never wrote.

Records are written by a background thread every 0.25 s (the flush period); SIGKILL gives it no
chance to write the rest. The README states the bound this test measures: 50 processes that record
phases continuously are killed at random moments, and for each the time between the last record on
disk and the kill is the loss. This bounds data lost, not a speed: a late flush loses more.

Each victim is forked from one process that imported grpo_doctor once (a fresh interpreter per kill
would spend most of the test starting Python); each calls `init` after the fork, so each has its own
flush thread and rank file, as a rank started by a launcher does.
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import clean_env, write_program

from grpo_doctor.schema import RunPaths

KILLS = 50
README_BOUND_S = 0.5  # README, "Durability": a rank killed with SIGKILL loses at most the last 0.5 s

FORKER = """
    import os, sys, time
    import grpo_doctor as gd

    for line in sys.stdin:
        run_dir = line.strip()
        pid = os.fork()
        if pid == 0:
            gd.init(run_dir)
            gd.step(0, loss=1.0)
            print(f"ready {os.getpid()}", flush=True)
            n = 0
            while True:  # about 2,000 records a second, each stamped with the monotonic clock
                with gd.phase("rollout"):
                    time.sleep(0.001)
                n += 1
                if n % 50 == 0:
                    gd.step(n // 50, loss=1.0 / n)
        os.waitpid(pid, 0)
        print("reaped", flush=True)
"""


def last_record_mono(run_dir: Path) -> float:
    """The monotonic time of the last complete record on disk (a torn last line is skipped)."""
    last = None
    for line in RunPaths(run_dir).rank_file(0).read_bytes().split(b"\n"):
        try:
            last = json.loads(line)["mono"]
        except (ValueError, KeyError, TypeError):
            continue
    assert last is not None, f"nothing on disk in {run_dir}"
    return last


@pytest.mark.slow
def test_a_rank_killed_with_sigkill_loses_less_than_the_readme_says(tmp_path):
    forker = subprocess.Popen([sys.executable, str(write_program(tmp_path, FORKER))], env=clean_env(), cwd=tmp_path,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    rng = random.Random(15)
    losses_s = []
    try:
        for n in range(KILLS):
            run_dir = tmp_path / f"run-{n}"
            forker.stdin.write(f"{run_dir}\n")
            forker.stdin.flush()
            word, pid = forker.stdout.readline().split()
            assert word == "ready"
            time.sleep(rng.uniform(0.05, 0.6))  # a random point of the flush cycle
            killed_mono = time.monotonic()
            os.kill(int(pid), signal.SIGKILL)
            assert forker.stdout.readline() == "reaped\n"
            losses_s.append(killed_mono - last_record_mono(run_dir))
    finally:
        forker.stdin.close()
        forker.wait(timeout=30)
    losses_s.sort()
    print(f"SIGKILL loss over {KILLS} kills: median {losses_s[KILLS // 2]:.3f} s, largest {losses_s[-1]:.3f} s")
    assert all(loss >= 0 for loss in losses_s)
    assert losses_s[-1] < README_BOUND_S, losses_s
