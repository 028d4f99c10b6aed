"""Read a log file line by line in bounded memory, whatever it holds.

Logs are large (tens of GB for a long multi-node run), may hold lines of megabytes (a tensor
printed whole, a JSON blob) and binary garbage (a crashed writer, a core dump cat'ed by mistake).
Lines are cut at `max_line_bytes` (the rest of such a line is skipped, so line numbers stay those
of the file), undecodable bytes become U+FFFD, and only "\\n" ends a line (a progress bar's "\\r"
stays inside its line, where `prefixes.split_prefix` deals with it).

Typical use:
    for line in iter_lines("job.log", max_bytes=2**30):
        scanner.feed(line)
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

MAX_LINE_BYTES = 64 * 1024


def iter_lines(path: str | Path, max_bytes: int | None = None,
               max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[str]:
    """The file's lines (with their "\\n"); with `max_bytes`, only the lines that start within
    its first `max_bytes` bytes."""
    budget = max_bytes if max_bytes is not None else float("inf")
    with open(path, "rb") as f:
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
