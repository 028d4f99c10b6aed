"""The append-only JSON-lines file of one rank, written from a background thread.

The training loop only appends a small tuple to a list (well under a microsecond); a daemon
thread turns tuples into records and lines and writes them every `flush_interval_s`, so a
rank killed with SIGKILL loses at most that interval. `flush()` writes at once (exceptions,
signals, exit). A write failure (disk full, file gone) never reaches training: the lines wait
in a bounded buffer, are retried, and are dropped and counted past the bound; the user is
told once.

Every line is strict JSON, so `jq` and any other strict reader take a rank file: a NaN or infinite
float (a diverged loss) is written as the string "NaN", "Infinity" or "-Infinity", which
`schema.record_from_dict` turns back into the float (older files with bare NaN tokens read as ever).

An exclusive advisory lock on the file stops two live processes from writing one rank's file
(two processes that both think they are rank 0 because RANK is unset).

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
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from grpo_doctor.schema import Record

MAX_UNWRITTEN_BYTES = 8 * 1024 * 1024
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
    ) -> None:
        self.path = path
        self._encode = encode
        self._warn = warn
        self._pending: deque[Any] = deque()  # append and popleft are atomic: no lock on the hot path
        self._unwritten = bytearray()
        self._write_lock = threading.Lock()
        self._warned = False
        self.num_dropped = 0
        self._fd = _open_locked(path)
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(flush_interval_s,), name="grpo-doctor-flush", daemon=True
        )
        self._thread.start()

    def enqueue(self, raw: Any) -> None:
        self._pending.append(raw)

    def write_now(self, records: Iterable[Record], timeout_s: float | None = None) -> bool:
        """Write queued records, then these, before returning; False if the lock was not had in time.

        A signal handler runs on the main thread, which may be inside write_now already, and a
        dead network filesystem can hold the flush thread in os.write: callers there pass a timeout.
        """
        if not self._write_lock.acquire(timeout=-1 if timeout_s is None else timeout_s):
            return False
        try:
            self._serialise(self._take_pending())
            self._serialise(records)
            self._write()
        finally:
            self._write_lock.release()
        return True

    def flush(self, timeout_s: float | None = None) -> None:
        self.write_now((), timeout_s)

    def close(self, timeout_s: float = 2.0) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=timeout_s)
        if self._write_lock.acquire(timeout=timeout_s):
            try:
                self._serialise(self._take_pending())
                self._write()
                if self._fd is not None:
                    os.close(self._fd)  # closing releases the lock
                    self._fd = None
            finally:
                self._write_lock.release()

    def abandon(self) -> None:
        """In a forked child: never write to the parent's file (its lock and thread are not ours).

        The child's copy of the descriptor is closed: flock belongs to the open file, so a child
        outliving the rank would otherwise keep a restarted rank from recording.
        """
        if self._fd is not None:
            os.close(self._fd)  # the parent's own descriptor keeps the lock
        self._pending, self._fd = deque(), None
        self._stop.set()

    def _run(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            with self._write_lock:
                self._serialise(self._take_pending())
                self._write()

    def _take_pending(self) -> list[Any]:
        taken = []
        try:
            while True:
                taken.append(self._pending.popleft())
        except IndexError:
            return taken

    def _serialise(self, raws: Iterable[Any]) -> None:
        for raw in raws:
            data = raw.to_dict() if isinstance(raw, Record) else self._encode(raw)
            try:
                line = _ENCODER.encode(data)
            except ValueError:  # a NaN or an infinity somewhere in it (or a value that holds itself)
                line = _ENCODER.encode(_finite(data, MAX_DEPTH))
            self._unwritten += line.encode()
            self._unwritten += b"\n"

    def _write(self) -> None:
        if self._fd is None or not self._unwritten:
            return
        try:
            while self._unwritten:
                written = os.write(self._fd, self._unwritten)
                del self._unwritten[:written]
        except OSError as exc:
            self._degrade(exc)

    def _degrade(self, exc: OSError) -> None:
        if not self._warned:
            self._warned = True
            fix = (
                "free space on that disk or point GRPO_DOCTOR_RUN_DIR elsewhere"
                if exc.errno in (errno.ENOSPC, errno.EDQUOT)
                else "check the run directory is still there and writable"
            )
            self._warn(f"cannot write {self.path}: {exc.strerror}; {fix}. Recording is degraded, training goes on")
        if len(self._unwritten) > MAX_UNWRITTEN_BYTES:
            cut = self._unwritten.rfind(b"\n", 0, len(self._unwritten) - MAX_UNWRITTEN_BYTES // 2) + 1
            self.num_dropped += self._unwritten.count(b"\n", 0, cut)
            del self._unwritten[:cut]


def _finite(value: Any, depth: int) -> Any:
    """`value` with every non-finite float written as its string ("NaN", "Infinity", "-Infinity").
    Past `depth` levels a value is written as its text: a structure that holds itself ends there."""
    if isinstance(value, float):
        return value if math.isfinite(value) else NON_FINITE_TEXT.get(value, "NaN")
    if depth <= 0:
        return str(value) if isinstance(value, (dict, list, tuple)) else value
    if isinstance(value, dict):
        return {_finite(k, 0): _finite(v, depth - 1) for k, v in value.items()}  # a NaN key, too
    if isinstance(value, (list, tuple)):
        return [_finite(v, depth - 1) for v in value]
    return value


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
