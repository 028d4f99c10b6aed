"""Pass the job's stdout and stderr through unchanged, save them, and hand each line to a scanner.

One thread per stream reads raw chunks from the pipe: the bytes reach the terminal as the job
wrote them (progress bars' carriage returns included) and are appended to the run directory.
The scanner gets runs of whole lines as bytes (`on_lines`), not a call per line: it searches
them for its keywords at memchr speed and decodes only the lines near a hit, so the job's output
flows at the job's own rate. A line longer than `MAX_LINE_BYTES` reaches the scanner cut there,
so gigabytes of output, or one enormous line, cost bounded memory.

The log file is opened and written by a thread of its own (`LogWriter`), fed through a queue of at
most `MAX_UNSAVED_BYTES`: forwarding the job's output to the terminal never waits on the file system.
A run directory on a hung NFS mount (or a FIFO nobody reads where the log should be) costs the log
its bytes, dropped and counted once the queue is full (`unsaved_bytes`, said once through `note`),
never the job its progress.

Typical use:
    tee = OutputTee(proc.stdout, run_dir / "stdout.log", write=console.write, on_lines=scan_chunk)
    tee.start(); ...; tee.join(timeout_s=5)
"""
from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

MAX_LINE_BYTES = 64 * 1024
CHUNK_BYTES = 64 * 1024
MAX_UNSAVED_BYTES = 16 * 2**20  # of the job's output waiting for its log file; past it, dropped and counted
WRITE_BATCH_BYTES = 2**20


def _discard(data: bytes) -> None:
    pass


class LogWriter:
    """Appends chunks to one file from a thread of its own, which also opens the file: `put` never
    waits on the file system. Past `max_unsaved_bytes` waiting, chunks are dropped and counted
    (`unsaved_bytes`); `note` is told once. A file that cannot be opened or written (a full or
    read-only disk) loses what is put, as a full disk did before: the terminal has it."""

    def __init__(self, path: Path, *, max_unsaved_bytes: int = MAX_UNSAVED_BYTES,
                 note: Callable[[str], None] | None = None) -> None:
        self.path = path
        self._max = max_unsaved_bytes
        self._note = note
        self._cond = threading.Condition()
        self._queue: deque[bytes] = deque()
        self._queued_bytes = 0
        self._closed = False
        self.unsaved_bytes = 0
        self._thread = threading.Thread(target=self._run, name=f"grpo-doctor-log-{path.stem}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def put(self, chunk: bytes) -> None:
        with self._cond:
            if self._queued_bytes + len(chunk) > self._max:
                first = self.unsaved_bytes == 0
                self.unsaved_bytes += len(chunk)
            else:
                first = False
                self._queue.append(chunk)
                self._queued_bytes += len(chunk)
                self._cond.notify()
        if first and self._note is not None:
            try:
                self._note(f"{self.path} is not keeping up with the job's output (a hung or slow file system?): "
                           "what does not fit in memory is left out of it and counted; the job's output still "
                           "reaches this terminal")
            except Exception:  # noqa: BLE001 - a note must never stop the output
                pass

    def close(self) -> None:
        """No more chunks: the thread writes what waits, then closes the file."""
        with self._cond:
            self._closed = True
            self._cond.notify()

    def join(self, timeout_s: float) -> bool:
        """False when the file system still holds the thread (its daemon thread dies with watch)."""
        if self._thread.ident is None:
            return True
        self._thread.join(timeout=timeout_s)
        return not self._thread.is_alive()

    def _run(self) -> None:
        fd = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError:  # a read-only or full run directory: the job's output still flows, unsaved
            fd = None
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    break
                batch = []
                size = 0
                while self._queue and size < WRITE_BATCH_BYTES:
                    batch.append(self._queue.popleft())
                    size += len(batch[-1])
                self._queued_bytes -= size
            if fd is not None:
                fd = _write_all(fd, b"".join(batch))
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass


def _write_all(fd: int, data: bytes) -> int | None:
    """The descriptor to go on with; None after a write error (a full disk: the rest is not saved)."""
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view):]
    except OSError:
        try:
            os.close(fd)
        except OSError:
            pass
        return None
    return fd


class OutputTee:
    def __init__(
        self,
        source: BinaryIO,
        log_path: Path,
        *,
        write: Callable[[bytes], None],
        on_lines: Callable[[bytes], None],
        note: Callable[[str], None] | None = None,
        max_unsaved_bytes: int = MAX_UNSAVED_BYTES,
    ) -> None:
        self._fd = source.fileno()
        self._source = source
        self.log_path = log_path
        self._log = LogWriter(log_path, max_unsaved_bytes=max_unsaved_bytes, note=note)
        self._write = write
        self._on_lines = on_lines
        self._partial = bytearray()  # the start of a line whose end has not arrived yet
        self.num_bytes = 0
        self._thread = threading.Thread(target=self._run, name=f"grpo-doctor-tee-{log_path.stem}", daemon=True)

    @property
    def unsaved_bytes(self) -> int:
        """Bytes of the job's output left out of the log (the file system did not keep up)."""
        return self._log.unsaved_bytes

    def start(self) -> None:
        self._log.start()
        self._thread.start()

    def join(self, timeout_s: float) -> bool:
        """Waits for the output's end and its log, `timeout_s` at most; False if the log is not all written."""
        deadline = time.monotonic() + timeout_s
        self._thread.join(timeout=timeout_s)
        return self._log.join(max(0.0, deadline - time.monotonic()))

    def finish(self, timeout_s: float) -> str | None:
        """join, then the line to say when the log is not the whole output (None when it is)."""
        complete = self.join(timeout_s)
        if self.unsaved_bytes:
            return (f"{self.log_path}: {self.unsaved_bytes} byte(s) of the job's output left out (the file system "
                    "did not keep up); the terminal had them")
        if not complete:
            return f"{self.log_path}: still being written after {timeout_s:g} s (a hung file system?): may be incomplete"
        return None

    def _run(self) -> None:
        try:
            self._pump()
        finally:
            self._log.close()

    def _pump(self) -> None:
        while True:
            try:
                chunk = os.read(self._fd, CHUNK_BYTES)
            except OSError:
                break
            if not chunk:
                break
            self.num_bytes += len(chunk)
            try:
                self._write(chunk)
            except OSError:
                # Our reader went away (`| head`, a dead ssh): keep draining, or the job
                # blocks on its next write once the pipe is full.
                self._write = _discard
            self._log.put(chunk)
            self._split(chunk)
        if self._partial:
            self._emit(bytes(self._partial[:MAX_LINE_BYTES]) + b"\n")
        self._source.close()

    def _split(self, chunk: bytes) -> None:
        """Hands the whole lines that `chunk` completes to the scanner; keeps the unfinished tail."""
        end = chunk.rfind(b"\n")
        if end < 0:
            self._partial += chunk
            if len(self._partial) > MAX_LINE_BYTES:  # one enormous line: the scanner gets its start
                self._emit(bytes(self._partial[:MAX_LINE_BYTES]) + b"\n")
                self._partial.clear()
            return
        if self._partial:
            first = chunk.find(b"\n")
            self._partial += chunk[: first + 1]
            self._emit(_cut_long(bytes(self._partial)))
            self._partial.clear()
            chunk_lines = chunk[first + 1 : end + 1]
        else:
            chunk_lines = chunk[: end + 1]
        if chunk_lines:
            self._emit(chunk_lines)
        self._partial += chunk[end + 1 :]

    def _emit(self, lines: bytes) -> None:
        try:
            self._on_lines(lines)
        except Exception:  # a scanner bug must not stop the output
            pass


def _cut_long(line: bytes) -> bytes:
    return line if len(line) <= MAX_LINE_BYTES else line[:MAX_LINE_BYTES] + b"\n"
