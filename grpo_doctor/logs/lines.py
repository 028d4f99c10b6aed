"""Read a log file line by line (or in chunks of whole lines) in bounded memory, whatever it holds.

Logs are large (tens of GB for a long multi-node run), may hold lines of megabytes (a tensor
printed whole, a JSON blob) and binary garbage (a crashed writer, a core dump cat'ed by mistake).
Lines are cut at `max_line_bytes` (the rest of such a line is skipped, so line numbers stay those
of the file), undecodable bytes become U+FFFD, and only "\\n" ends a line (a progress bar's "\\r"
stays inside its line, where `prefixes.split_prefix` deals with it).

A log written as UTF-16 (PowerShell's `>` and `Tee-Object` write UTF-16LE with a byte-order mark)
is read as UTF-8, transcoded in bounded blocks; a UTF-8 byte-order mark is skipped. Other files are
read as the bytes they are.

`iter_chunks` gives the same lines in chunks of about a megabyte, as bytes, for a caller that
searches the raw bytes first and decodes only some lines (`line_at` cuts and decodes one line
exactly as `iter_lines` would).

Typical use:
    for line in iter_lines("job.log", max_bytes=2**30):
        scanner.feed(line)
    for chunk in iter_chunks("job.log"):
        text, next_start = line_at(chunk, 0)
"""
from __future__ import annotations

import codecs
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from grpo_doctor.schema.safe_read import open_regular

MAX_LINE_BYTES = 64 * 1024
CHUNK_BYTES = 2**18  # fits a core's L2 cache, so the keyword passes over a chunk read it from there


def iter_lines(path: str | Path, max_bytes: int | None = None,
               max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[str]:
    """The file's lines (with their "\\n"); with `max_bytes`, only the lines that start within
    its first `max_bytes` bytes."""
    budget = max_bytes if max_bytes is not None else float("inf")
    with open_log(path) as f:
        while budget > 0:
            raw = f.readline(max_line_bytes)
            if not raw:
                return
            budget -= len(raw)
            if len(raw) == max_line_bytes and not raw.endswith(b"\n"):
                budget -= _skip_rest_of_line(f, max_line_bytes)
            yield raw.decode("utf-8", "replace")


def _skip_rest_of_line(f: BinaryIO, chunk_bytes: int) -> int:
    skipped = 0
    while True:
        rest = f.readline(chunk_bytes)
        skipped += len(rest)
        if not rest or rest.endswith(b"\n"):
            return skipped


def iter_chunks(path: str | Path, max_bytes: int | None = None, max_line_bytes: int = MAX_LINE_BYTES,
                chunk_bytes: int = CHUNK_BYTES) -> Iterator[bytes]:
    """The lines `iter_lines` gives, as bytes in chunks of whole lines of about `chunk_bytes`.
    A line longer than `max_line_bytes` is kept whole, or, when it spans reads, as its first
    `max_line_bytes` bytes and whatever the read that ends it holds: cut it with `line_at`."""
    if max_bytes is not None and max_bytes <= 0:
        return
    last_byte = None if max_bytes is None else max_bytes - 1  # the line holding it is the last one read
    carry = b""  # the start of a line that the reads so far did not end, at most max_line_bytes of it
    offset = 0  # bytes read so far
    with open_log(path) as f:
        while block := f.read(chunk_bytes):
            offset += len(block)
            if last_byte is not None and offset > last_byte:
                newline = block.find(b"\n", max(0, last_byte - (offset - len(block))))
                if newline >= 0:
                    yield carry + block[:newline + 1]
                    return
            end = block.rfind(b"\n") + 1
            if end:
                yield carry + block[:end]
                carry = b""
            carry += block[end:end + max_line_bytes - len(carry)]
    if carry:
        yield carry


def line_at(chunk: bytes, start: int, max_line_bytes: int = MAX_LINE_BYTES) -> tuple[str, int]:
    """The line of `chunk` that starts at `start`, cut and decoded as `iter_lines` gives it, and
    where the next line starts."""
    end = chunk.find(b"\n", start) + 1 or len(chunk)
    return chunk[start:min(end, start + max_line_bytes)].decode("utf-8", "replace"), end


def open_log(path: str | Path):
    """The file opened for reading as UTF-8 bytes: past a UTF-8 byte-order mark, or, after a UTF-16
    one, a reader that transcodes (`read` and `readline` as a binary file has them)."""
    f = open_regular(path)  # never a FIFO or a device (schema/safe_read.py): UnreadableFile, an OSError
    bom = f.read(3)
    if bom[:2] in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE):
        f.seek(0)
        return _Utf16AsUtf8(f)
    if bom != codecs.BOM_UTF8:
        f.seek(0)
    return f


class _Utf16AsUtf8:
    """A UTF-16 file read as UTF-8, `TRANSCODE_BYTES` of it at a time (memory bounded by that and by
    what the caller asks for); undecodable units become U+FFFD as elsewhere."""

    TRANSCODE_BYTES = 1 << 16

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self._decoder = codecs.getincrementaldecoder("utf-16")("replace")  # reads the BOM, drops it
        self._buffer = b""
        self._eof = False

    def __enter__(self) -> _Utf16AsUtf8:
        return self

    def __exit__(self, *exc) -> None:
        self._raw.close()

    def _fill(self) -> bool:
        """Transcodes one more block; False at the end of the file."""
        if self._eof:
            return False
        block = self._raw.read(self.TRANSCODE_BYTES)
        self._eof = not block
        self._buffer += self._decoder.decode(block, final=self._eof).encode("utf-8", "replace")
        return True

    def read(self, size: int) -> bytes:
        while len(self._buffer) < size and self._fill():
            pass
        out, self._buffer = self._buffer[:size], self._buffer[size:]
        return out

    def readline(self, limit: int) -> bytes:
        while True:
            newline = self._buffer.find(b"\n", 0, limit)
            if newline >= 0 or len(self._buffer) >= limit or not self._fill():
                end = newline + 1 if newline >= 0 else limit
                out, self._buffer = self._buffer[:end], self._buffer[end:]
                return out
