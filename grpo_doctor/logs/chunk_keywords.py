"""The keyword pre-check (`detectors.KEYWORDS`) over the raw bytes of a whole chunk of a file.

`detectors.is_hot` tests every line for each keyword. `scan_file` instead searches a chunk of
a megabyte at once and feeds the scanner only the lines from a hit on. One `bytes.find` pass
per keyword would still cost about 0.6 ns a byte, 10 ns for all 17 (under 100 MB/s before any
other work), so each keyword is found from its rarest byte: a pattern that starts with a literal
makes `re` look for the literal's first byte in a tight C loop (about 3 GB/s) and check the rest
of the literal, then a lookbehind for the keyword's start, only where that byte occurs.
Keywords with the same rarest byte share one pass. A keyword without a rare byte (torchrun's
field padding "      : ") is searched whole with `bytes.find`.

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

# Rarest first in training logs (byte counts over the benchmark's log and tests/data): "[rankN]:"
# prefixes make "k" common; each keyword is searched from the first of these it holds. A pass
# costs ~0.35 ns a byte plus ~0.1 us per occurrence of its first byte not followed by the rest.
RARE_BYTES = b"jqzxKLWFRTybhk"

Search = Callable[[bytes, int], int]  # (chunk, offset) -> offset of the next hit, or -1


def build_searches(keywords: Iterable[str]) -> tuple[Search, ...]:
    """One search per rare byte (for the keywords it anchors) and one per keyword without one."""
    anchored: dict[int, list[bytes]] = {}
    whole: list[bytes] = []
    for keyword in keywords:
        raw = keyword.encode("ascii")
        anchor = next((byte for byte in RARE_BYTES if byte in raw), None)
        if anchor is None:
            whole.append(raw)
            continue
        at = raw.index(anchor)
        # The literal first (re finds a literal prefix fastest), then what precedes the anchor.
        lookbehind = b"(?<=" + re.escape(raw) + b")" if at else b""
        anchored.setdefault(anchor, []).append(re.escape(raw[at:]) + lookbehind)
    searches: list[Search] = [_regex_search(re.compile(b"|".join(alts))) for alts in anchored.values()]
    return (*searches, *(_find_search(raw) for raw in whole))


def _regex_search(pattern: re.Pattern[bytes]) -> Search:
    def search(data: bytes, pos: int) -> int:
        m = pattern.search(data, pos)
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
        `pos` must not go back. A hit's offset is inside its keyword (at its rarest byte)."""
        data, nexts, end = self._data, self._next, len(self._data)
        for i, at in enumerate(nexts):
            if at < pos:
                found = self._searches[i](data, pos)
                nexts[i] = end if found < 0 else found
        return min(nexts, default=end)
