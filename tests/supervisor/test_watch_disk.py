"""watch's own failures never change the job: a full, filling or read-only run directory costs records,
never the job's run, output or exit status. Real file systems: small tmpfs mounts (root only)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import clean_env

# Prints, stalls silently (a hang to the uninstrumented detector), prints again, exits 3.
JOB = ("import sys, time; print('job started', flush=True); time.sleep(6); "
       "print('job done', flush=True); sys.exit(3)")


def _mount_tmpfs(path: Path, size: str, read_only: bool = False) -> None:
    path.mkdir(parents=True, exist_ok=True)
    options = f"size={size}" + (",ro" if read_only else "")
    out = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({out.stderr.strip() or 'not root'}); the full-disk cases need one")


@pytest.fixture
def small_disk(tmp_path):
    mounts = []

    def make(name: str, size: str = "256k", read_only: bool = False) -> Path:
        path = tmp_path / name
        _mount_tmpfs(path, size, read_only)
        mounts.append(path)
        return path

    yield make
    for path in mounts:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def _watch(run_dir: Path, job: str, *args: str, timeout_s: float = 120):
    cmd = [sys.executable, "-m", "grpo_doctor.cli.main", "watch", "--run-dir", str(run_dir), *args, "--",
           sys.executable, "-c", job]
    # RANK makes the job a rank to watch: its silence is a stall, investigated with py-spy.
    return subprocess.run(cmd, env=clean_env(RANK="0"), capture_output=True, text=True, timeout=timeout_s,
                          cwd=run_dir.parent)


def _fill(directory: Path) -> None:
    with open(directory / "filler", "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass


def test_a_full_run_directory_with_a_stalled_job_leaves_the_job_to_run_and_exit_as_it_would(small_disk):
    disk = small_disk("full")
    (disk / "run").mkdir()
    _fill(disk)
    out = _watch(disk / "run", JOB, "--hang-timeout", "1", "--second-look", "0")
    assert out.returncode == 3, out.stderr
    assert out.stdout.splitlines() == ["job started", "job done"]
    assert "Traceback" not in out.stderr
    assert "No space left on device" in out.stderr and "--run-dir" in out.stderr
    assert "taking the stacks" in out.stderr  # the stall was investigated, and the job left alone


def test_a_disk_that_fills_during_the_run_passes_the_exit_status_through_without_a_traceback(small_disk):
    disk = small_disk("filling", size="512k")
    job = ("import sys\nfor i in range(40000):\n    print('x' * 60, i)\nprint('job done', flush=True)\nsys.exit(3)")
    out = _watch(disk / "run", job)
    assert out.returncode == 3, out.stderr[-2000:]
    assert out.stdout.splitlines()[-1] == "job done" and len(out.stdout.splitlines()) == 40001
    assert "Traceback" not in out.stderr
    assert "cannot write" in out.stderr and "No space left on device" in out.stderr


def test_a_read_only_run_directory_still_starts_the_job(small_disk):
    disk = small_disk("readonly", read_only=True)
    out = _watch(disk / "run", "import sys; print('hello'); sys.exit(5)")
    assert out.returncode == 5, out.stderr
    assert out.stdout == "hello\n"
    assert "Traceback" not in out.stderr
    assert "Read-only file system" in out.stderr
    assert not os.listdir(disk)


def test_a_second_watch_on_the_same_run_directory_refuses_in_one_line_and_the_first_job_goes_on(tmp_path):
    run_dir = tmp_path / "run"
    first = subprocess.Popen([sys.executable, "-m", "grpo_doctor.cli.main", "watch", "--run-dir", str(run_dir),
                              "--no-report", "--", sys.executable, "-c",
                              "import time; time.sleep(4); print('first done')"],
                             env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lock = next(iter(run_dir.glob("supervisor/*/.watch.lock")), None)
        for _ in range(100):  # the first watch has claimed the directory once its lock names it
            if lock is not None and lock.read_text().startswith("grpo-doctor watch pid"):
                break
            subprocess.run(["sleep", "0.1"])
            lock = next(iter(run_dir.glob("supervisor/*/.watch.lock")), None)
        second = _watch(run_dir, "print('second ran')")
        assert second.returncode == 2 and "second ran" not in second.stdout
        message, hint = second.stderr.strip().splitlines()
        assert message.startswith("grpo-doctor: error: ") and f"is already watched on this host by grpo-doctor watch pid {first.pid}" in message
        assert "--run-dir" in hint
    finally:
        out, _ = first.communicate(timeout=60)
    assert first.returncode == 0 and out == "first done\n"


def test_a_host_name_with_a_slash_stays_inside_the_run_directory(tmp_path):
    run_dir = tmp_path / "deep" / "run"
    launcher = ("import runpy, socket, sys; socket.sethostname('../../evil/host'); "
                f"sys.argv = ['grpo-doctor', 'watch', '--run-dir', {str(run_dir)!r}, '--no-report', '--', "
                "sys.executable, '-c', 'print(1)']; runpy.run_module('grpo_doctor.cli.main', run_name='__main__')")
    out = subprocess.run(["unshare", "--uts", sys.executable, "-c", launcher], env=clean_env(), capture_output=True,
                         text=True, timeout=60)
    if out.returncode != 0 and "unshare" in out.stderr and "Operation not permitted" in out.stderr:
        pytest.skip("needs a UTS namespace (root) to give the host a hostile name")
    assert out.returncode == 0, out.stderr
    assert [p.name for p in (run_dir / "supervisor").iterdir()] == [".._.._evil_host"]
    assert not (tmp_path / "evil").exists() and not (tmp_path / "deep" / "evil").exists()
