"""Every rank's Python stacks at once, taken with py-spy, for when a job hangs.

One `py-spy dump --json` per rank, all started together so the stacks describe the same moment
and a hang of eight ranks costs one timeout, not eight. Each raw output is kept as
`rank-NNNNN.json` with a py-spy-style rendering beside it as `rank-NNNNN.txt` (without grpo-doctor's
own flush and signal threads, which are never the culprit). Nothing here
raises for a rank that cannot be read: the reason goes into `StackCapture.error`, starting with
a tag the caller can act on ("process gone:", "ptrace denied:", "py-spy missing:", "timeout:",
"py-spy failed:"); `ptrace_denied()` says when the fix is a permission one.

Typical use:
    caps = capture_stacks({0: 4101, 1: 4102}, run_paths.stacks / "t0")
    if ptrace_denied(caps):
        print(next(c.error for c in caps if c.error))   # names --cap-add SYS_PTRACE and friends
    later = capture_stacks({0: 4101, 1: 4102}, run_paths.stacks / "t1")
    compare_captures(caps, later)   # {0: "stuck", 1: "moving"}  (see stack_groups)
"""
from __future__ import annotations

import dataclasses
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import psutil

from grpo_doctor.logs.pyspy import format_pyspy_text
from grpo_doctor.schema.safe_read import read_json
from grpo_doctor.schema.safe_write import write_file
from grpo_doctor.schema.stacks import StackCapture, thread_from_pyspy_json

INSTALL_HINT = "install it into the job's environment: pip install py-spy"
PTRACE_HINT = (
    "run the container with --cap-add SYS_PTRACE (docker) or add the SYS_PTRACE capability (Kubernetes), "
    "or allow it on the host with sysctl kernel.yama.ptrace_scope=0, "
    "or run grpo-doctor watch as the same user as the training processes, or as root"
)
_KILL_WAIT_S = 2.0  # after the timeout, how long to wait for SIGKILLed py-spys to be reaped
_DENIED = re.compile(r"permission denied|operation not permitted|\bEPERM\b", re.IGNORECASE)
MAX_PYSPY_JSON_BYTES = 64 * 2**20  # one process's threads and frames: well under a megabyte


def find_py_spy(py_spy: str = "py-spy") -> str | None:
    """The py-spy to run: beside this interpreter (the venv's bin/), then on PATH; a path as given."""
    if os.sep in py_spy:
        return py_spy if os.access(py_spy, os.X_OK) and os.path.isfile(py_spy) else None
    # watch is often started from a venv that is not activated, so its bin/ is not on PATH.
    beside = Path(sys.executable).parent / py_spy
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which(py_spy)


def capture_stacks(
    targets: Mapping[int, int], out_dir: Path, *, native: bool = False, timeout_s: float = 10.0,
    py_spy: str = "py-spy",
) -> list[StackCapture]:
    """One capture per rank in `targets` (rank -> pid), sorted by rank.

    Returns within timeout_s (plus at most 2 s to reap py-spys killed at the timeout).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    host = socket.gethostname()
    exe = find_py_spy(py_spy)
    if exe is None:
        where = py_spy if os.sep in py_spy else f"{py_spy} (beside {sys.executable} or on PATH)"
        error = f"py-spy missing: {where} not found; {INSTALL_HINT}"
        caps = [StackCapture(rank, pid, host, time.time(), (), error, _command_line(pid))
                for rank, pid in sorted(targets.items())]
    else:
        # One py-spy per process: a second one attaching to the same pid at once would be refused
        # (a process has one tracer at a time) and look like a permission problem.
        runs: dict[int, _Run] = {}
        for rank, pid in sorted(targets.items()):
            if pid not in runs:
                runs[pid] = _start(exe, rank, pid, out_dir, native)
        # However many py-spys ignore their SIGKILL, the call ends by this time.
        give_up_mono = min(run.started_mono for run in runs.values()) + timeout_s + _KILL_WAIT_S
        by_pid = {pid: _finish(run, host, timeout_s, give_up_mono) for pid, run in runs.items()}
        caps = []
        for rank, pid in sorted(targets.items()):
            cap = by_pid[pid]
            if cap.rank != rank:
                shutil.copyfile(_rank_path(out_dir, cap.rank, ".json"), _rank_path(out_dir, rank, ".json"))
                cap = dataclasses.replace(cap, rank=rank)
            caps.append(cap)
    for cap in caps:
        # The raw JSON keeps every thread; the text a person reads leaves out grpo-doctor's own.
        write_file(_rank_path(out_dir, cap.rank, ".txt"), format_pyspy_text(cap.without_own_threads()))
    return caps


def ptrace_denied(captures: Iterable[StackCapture]) -> bool:
    """True if any capture failed because py-spy was not allowed to attach."""
    return any(c.error is not None and c.error.startswith("ptrace denied:") for c in captures)


@dataclass
class _Run:
    rank: int
    pid: int
    command: str
    started_t: float
    started_mono: float
    proc: subprocess.Popen[bytes] | None  # None: py-spy could not even be started
    raw_path: Path
    stderr: IO[bytes] | None
    start_error: str | None = None


def _start(exe: str, rank: int, pid: int, out_dir: Path, native: bool) -> _Run:
    cmd = [exe, "dump", "--pid", str(pid), "--json"] + (["--native"] if native else [])
    raw_path = _rank_path(out_dir, rank, ".json")
    command = _command_line(pid)
    started_t = time.time()
    # stdout straight into the file: a dump of a process with many threads can exceed a pipe's
    # buffer, and nobody would read the pipe while we wait for the others.
    stderr = tempfile.TemporaryFile()
    try:
        with open(raw_path, "wb") as raw:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=raw, stderr=stderr)
    except OSError as exc:
        stderr.close()
        error = f"py-spy failed: could not start {exe}: {exc}"
        return _Run(rank, pid, command, started_t, time.monotonic(), None, raw_path, None, error)
    return _Run(rank, pid, command, started_t, time.monotonic(), proc, raw_path, stderr)


def _finish(run: _Run, host: str, timeout_s: float, give_up_mono: float) -> StackCapture:
    def failed(error: str) -> StackCapture:
        return StackCapture(run.rank, run.pid, host, run.started_t, (), error, run.command)

    if run.proc is None or run.stderr is None:
        return failed(run.start_error or "py-spy failed")
    try:
        # Each py-spy has its own timeout from its own start; as all started together, the
        # whole call ends about timeout_s after the first one started.
        remaining_s = max(0.0, run.started_mono + timeout_s - time.monotonic())
        try:
            returncode = run.proc.wait(timeout=remaining_s)
        except subprocess.TimeoutExpired:
            run.proc.kill()
            try:
                run.proc.wait(timeout=max(0.0, give_up_mono - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass  # stuck in the kernel; leave it rather than hang the supervisor
            return failed(f"timeout: py-spy did not finish within {timeout_s:g} s for pid {run.pid}")
        run.stderr.seek(0)
        stderr = run.stderr.read().decode(errors="replace")
    finally:
        run.stderr.close()
    if returncode != 0:
        return failed(_explain_failure(run.pid, returncode, stderr))
    try:
        threads = tuple(thread_from_pyspy_json(t) for t in read_json(run.raw_path, cap=MAX_PYSPY_JSON_BYTES,
                                                                                errors="replace"))
    except (ValueError, KeyError, TypeError) as exc:
        return failed(f"py-spy failed: its output for pid {run.pid} is not the JSON expected ({exc})")
    return StackCapture(run.rank, run.pid, host, run.started_t, threads, None, run.command)


def _explain_failure(pid: int, returncode: int, stderr: str) -> str:
    detail = _error_summary(stderr) or f"exit status {returncode}"
    if not _pid_alive(pid):
        return f"process gone: pid {pid} is no longer running ({detail})"
    tracer = _tracer_pid(pid)
    if tracer:
        return f"py-spy failed: pid {pid} is already being traced by pid {tracer} (another py-spy or a debugger): {detail}"
    if _DENIED.search(stderr):
        return f"ptrace denied: py-spy may not attach to pid {pid} ({detail}); {PTRACE_HINT}"
    if _process_status(pid) == psutil.STATUS_STOPPED:
        # py-spy cannot suspend a process that is already stopped (Ctrl-Z, SIGSTOP, a debugger).
        return f"py-spy failed: pid {pid} is stopped (state T; resume it with kill -CONT {pid}): {detail}"
    return f"py-spy failed: {detail}"


def _error_summary(stderr: str) -> str:
    """py-spy's error and its causes on one line, without the Rust backtrace."""
    parts = []
    for line in stderr.splitlines():
        line = line.strip()
        if line.startswith("Stack backtrace"):
            break
        if not line or line == "Caused by:":
            continue
        line = re.sub(r"^(?:Error:\s*|\d+:\s*)", "", line)
        if line not in parts:
            parts.append(line)
    return ": ".join(parts)


def _rank_path(out_dir: Path, rank: int, suffix: str) -> Path:
    # A process with no rank (a Ray worker outside the process group) is keyed by -pid.
    return out_dir / (f"rank-{rank:05d}{suffix}" if rank >= 0 else f"pid-{-rank}{suffix}")


def _pid_alive(pid: int) -> bool:
    # Signal 0 first, not psutil: with /proc mounted hidepid=2 another user's process has no
    # /proc entry at all, and psutil would call it gone while it still runs.
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return _process_status(pid) != psutil.STATUS_ZOMBIE  # a zombie has no stacks left to read


def _tracer_pid(pid: int) -> int:
    # psutil does not expose TracerPid, so this one line of /proc/<pid>/status is read by hand.
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    found = re.search(r"^TracerPid:\s*(\d+)", status, re.MULTILINE)
    return int(found.group(1)) if found else 0


def _process_status(pid: int) -> str | None:
    """psutil's status ("running", "stopped", "zombie", ...); None when gone or unreadable (hidepid)."""
    try:
        return psutil.Process(pid).status()
    except psutil.ZombieProcess:
        return psutil.STATUS_ZOMBIE
    except psutil.Error:
        return None


def _command_line(pid: int) -> str:
    """The process's arguments joined by spaces; "" when gone, a zombie or unreadable."""
    try:
        return " ".join(psutil.Process(pid).cmdline()).strip()
    except psutil.Error:
        return ""
