"""The keyword pre-check (`detectors.KEYWORDS`) over the raw bytes of a whole chunk of a file.

`detectors.is_hot` tests every line for each keyword. `scan_file` instead searches a chunk of a
file (256 KiB) at once and feeds the scanner only the lines from a hit on. One `bytes.find` pass
per keyword would still cost about 0.6 ns a byte, 10 ns for all 17 (under 100 MB/s before any
other work), so each keyword is found from a fairly rare byte it holds, its anchor: `bytes.find`
(memchr) skips to the anchor's next occurrence, then a pattern that starts with the keyword from
its anchor on makes `re` look for the anchor in a tight C loop (about 3 GB/s) and check the rest
of the literal, then a lookbehind for the keyword's start, only where the anchor occurs.
Keywords with the same anchor share one pass. A keyword without one would be searched whole
with `bytes.find` (none is: see RARE_BYTES).

A hit is exactly a keyword's occurrence: keywords are ASCII, and UTF-8 decoding (with
"replace") neither makes nor breaks a run of ASCII bytes, so `is_hot(line)` is true exactly
when the line's bytes hold a hit.

Typical use:
    hits = KeywordHits(chunk)
    offset = hits.next_from(0)  # where the first keyword is (len(chunk) when there is none)
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from grpo_doctor.logs.detectors import KEYWORDS

# A keyword's anchor is the first of these bytes it holds: bytes rare in training logs
# (counted over the benchmark's log and tests/data), then "C" and "k", each shared by several
# keywords (NCCL WARN, NCCL error, Root Cause; Traceback, ocket, blocks, took), then "h" for
# atchdog, then "D" (DistStoreError, ActorDiedError, EngineDeadError), "H" (Heartbeat monitor)
# and "*" ("*** SIGABRT received ..."). A pass costs ~0.35 ns a byte, more than a fairly common
# anchor adds, so few passes with anchors such as "k" ("[rankN]:" has one) beat more with rarer
# ones (docs/benchmarks.md); a keyword without an anchor would cost a whole pass of its own, so
# detectors.KEYWORDS spells every keyword with one (a test checks).
RARE_BYTES = b"jzxyCKFkhDH*"

Search = Callable[[bytes, int], int]  # (chunk, offset) -> offset of the next hit, or -1


def build_searches(keywords: Iterable[str]) -> tuple[Search, ...]:
    """One search per anchor (for the keywords it anchors) and one per keyword without an anchor."""
    anchored: dict[int, list[bytes]] = {}
    whole: list[bytes] = []
    for keyword in keywords:
        raw = keyword.encode("ascii")
        anchor = next((byte for byte in RARE_BYTES if byte in raw), None)
        if anchor is None:
            whole.append(raw)
            continue
        at = raw.index(anchor)
        # The keyword from its anchor on first (re searches a literal prefix fastest), then a
        # lookbehind for the whole keyword.
        lookbehind = b"(?<=" + re.escape(raw) + b")" if at else b""
        anchored.setdefault(anchor, []).append(re.escape(raw[at:]) + lookbehind)
    searches = [_regex_search(bytes([anchor]), re.compile(b"|".join(alts))) for anchor, alts in anchored.items()]
    return (*searches, *(_find_search(raw) for raw in whole))


def _regex_search(anchor: bytes, pattern: re.Pattern[bytes]) -> Search:
    def search(data: bytes, pos: int) -> int:
        start = data.find(anchor, pos)  # memchr: 3-4x faster than re over a stretch without the anchor
        if start < 0:
            return -1
        m = pattern.search(data, start)
        return -1 if m is None else m.start()
    return search


def _find_search(raw: bytes) -> Search:
    def search(data: bytes, pos: int) -> int:
        return data.find(raw, pos)
    return search


SEARCHES = build_searches(KEYWORDS)


class KeywordHits:
    """The keywords' hits in one chunk, in order: each search runs again only once passed."""

    def __init__(self, data: bytes, searches: tuple[Search, ...] = SEARCHES) -> None:
        self._data = data
        self._searches = searches
        self._next = [-1] * len(searches)  # each search's next hit; -1: not searched yet

    def next_from(self, pos: int) -> int:
        """The offset of a hit at or after `pos` with none before it, or len(data) when none is left.
        `pos` must not go back. A hit's offset is inside its keyword (at its anchor)."""
        data, nexts, end = self._data, self._next, len(self._data)
        for i, at in enumerate(nexts):
            if at < pos:
                found = self._searches[i](data, pos)
                nexts[i] = end if found < 0 else found
        return min(nexts, default=end)
