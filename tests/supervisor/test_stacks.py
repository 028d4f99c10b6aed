"""py-spy captures of real processes standing in for ranks of a hung job, and their grouping."""
from __future__ import annotations

import os
import select
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from helpers import clean_env, write_program

from grpo_doctor.checks.stack_groups import (
    StackGroup,
    compare_captures,
    culprit_ranks,
    describe,
    format_ranks,
    group_stacks,
    odd_ranks,
    stack_signature,
)
from grpo_doctor.logs.pyspy import parse_pyspy_text
from grpo_doctor.schema.stacks import Frame, StackCapture, ThreadStack
from grpo_doctor.supervisor.stacks import capture_stacks, find_py_spy, ptrace_denied

# Ranks 0-2 wait in a "collective", rank 3 is still generating: the shape of a GRPO hang.
# "moving" is a slow rank: its stack changes with every iteration (alternating functions,
# recursion depth i % 199), and it counts iterations in a file so a test can wait for progress.
RANK_PROGRAM = """
    import os, sys, threading, time

    role, progress = sys.argv[1], sys.argv[2]

    def all_reduce_wait():
        print("ready", flush=True)
        threading.Event().wait()

    def generate_rollout():
        print("ready", flush=True)
        time.sleep(3600)

    def decode_even(depth):
        if depth:
            return decode_even(depth - 1)
        time.sleep(0.02)

    def decode_odd(depth):
        if depth:
            return decode_odd(depth - 1)
        time.sleep(0.02)

    def generate_slowly():
        print("ready", flush=True)
        i = 0
        while True:
            (decode_odd if i % 2 else decode_even)(i % 199)
            i += 1
            with open(progress + ".tmp", "w") as f:
                f.write(str(i))
            os.replace(progress + ".tmp", progress)

    def train_step():
        {"collective": all_reduce_wait, "rollout": generate_rollout, "moving": generate_slowly}[role]()

    train_step()
"""
ROLES = {0: "collective", 1: "collective", 2: "collective", 3: "rollout", 4: "moving"}
READY_TIMEOUT_S = 20.0


def _start_ranks(tmp: Path, roles: dict[int, str]) -> tuple[dict[int, subprocess.Popen], Path]:
    prog = write_program(tmp, RANK_PROGRAM, name="ranks_prog.py")
    procs = {}
    for rank, role in roles.items():
        procs[rank] = subprocess.Popen(
            [sys.executable, str(prog), role, str(tmp / f"progress-{rank}")], env=clean_env(), cwd=tmp,
            stdout=subprocess.PIPE, text=True,
        )
    return procs, prog


def _wait_until_blocked(proc: subprocess.Popen, progress: Path, role: str) -> None:
    """Until the process is where its role says: blocked in its wait, or counting iterations."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    ready, _, _ = select.select([proc.stdout], [], [], READY_TIMEOUT_S)
    assert ready and proc.stdout.readline().strip() == "ready", f"pid {proc.pid} did not start"
    while time.monotonic() < deadline:
        if role == "moving" and _progress(progress) >= 1:
            return
        # The main thread sleeping ("S") after "ready" can only be its Event.wait / time.sleep.
        if role != "moving" and Path(f"/proc/{proc.pid}/task/{proc.pid}/stat").read_text().rpartition(")")[2].split()[0] == "S":
            return
        time.sleep(0.01)
    raise AssertionError(f"pid {proc.pid} ({role}) never got where it should")


def _progress(path: Path) -> int:
    try:
        return int(path.read_text() or 0)
    except (OSError, ValueError):
        return 0


def _stop(procs) -> None:
    for proc in procs:
        proc.kill()
    for proc in procs:
        proc.wait(timeout=10)
        if proc.stdout:
            proc.stdout.close()


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ranks")
    procs, prog = _start_ranks(tmp, ROLES)
    try:
        for rank, proc in procs.items():
            _wait_until_blocked(proc, tmp / f"progress-{rank}", ROLES[rank])
        yield {"pids": {r: p.pid for r, p in procs.items()}, "dir": tmp, "prog": prog}
    finally:
        _stop(procs.values())


def _gone_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_hung_ranks_are_grouped_and_the_straggler_named(ranks, tmp_path):
    targets = {r: ranks["pids"][r] for r in range(4)}
    began_t = time.time()
    caps = capture_stacks(targets, tmp_path)
    ended_t = time.time()

    assert [c.error for c in caps] == [None] * 4
    assert [(c.rank, c.pid) for c in caps] == sorted(targets.items())
    assert all(c.host == socket.gethostname() and began_t <= c.captured_t <= ended_t for c in caps)
    assert "ranks_prog.py collective" in caps[0].command
    groups = group_stacks(caps)
    assert [g.ranks for g in groups] == [(0, 1, 2), (3,)]
    lines = describe(groups, rank_context={0: "step 17", 1: "step 17", 2: "step 17", 3: "step 16"})
    assert lines[0].startswith("ranks 0-2: all_reduce_wait (ranks_prog.py:"), lines
    assert "<- train_step (ranks_prog.py:" in lines[0] and lines[0].endswith(" at step 17")
    assert lines[1].startswith("rank 3: generate_rollout (ranks_prog.py:") and lines[1].endswith(" at step 16")
    assert odd_ranks(groups) == [3]
    assert culprit_ranks(groups) == [3]  # 0-2 wait in "all_reduce", 3 is elsewhere
    assert groups[0].waiting_in_collective and not groups[1].waiting_in_collective
    for cap in caps:  # the raw JSON and a py-spy-style text rendering, which reads back the same
        assert (tmp_path / f"rank-{cap.rank:05d}.json").stat().st_size > 0
        [back] = parse_pyspy_text((tmp_path / f"rank-{cap.rank:05d}.txt").read_text())
        assert back.pid == cap.pid
        assert [f.function for f in back.main_thread().frames] == [f.function for f in cap.main_thread().frames]


def test_a_second_capture_tells_stuck_ranks_from_a_moving_one(ranks, tmp_path):
    targets = dict(ranks["pids"]) | {5: _gone_pid()}
    first = capture_stacks(targets, tmp_path / "t0")
    # Wait for the slow rank to finish two more iterations, so its stack has surely changed
    # (it only repeats after 398 iterations, 8 s at least).
    progress = ranks["dir"] / "progress-4"
    seen = _progress(progress)
    deadline = time.monotonic() + 10
    while _progress(progress) < seen + 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    second = capture_stacks(targets, tmp_path / "t1")

    assert compare_captures(first, second) == {
        0: "stuck", 1: "stuck", 2: "stuck", 3: "stuck", 4: "moving", 5: "unknown",
    }


def test_the_same_process_for_two_ranks_is_captured_once_not_refused(ranks, tmp_path):
    pid = ranks["pids"][0]
    caps = capture_stacks({0: pid, 1: pid}, tmp_path)
    assert [(c.rank, c.error) for c in caps] == [(0, None), (1, None)]
    assert (tmp_path / "rank-00001.json").read_bytes() == (tmp_path / "rank-00000.json").read_bytes()


def test_native_frames_are_captured_but_do_not_split_groups(ranks, tmp_path):
    [native] = capture_stacks({0: ranks["pids"][0]}, tmp_path / "native", native=True)
    [plain] = capture_stacks({1: ranks["pids"][1]}, tmp_path / "plain")
    assert native.error is None, native.error
    assert any(f.is_native for f in native.main_thread().frames)
    assert not any(f.is_native for f in plain.main_thread().frames)
    assert [g.ranks for g in group_stacks([native, plain])] == [(0, 1)]


def test_a_process_that_is_gone_is_an_error_not_an_exception(tmp_path):
    pid = _gone_pid()
    [cap] = capture_stacks({3: pid}, tmp_path)
    assert cap.error.startswith(f"process gone: pid {pid}"), cap.error
    assert cap.threads == () and not ptrace_denied([cap])
    assert "Error: process gone" in (tmp_path / "rank-00003.txt").read_text()
    assert group_stacks([cap]) == []


def test_missing_py_spy_names_the_install_command(tmp_path):
    caps = capture_stacks({0: os.getpid(), 1: os.getpid()}, tmp_path, py_spy="/nonexistent/py-spy")
    for cap in caps:
        assert cap.error.startswith("py-spy missing: /nonexistent/py-spy not found")
        assert "pip install py-spy" in cap.error
    assert find_py_spy("no-such-py-spy-here") is None


def test_a_py_spy_that_takes_too_long_is_killed_and_reported(tmp_path):
    procs, _ = _start_ranks(tmp_path, {0: "collective", 1: "rollout"})
    try:
        for rank, proc in procs.items():
            _wait_until_blocked(proc, tmp_path / f"progress-{rank}", "collective")
        caps = capture_stacks({r: p.pid for r, p in procs.items()}, tmp_path / "stacks", timeout_s=0.001)
        # The first py-spy reaped is past its deadline and killed. The second may finish its dump while the first
        # is killed and reaped (up to 2 s): then its stack is used, as it should be (CI at 5ada593 saw it once).
        said = [c.error.split(":")[0] if c.error else "stack" for c in caps]
        assert said[0] == "timeout" and said[1] in ("timeout", "stack"), [c.error for c in caps]
        assert all(c.error or c.threads for c in caps)
        # Killed, not left running: no py-spy of ours remains.
        assert not [c for c in psutil.Process().children(recursive=True) if "py-spy" in c.name()]
        # The ranks were left running, not stopped.
        [again] = capture_stacks({0: procs[0].pid}, tmp_path / "again")
        assert again.error is None, again.error
    finally:
        _stop(procs.values())


@pytest.mark.skipif(shutil.which("setpriv") is None or os.geteuid() != 0,
                    reason="needs root and setpriv to run py-spy as an unprivileged user")
def test_ptrace_denied_names_the_capability_fix(tmp_path):
    # The real py-spy, run as nobody against a root-owned process: what `watch` meets when it
    # runs as another user than the job, or in a container without SYS_PTRACE.
    real = find_py_spy()
    assert real is not None
    as_nobody = tmp_path / "py-spy-as-nobody"
    as_nobody.write_text(f'#!/bin/sh\nexec setpriv --reuid=65534 --regid=65534 --clear-groups {real} "$@"\n')
    as_nobody.chmod(0o755)
    procs, _ = _start_ranks(tmp_path, {0: "collective"})
    try:
        _wait_until_blocked(procs[0], tmp_path / "progress-0", "collective")
        caps = capture_stacks({0: procs[0].pid}, tmp_path / "stacks", py_spy=str(as_nobody))
    finally:
        _stop(procs.values())
    assert ptrace_denied(caps), caps[0].error
    assert "--cap-add SYS_PTRACE" in caps[0].error and "kernel.yama.ptrace_scope=0" in caps[0].error


def _thread(*frames: tuple[str, str, int], name: str = "MainThread") -> ThreadStack:
    return ThreadStack(thread_id=1, name=name, active=False, frames=tuple(Frame(*f) for f in frames))


def test_captures_and_groups_survive_a_round_trip_through_json():
    cap = StackCapture(rank=2, pid=7, host="node-1", captured_t=1.5, threads=(
        _thread(("all_reduce", "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", 3252),
                ("backward", "/work/train.py", 88)),), error=None, command="python train.py")
    assert StackCapture.from_dict(cap.to_dict()) == cap
    [group] = group_stacks([cap])
    assert StackGroup.from_dict(group.to_dict()) == group
    assert describe([group]) == [
        "rank 2: all_reduce (torch/distributed/distributed_c10d.py:3252) <- backward (train.py:88)"]


def test_only_the_innermost_line_is_ignored_when_comparing_stacks():
    spin_a = _thread(("spin", "train.py", 10), ("step", "train.py", 50))
    spin_b = _thread(("spin", "train.py", 12), ("step", "train.py", 50))
    other_call = _thread(("spin", "train.py", 10), ("step", "train.py", 57))
    assert stack_signature(spin_a) == stack_signature(spin_b)
    assert stack_signature(spin_a) != stack_signature(other_call)


def test_main_thread_is_found_by_name_else_the_first():
    worker, main = _thread(("run", "w.py", 1), name="Worker"), _thread(("main", "m.py", 2))
    assert StackCapture(0, 1, "", None, (worker, main)).main_thread() is main
    assert StackCapture(0, 1, "", None, (worker,)).main_thread() is worker


def test_rank_lists_are_compressed():
    assert format_ranks([8, 0, 1, 2, 3, 4, 5, 6]) == "0-6,8"
    assert format_ranks([3]) == "3"
    assert odd_ranks([]) == [] and culprit_ranks([]) == []


def test_grpo_doctors_own_threads_are_kept_in_the_raw_capture_but_left_out_of_the_text_shown(tmp_path):
    prog = write_program(tmp_path, """
        import sys, time
        import grpo_doctor as gd
        gd.init(run_dir=sys.argv[1])
        with gd.phase("reward"):
            print("ready", flush=True)
            time.sleep(3600)
    """, name="instrumented.py")
    proc = subprocess.Popen([sys.executable, str(prog), str(tmp_path / "run")], env=clean_env(RANK="0"),
                            cwd=tmp_path, stdout=subprocess.PIPE, text=True)
    try:
        _wait_until_blocked(proc, tmp_path / "unused", "rollout")
        [cap] = capture_stacks({0: proc.pid}, tmp_path / "stacks")
    finally:
        _stop([proc])
    assert cap.ok, cap.error
    assert {"grpo-doctor-flush", "MainThread"} <= {t.name for t in cap.threads}  # the raw capture keeps all
    shown = (tmp_path / "stacks" / "rank-00000.txt").read_text()
    assert '"MainThread"' in shown and "grpo-doctor-" not in shown and "sink.py" not in shown
    assert [t.name for t in cap.without_own_threads().threads] == ["MainThread"]


def test_a_pasted_dump_without_thread_names_drops_threads_inside_grpo_doctors_rank_package():
    own = ThreadStack(12, "", False, (Frame("wait", "threading.py", 331), Frame("_run", "grpo_doctor/rank/sink.py", 88)))
    main = ThreadStack(11, "", False, (Frame("sleep_forever", "train.py", 5),))
    cap = StackCapture(0, 11, "node-0", None, (main, own))
    assert cap.without_own_threads().threads == (main,)
