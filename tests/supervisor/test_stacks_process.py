"""What a stack capture says about the process itself (gone, zombie, stopped, hidden), read with psutil."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from grpo_doctor.supervisor.stacks import capture_stacks

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _wait_for_status(pid: int, wanted: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while psutil.Process(pid).status() != wanted:
        assert time.monotonic() < deadline, f"pid {pid} never became {wanted}"
        time.sleep(0.02)


def test_a_zombie_is_reported_as_gone_with_no_command(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "pass"])  # not waited for: a zombie once it exits
    try:
        _wait_for_status(child.pid, "zombie")
        [cap] = capture_stacks({2: child.pid}, tmp_path)
    finally:
        child.wait()
    assert cap.error.startswith(f"process gone: pid {child.pid} is no longer running"), cap.error
    assert cap.command == ""


def test_a_stopped_process_is_named_with_the_command_that_resumes_it(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.3)  # past the interpreter's start, so the command line is the final one
        child.send_signal(signal.SIGSTOP)
        _wait_for_status(child.pid, "stopped")
        [cap] = capture_stacks({0: child.pid}, tmp_path, timeout_s=5)
    finally:
        child.kill()
        child.wait()
    assert f"is stopped (state T; resume it with kill -CONT {child.pid})" in cap.error, cap.error
    assert cap.command.endswith("-c import time; time.sleep(60)"), cap.command


@pytest.mark.skipif(os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("setpriv")),
                    reason="needs root, unshare and setpriv for a private /proc mounted with hidepid")
@pytest.mark.parametrize("hidepid", [1, 2])
def test_a_process_hidden_by_hidepid_counts_as_alive_but_unreadable(hidepid):
    import grpo_doctor
    if not _readable_by_others(Path(grpo_doctor.__file__)):
        pytest.skip("the checkout is not readable by other users (a mode-700 directory such as mktemp's): "
                    "the unprivileged side cannot import grpo_doctor")
    # hidepid=1: /proc/<pid> is listed but its files refuse us (psutil's AccessDenied); hidepid=2:
    # not even listed. Either way the process runs, and must not be called gone.
    probe = ("from grpo_doctor.supervisor.stacks import _pid_alive, _process_status, _command_line; "
             "import sys; pid = int(sys.argv[1]); "
             "print(_pid_alive(pid), _process_status(pid), repr(_command_line(pid)))")
    script = (f"mount -o remount,hidepid={hidepid} /proc || exit 77\n"
              "sleep 30 & pid=$!\n"
              f"setpriv --reuid=65534 --regid=65534 --clear-groups {sys.executable} -c '{probe}' $pid\n"
              "status=$?; kill $pid; exit $status\n")
    out = subprocess.run(["unshare", "--mount", "--pid", "--fork", "--mount-proc", "sh", "-c", script],
                         capture_output=True, text=True, timeout=60, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": REPO})
    if out.returncode == 77 or "unshare failed" in out.stderr or "Operation not permitted" in out.stderr:
        pytest.skip(f"no private /proc here: {out.stderr.strip()}")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "None", "''"]


def _readable_by_others(path: Path) -> bool:
    """Whether every directory above `path` lets other users through (the test runs a side as nobody)."""
    return all(p.stat().st_mode & 0o001 for p in path.resolve().parents)
