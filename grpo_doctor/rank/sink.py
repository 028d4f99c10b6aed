"""The append-only JSON-lines file of one rank, opened and written by a background thread only.

The training loop only appends a small tuple to a queue (well under a microsecond); a daemon
thread opens the file, turns tuples into records and lines and writes them every `flush_interval_s`,
so a rank killed with SIGKILL loses at most that interval. `write_now()` (the header, errors, the
End record, signals, exit) hands its records to that thread and waits for them to reach the file at
most `WRITE_WAIT_S` (or the caller's timeout): no call on the training thread ever waits on the file
system itself. A run directory on a hung file system (an NFS server gone, a FIFO nobody reads at the
rank file's path) costs the records, never the training: the constructor waits at most `OPEN_WAIT_S`
for the file to open, then says so once and goes on; records wait in memory, at most
`MAX_PENDING_RECORDS` of them, and past that are dropped and counted (`num_dropped`, in the End
record). A write failure (disk full, file gone) never reaches training either: the lines wait in a
bounded buffer, are retried, and are dropped and counted past the bound; the user is told once.

Every line is strict JSON, so `jq` and any other strict reader take a rank file: a NaN or infinite
float (a diverged loss) is written as the string "NaN", "Infinity" or "-Infinity", which
the decoder (runlog/decoder.py) turns back into the float (older files with bare NaN tokens read as ever).

An exclusive advisory lock on the file stops two live processes from writing one rank's file
(two processes that both think they are rank 0 because RANK is unset): the constructor raises
RecordingError when the file is taken or cannot be made, as long as the file system answers
within `OPEN_WAIT_S` (later, the same message is said through `warn`).

Typical use:
    sink = JsonlSink(path, encode=lambda raw: raw._asdict(), warn=print)
    sink.write_now([header])
    sink.enqueue(raw_tuple)      # hot path
    sink.close()
"""
from __future__ import annotations

import errno
import fcntl
import json
import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from grpo_doctor.schema import Record

MAX_UNWRITTEN_BYTES = 8 * 1024 * 1024
MAX_PENDING_RECORDS = 65536  # records queued while the file system takes nothing (a hung mount)
OPEN_WAIT_S = 2.0  # the longest the constructor waits for the rank file to open
WRITE_WAIT_S = 2.0  # the longest write_now waits for its records to reach the file, unless told
# One encoder for every line: json.dumps with options builds a new one per call. allow_nan=False:
# a non-finite float raises, and only that rare line takes the long way (`_finite`).
_ENCODER = json.JSONEncoder(separators=(",", ":"), default=str, allow_nan=False)
NON_FINITE_TEXT = {math.inf: "Infinity", -math.inf: "-Infinity"}  # NaN is no key: NaN != NaN
MAX_DEPTH = 64  # nesting followed while replacing non-finite floats; records are a few levels deep


class RecordingError(Exception):
    """Recording cannot start; the message names the cause and the fix."""


class JsonlSink:
    def __init__(
        self,
        path: Path,
        encode: Callable[[Any], dict],
        warn: Callable[[str], None],
        flush_interval_s: float = 0.25,
        open_wait_s: float = OPEN_WAIT_S,
    ) -> None:
        self.path = path
        self._encode = encode
        self._warn = warn
        self._pending: deque[Any] = deque()  # append and popleft are atomic: no lock on the hot path
        # Guards the lines in memory and the counters below; never held across a file-system call.
        self._cond = threading.Condition(threading.Lock())
        self._unwritten = bytearray()
        self._appended = 0  # bytes ever added to _unwritten
        self._settled = 0  # bytes ever written or dropped
        self._passes = 0  # write passes the thread has finished
        self._failing = False  # the last pass met a write error
        self._warned = False
        self.num_dropped = 0
        self._fd: int | None = None
        self._open_error: RecordingError | None = None
        self._opened = threading.Event()  # the thread's open has finished, either way
        self._caller_gone = False  # the constructor stopped waiting for the open
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(flush_interval_s,), name="grpo-doctor-flush", daemon=True
        )
        self._thread.start()
        if not self._opened.wait(open_wait_s):
            with self._cond:
                self._caller_gone = not self._opened.is_set()
            if self._caller_gone:
                self._warn(f"opening {path} has taken more than {open_wait_s:g} s (a hung file system?); recording "
                           f"waits for it in the background, keeping at most {MAX_PENDING_RECORDS} records; "
                           "training goes on")
        if self._open_error is not None and not self._caller_gone:
            raise self._open_error

    def enqueue(self, raw: Any) -> None:
        if len(self._pending) < MAX_PENDING_RECORDS:
            self._pending.append(raw)
        else:  # the file system has not taken a line for a long while: this record is lost, and counted
            self.num_dropped += 1

    def write_now(self, records: Iterable[Record], timeout_s: float | None = None) -> bool:
        """Queue what is pending, then these, and wait for the thread to write them: True once they are in
        the file, False when that has not happened within `timeout_s` (WRITE_WAIT_S when None), the file
        is not open (yet) or a write failed; the records then stay queued while there is room.

        A signal handler runs on the main thread, which may be inside write_now already: the lock is
        taken with the same timeout, so a re-entered call gives up instead of waiting on itself.
        """
        wait_s = WRITE_WAIT_S if timeout_s is None else timeout_s
        deadline = time.monotonic() + wait_s
        if not self._cond.acquire(timeout=wait_s):
            return False
        try:
            self._serialise(self._take_pending())
            self._serialise(records)
            target, passes = self._appended, self._passes
            if self._fd is None or self._stop.is_set():
                return False  # not open (a slow or failed open), or closed: nothing will write it now
            self._wake.set()
            while self._settled < target:
                if self._failing and self._passes > passes:
                    return False  # the thread tried after our records arrived, and could not write
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return True
        finally:
            self._cond.release()

    def flush(self, timeout_s: float | None = None) -> None:
        self.write_now((), timeout_s)

    def close(self, timeout_s: float = 2.0) -> None:
        """The thread writes what is queued and closes the file; waits for that at most `timeout_s`."""
        self._stop.set()
        self._wake.set()
        if not self._opened.is_set():
            return  # the file system has not even opened the file: the daemon thread is left to it
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=timeout_s)

    def abandon(self) -> None:
        """In a forked child: never write to the parent's file (its lock and thread are not ours).

        The child's copy of the descriptor is closed: flock belongs to the open file, so a child
        outliving the rank would otherwise keep a restarted rank from recording.
        """
        self._cond = threading.Condition(threading.Lock())  # the parent's thread may have held it at the fork
        if self._fd is not None:
            os.close(self._fd)  # the parent's own descriptor keeps the lock
        self._pending, self._fd = deque(), None
        self._stop.set()

    def _run(self, interval_s: float) -> None:
        try:
            fd = _open_locked(self.path)
        except RecordingError as exc:
            with self._cond:
                self._open_error = exc
                late = self._caller_gone
            self._opened.set()
            if late:
                self._warn(f"error: {exc}. Recording is off for this process; training goes on")
            self._pending.clear()
            return
        with self._cond:
            self._fd = fd
        self._opened.set()
        while True:
            self._wake.clear()
            stopping = self._stop.is_set()
            self._write_pass(fd)
            if stopping:
                break
            self._wake.wait(interval_s)
        with self._cond:
            self._fd = None
        os.close(fd)  # closing releases the lock

    def _take_pending(self) -> list[Any]:
        taken = []
        try:
            while True:
                taken.append(self._pending.popleft())
        except IndexError:
            return taken

    def _serialise(self, raws: Iterable[Any]) -> None:
        for raw in raws:
            try:
                line = _line_of(raw.to_dict() if isinstance(raw, Record) else self._encode(raw))
            except Exception:  # no record may stop the thread or reach training: it is lost, and counted
                self.num_dropped += 1
                continue
            encoded = line.encode()
            self._unwritten += encoded
            self._unwritten += b"\n"
            self._appended += len(encoded) + 1

    def _write_pass(self, fd: int) -> None:
        """One round of the thread: the pending records become lines, written outside the lock."""
        with self._cond:
            self._serialise(self._take_pending())
            data = bytes(self._unwritten)
        written, error = 0, None
        try:
            while written < len(data):
                written += os.write(fd, data[written:])
        except OSError as exc:
            error = exc
        message = None
        with self._cond:
            del self._unwritten[:written]
            self._settled += written
            self._failing = error is not None
            if error is not None:
                message = self._degrade(error)
            self._passes += 1
            self._cond.notify_all()
        if message is not None:
            self._warn(message)

    def _degrade(self, exc: OSError) -> str | None:
        """Under the lock: drops the oldest lines past the bound; the message to say once, if not said yet."""
        message = None
        if not self._warned:
            self._warned = True
            fix = (
                "free space on that disk or point GRPO_DOCTOR_RUN_DIR elsewhere"
                if exc.errno in (errno.ENOSPC, errno.EDQUOT)
                else "check the run directory is still there and writable"
            )
            message = f"cannot write {self.path}: {exc.strerror}; {fix}. Recording is degraded, training goes on"
        if len(self._unwritten) > MAX_UNWRITTEN_BYTES:
            cut = self._unwritten.rfind(b"\n", 0, len(self._unwritten) - MAX_UNWRITTEN_BYTES // 2) + 1
            self.num_dropped += self._unwritten.count(b"\n", 0, cut)
            del self._unwritten[:cut]
            self._settled += cut
        return message


def _line_of(data: dict[str, Any]) -> str:
    try:
        return _ENCODER.encode(data)
    except (ValueError, TypeError):  # a NaN or an infinity (or a value that holds itself); a key JSON has no
        return _ENCODER.encode(_finite(data, MAX_DEPTH))  # form for (api.add_to_next_step takes any key)


def _finite(value: Any, depth: int) -> Any:
    """`value` with every non-finite float written as its string ("NaN", "Infinity", "-Infinity").
    Past `depth` levels a value is written as its text: a structure that holds itself ends there."""
    if isinstance(value, float):
        return value if math.isfinite(value) else NON_FINITE_TEXT.get(value, "NaN")
    if depth <= 0:
        return str(value) if isinstance(value, (dict, list, tuple)) else value
    if isinstance(value, dict):
        return {_key(k): _finite(v, depth - 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v, depth - 1) for v in value]
    return value


def _key(key: Any) -> Any:
    """A dict key JSON can write: a str, an int or a bool as it is, a finite float as it is, anything else
    (a NaN, a tuple, an enum, an object) as its text."""
    if key is None or type(key) in (str, int, bool) or (type(key) is float and math.isfinite(key)):
        return key
    return NON_FINITE_TEXT.get(key, "NaN") if isinstance(key, float) and not math.isfinite(key) else str(key)


def _open_locked(path: Path) -> int:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as exc:
        raise RecordingError(
            f"cannot create {path}: {exc.strerror}; set GRPO_DOCTOR_RUN_DIR to a writable directory"
        ) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        raise RecordingError(
            f"{path} is already being written by another live process: two processes claim rank "
            f"{_rank_of(path)}; launch with torchrun (which sets RANK per process) or give each job its "
            "own GRPO_DOCTOR_RUN_DIR"
        ) from exc
    return fd


def _rank_of(path: Path) -> str:
    return path.stem.removeprefix("rank-").lstrip("0") or "0"
