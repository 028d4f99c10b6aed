"""The report's signature rows, with repeats aggregated so memory follows distinct messages, not lines.

A log whose every line is an NCCL WARN (NCCL_DEBUG=INFO on a flapping link prints one per second
per rank for hours) holds millions of signatures saying the same few things; kept one row each,
a 300 MB such log took 4.5 GB. Here a file is scanned as a stream (`file_signatures`, what
`signatures.scan_file` returns, one at a time) and the first `SAMPLES_PER_KEY` signatures of each
(kind, rank, host, source, the pid and rank the message names, message shape) become rows as
before; each later one only adds to its first row's `count` and moves its `last_line_number`.
The shape is the text with numbers and hex addresses blanked, so "seq 1041" and "seq 1042" are
one message. At most `MAX_ROWS` rows are kept in all, the rest counted and said in one warning.

Rows that absorbed repeats carry `count` (the occurrences the row stands for: its own and the
later ones not kept, so the counts of a key's rows add up to its occurrences) and `last_line_number`; other rows are exactly as before, so the rules see the same rows for any log
without more than `SAMPLES_PER_KEY` repeats of one message.

Typical use:
    rows = SignatureRows(ev.signature_rows)
    rows.add_all(file_signatures(path), source=str(path), host=None)
    ev.warnings += rows.finish_source(str(path))
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from grpo_doctor.logs.lines import iter_chunks
from grpo_doctor.logs.signatures import LineScanner, Signature

SAMPLES_PER_KEY = 20  # as watch's live scan keeps per (kind, rank)
MAX_ROWS = 20_000  # a row holds up to 4,000 characters of text: tens of MB at most
_SHAPE_CHARS = 300
_NUMBERS = re.compile(r"0x[0-9a-fA-F]+|\d+")


def file_signatures(path: str | Path) -> Iterator[Signature]:
    """The signatures `scan_file(path)` returns, as they are found (not sorted by line), in memory
    bounded by the scanner's state rather than by the number of signatures."""
    scanner = LineScanner()
    found: list[Signature] = []
    for chunk in iter_chunks(path):
        scanner.feed_chunk(chunk, found)
        yield from found
        found.clear()
    yield from scanner.close()


class SignatureRows:
    """Appends aggregated rows to `rows` (the Evidence's `signature_rows`)."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows
        self._first: dict[tuple, dict[str, Any]] = {}  # key -> its first row
        self._kept: dict[tuple, int] = {}  # key -> rows kept for it
        self._dropped: dict[str, int] = {}  # source -> signatures past MAX_ROWS
        self._start: dict[str, int] = {}  # source -> index of its first row (sorted by line when finished)

    def add_all(self, signatures: Iterable[Signature], source: str, host: str | None) -> list[str]:
        """Adds a file's signatures; returns the warnings to give (none unless rows ran out)."""
        self._start.setdefault(source, len(self.rows))
        try:
            for sig in signatures:
                self.add(sig, source, host)
        finally:  # a file that could not be read to its end keeps the rows found before
            warnings = self.finish_source(source)
        return warnings

    def add(self, sig: Signature, source: str, host: str | None) -> None:
        fields = sig.fields if isinstance(sig.fields, dict) else {}
        key = (sig.kind, sig.rank, host, source, _hashable(fields.get("rank")), _hashable(fields.get("pid")),
               _NUMBERS.sub("#", sig.text[:_SHAPE_CHARS]))
        kept = self._kept.get(key, 0)
        if kept >= SAMPLES_PER_KEY:
            first = self._first[key]
            first["count"] = first.get("count", 1) + 1
            first["last_line_number"] = max(first.get("last_line_number", 0), sig.line_number)
            return
        if len(self.rows) >= MAX_ROWS:
            self._dropped[source] = self._dropped.get(source, 0) + 1
            return
        row = {"kind": sig.kind, "rank": sig.rank, "host": host, "source": source,
               "line_number": sig.line_number, "text": sig.text, "fields": sig.fields}
        self.rows.append(row)
        self._kept[key] = kept + 1
        self._first.setdefault(key, row)

    def finish_source(self, source: str) -> list[str]:
        """Sorts the source's rows by line, as `scan_file` returns them; the warning when rows ran out."""
        start = self._start.pop(source, None)
        if start is not None:
            self.rows[start:] = sorted(self.rows[start:], key=_line_number)
        dropped = self._dropped.pop(source, 0)
        if not dropped:
            return []
        return [f"{source}: {dropped} failure message(s) past the first {MAX_ROWS} distinct ones were not kept "
                "(counted only); the findings rest on the ones kept"]


def _line_number(row: dict[str, Any]) -> int:
    return row["line_number"]


def _hashable(value: Any) -> Any:
    return value if isinstance(value, str | int | float | type(None)) else repr(value)[:100]
