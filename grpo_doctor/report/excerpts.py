"""Log excerpts around each failure signature, read in one bounded pass per file.

A signature found in a raw log carries its file and line: the excerpt is a few lines before and
after it, the signature's own line marked. Signatures watch found live were scanned from stdout
and stderr interleaved, so their line numbers point into no single file: their excerpt is the
signature's text. Lines are cut at `MAX_LINE_CHARS`, so a multi-megabyte line costs nothing.

Typical use:
    for excerpt in log_excerpts(evidence.signature_rows):
        print(excerpt["source"], excerpt["line_number"], excerpt["lines"])
"""
from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from grpo_doctor.schema.run_paths import WatchPaths
from grpo_doctor.schema.safe_read import open_regular

CONTEXT_LINES = 3
MAX_EXCERPTS = 40
MAX_LINE_CHARS = 400
READ_BYTES = 1 << 20


def log_excerpts(rows: Iterable[dict[str, Any]], context: int = CONTEXT_LINES,
                 max_excerpts: int = MAX_EXCERPTS) -> list[dict[str, Any]]:
    """[{"kind", "rank", "source", "line_number", "lines": [(number, text, is_hit)]}], in input order."""
    chosen = _one_per_kind_first(list(rows), max_excerpts)
    by_source: dict[str, set[int]] = {}
    for row in chosen:
        if _is_raw_log(row["source"]):
            by_source.setdefault(row["source"], set()).add(int(row["line_number"]))
    windows = {source: _read_windows(Path(source), hits, context) for source, hits in by_source.items()}
    out = []
    for row in chosen:
        lines = windows.get(row["source"], {}).get(int(row["line_number"]))
        if not lines:
            lines = [(row["line_number"], line[:MAX_LINE_CHARS], True) for line in str(row["text"]).splitlines()[:12]]
        out.append({"kind": row["kind"], "rank": row["rank"], "source": row["source"],
                    "line_number": row["line_number"], "lines": lines})
    return out


def _one_per_kind_first(rows: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """Up to `limit` rows, every kind represented before any kind gets a second excerpt."""
    firsts: list[dict[str, Any]] = []
    rest: list[dict[str, Any]] = []
    seen: set[Any] = set()
    for row in rows:
        (rest if row["kind"] in seen else firsts).append(row)
        seen.add(row["kind"])
    return (firsts + rest)[:limit]


def _is_raw_log(source: str) -> bool:
    return not WatchPaths.is_signatures_file(source)


def _read_windows(path: Path, hits: set[int], context: int) -> dict[int, list[tuple[int, str, bool]]]:
    """For each hit line number, the lines around it; one pass, lines read in bounded chunks."""
    last_needed = max(hits) + context
    before: deque[tuple[int, str]] = deque(maxlen=context)
    open_windows: dict[int, list[tuple[int, str, bool]]] = {}
    done: dict[int, list[tuple[int, str, bool]]] = {}
    try:
        with open_regular(path) as f:  # never a FIFO or a device (schema/safe_read.py)
            for number, line in enumerate(_bounded_lines(f), start=1):
                text = line.decode("utf-8", errors="replace").rstrip("\r\n")
                if number in hits:
                    open_windows[number] = [(n, t, False) for n, t in before]
                for hit, window in list(open_windows.items()):
                    window.append((number, text, number == hit))
                    if number >= hit + context:
                        done[hit] = open_windows.pop(hit)
                before.append((number, text))
                if number >= last_needed:
                    break
    except OSError:
        return {}
    return done | open_windows


def _bounded_lines(f) -> Iterable[bytes]:
    """Lines of a binary file, each at most MAX_LINE_CHARS bytes kept (the rest of a long line skipped)."""
    while True:
        line = f.readline(READ_BYTES)
        if not line:
            return
        if not line.endswith(b"\n"):
            while True:  # skip the remainder of an overlong line
                more = f.readline(READ_BYTES)
                if not more or more.endswith(b"\n"):
                    break
        yield line[:MAX_LINE_CHARS]
