"""Pass the job's stdout and stderr through unchanged, save them, and hand each line to a scanner.

One thread per stream reads raw chunks from the pipe: the bytes reach the terminal as the job
wrote them (progress bars' carriage returns included) and are appended to the run directory.
The scanner gets runs of whole lines as bytes (`on_lines`), not a call per line: it searches
them for its keywords at memchr speed and decodes only the lines near a hit, so the job's output
flows at the job's own rate. A line longer than `MAX_LINE_BYTES` reaches the scanner cut there,
so gigabytes of output, or one enormous line, cost bounded memory.

Typical use:
    tee = OutputTee(proc.stdout, run_dir / "stdout.log", write=console.write, on_lines=scan_chunk)
    tee.start(); ...; tee.join(timeout_s=5)
"""
from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

MAX_LINE_BYTES = 64 * 1024
CHUNK_BYTES = 64 * 1024


def _discard(data: bytes) -> None:
    pass


class OutputTee:
    def __init__(
        self,
        source: BinaryIO,
        log_path: Path,
        *,
        write: Callable[[bytes], None],
        on_lines: Callable[[bytes], None],
    ) -> None:
        self._fd = source.fileno()
        self._source = source
        self._log_path = log_path
        self._write = write
        self._on_lines = on_lines
        self._partial = bytearray()  # the start of a line whose end has not arrived yet
        self.num_bytes = 0
        self._thread = threading.Thread(target=self._run, name=f"grpo-doctor-tee-{log_path.stem}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout=timeout_s)

    def _run(self) -> None:
        try:
            self._log_path.parent.mkdir(parents=True, exist_ok=True)
            log: BinaryIO = self._log_path.open("ab")
        except OSError:  # a read-only or full run directory: the job's output still flows, unsaved
            log = open(os.devnull, "ab")  # noqa: SIM115 - closed below
        try:
            self._pump(log)
        finally:
            try:
                log.close()
            except OSError:
                pass  # the last buffered bytes met a full disk; the terminal has them

    def _pump(self, log: BinaryIO) -> None:
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
            try:
                log.write(chunk)
                log.flush()
            except OSError:
                pass  # a full disk must not stop the job's output from reaching the terminal
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
