"""Python stacks of a process as py-spy shows them, whether captured live or parsed from a log.

The supervisor fills these from `py-spy dump --json` (`supervisor/stacks.py`); the log parser
fills the same types from py-spy's text output pasted into logs (`logs/pyspy.py`), so grouping
and reporting work on either. Frames are innermost first, as py-spy prints them.

Typical use:
    cap = StackCapture(rank=3, pid=6866, host="node-1", captured_t=time.time(), threads=(
        ThreadStack(thread_id=6866, name="MainThread", active=False, frames=(
            Frame("all_reduce", "torch/distributed/distributed_c10d.py", 3252),
            Frame("train_step", "train.py", 88))),))
    assert StackCapture.from_dict(json.loads(json.dumps(cap.to_dict()))) == cap
    cap.main_thread().frames[0].function  # "all_reduce"
    cap.without_own_threads()             # the same without grpo-doctor's flush and signal threads
    traceback_frames(error.traceback)     # a recorded exception's frames, innermost first, as Frames
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

MAIN_THREAD_NAME = "MainThread"
# Threads grpo-doctor's rank API starts inside the training process (rank/sink.py, rank/hooks.py):
# they are the tool's own, never the user's problem, and are left out of the stacks shown.
OWN_THREAD_PREFIX = "grpo-doctor-"
_OWN_PACKAGE = re.compile(r"(?:^|[/\\])grpo_doctor[/\\]rank[/\\]")
_PYTHON_SUFFIXES = (".py", ".pyx", ".pyi", ".pyw")
_PACKAGES_DIR = re.compile(r"[/\\](?:site|dist)-packages[/\\]")
_TRACEBACK_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>\S+)', re.MULTILINE)
_STDLIB_DIR = re.compile(r"[/\\]lib[/\\]python\d+(?:\.\d+)?t?[/\\]")


def display_path(filename: str) -> str:
    """A filename as py-spy shows it by default: from the package root, else the file's name.

    `/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py` becomes
    `torch/distributed/distributed_c10d.py`, `/usr/lib/python3.11/threading.py` becomes
    `threading.py`, `/home/me/train.py` becomes `train.py`; short names are left alone.
    """
    for pattern in (_PACKAGES_DIR, _STDLIB_DIR):
        found = list(pattern.finditer(filename))
        if found:
            return filename[found[-1].end():]
    if filename.startswith(("/", "\\")) or re.match(r"[A-Za-z]:[/\\]", filename):
        return re.split(r"[/\\]", filename)[-1]
    return filename


@dataclass(frozen=True)
class Frame:
    """One stack frame. `line` is 0 where py-spy knows none (native frames without debug info)."""

    function: str
    filename: str
    line: int

    @property
    def is_native(self) -> bool:
        # py-spy --native interleaves C/C++ frames whose "file" is a shared object (libc.so.6)
        # or a source file of another language; Python frames always name a .py file or a
        # pseudo-file such as <frozen importlib._bootstrap> or <string>.
        return not (self.filename.endswith(_PYTHON_SUFFIXES) or self.filename.startswith("<"))

    def to_dict(self) -> dict[str, Any]:
        return {"function": self.function, "filename": self.filename, "line": self.line}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Frame:
        return cls(function=data["function"], filename=data["filename"], line=int(data.get("line") or 0))


@dataclass(frozen=True)
class ThreadStack:
    """One thread. `thread_id` is the OS thread id where py-spy knows it, else the pthread id."""

    thread_id: int
    name: str
    active: bool  # running or wanting the CPU; an idle thread is blocked (lock, sleep, I/O)
    frames: tuple[Frame, ...]

    @property
    def python_frames(self) -> tuple[Frame, ...]:
        return tuple(f for f in self.frames if not f.is_native)

    @property
    def is_own(self) -> bool:
        """A thread grpo-doctor's rank API started (its flush and signal threads): by name, or for a
        paste without names by the function the thread was started with (its outermost frame outside
        the standard library), so a main thread that is inside a grpo-doctor call is kept."""
        if self.name.startswith(OWN_THREAD_PREFIX):
            return True
        if self.name:
            return False
        targets = [f for f in self.python_frames if not _STDLIB_DIR.search(f.filename)
                   and not f.filename.startswith("<") and f.filename.rsplit("/", 1)[-1] != "threading.py"]
        return bool(targets) and bool(_OWN_PACKAGE.search(targets[-1].filename))

    def to_dict(self) -> dict[str, Any]:
        return {
            "thread_id": self.thread_id, "name": self.name, "active": self.active,
            "frames": [f.to_dict() for f in self.frames],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ThreadStack:
        return cls(
            thread_id=int(data["thread_id"]), name=data.get("name") or "", active=bool(data.get("active")),
            frames=tuple(Frame.from_dict(f) for f in data.get("frames", ())),
        )


@dataclass(frozen=True)
class StackCapture:
    """All threads of one process at one moment, or why they could not be had.

    `rank` is -1 where unknown (a pasted dump without a rank prefix); `pid` is -1 for a paste that
    starts after its `Process N:` line; `captured_t` (wall s) is None for pasted dumps; `error`
    is None on success and otherwise a one-line reason that starts with a short tag
    ("process gone:", "ptrace denied:", "py-spy missing:", "timeout:", "py-spy failed:").
    """

    rank: int
    pid: int
    host: str
    captured_t: float | None
    threads: tuple[ThreadStack, ...]
    error: str | None = None
    command: str = ""  # the process's command line, as py-spy's "Process N:" line shows it

    @property
    def ok(self) -> bool:
        return self.error is None

    def main_thread(self) -> ThreadStack | None:
        """The thread named MainThread; else the first one (py-spy lists it first in text dumps)."""
        for thread in self.threads:
            if thread.name == MAIN_THREAD_NAME:
                return thread
        return self.threads[0] if self.threads else None

    def without_own_threads(self) -> StackCapture:
        """The same capture without grpo-doctor's own threads (what a person should be shown)."""
        kept = tuple(t for t in self.threads if not t.is_own)
        return self if len(kept) == len(self.threads) else replace(self, threads=kept)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank, "pid": self.pid, "host": self.host, "captured_t": self.captured_t,
            "threads": [t.to_dict() for t in self.threads], "error": self.error, "command": self.command,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StackCapture:
        return cls(
            rank=int(data["rank"]), pid=int(data["pid"]), host=data.get("host") or "",
            captured_t=data.get("captured_t"),
            threads=tuple(ThreadStack.from_dict(t) for t in data.get("threads", ())),
            error=data.get("error"), command=data.get("command") or "",
        )


def thread_from_pyspy_json(data: dict[str, Any]) -> ThreadStack:
    """One thread of `py-spy dump --json` output (a list of these per process)."""
    # py-spy prints the OS thread id in its text output when it knows it; do the same.
    thread_id = data.get("os_thread_id") or data["thread_id"]
    frames = tuple(Frame(f["name"], f["filename"], int(f.get("line") or 0)) for f in data.get("frames", ()))
    return ThreadStack(int(thread_id), data.get("thread_name") or "", bool(data.get("active")), frames)


def traceback_frames(text: str) -> tuple[Frame, ...]:
    """The frames of the last traceback in a Python traceback text, innermost first (as py-spy lists
    them), so a rank's recorded exception can be compared with another rank's stack."""
    start = text.rfind("Traceback (most recent call last):")
    found = _TRACEBACK_FRAME.finditer(text[max(start, 0):])
    return tuple(reversed([Frame(m["function"], m["file"], int(m["line"])) for m in found]))
