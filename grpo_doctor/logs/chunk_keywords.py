"""The keyword pre-check (`detectors.KEYWORDS`) over the raw bytes of a whole chunk of a file.

`detectors.is_hot` tests every line for each keyword. `scan_file` instead searches a chunk of a
file (256 KiB) at once and feeds the scanner only the lines from a hit on. Two engines give the
same hits (a test compares them on every fixture and the corpus):

- hyperscan, when it is installed (a dependency of the package; logs/ itself needs only the
  stdlib): all keywords in one pass over the chunk, about 1.2 GB/s on the benchmark's log against
  0.2 GB/s for the stdlib engine (docs/benchmarks.md, "Raw logs against grep"). Every match is
  collected in that pass; `next_from` then only walks the sorted offsets.
- the stdlib `re`: each keyword is found from a fairly rare byte it holds, its anchor:
  `bytes.find` (memchr) skips to the anchor's next occurrence, then a pattern that starts with the
  keyword from its anchor on makes `re` look for the anchor in a tight C loop (about 3 GB/s) and
  check the rest of the literal, then a lookbehind for the keyword's start, only where the anchor
  occurs. Keywords with the same anchor share one pass. A keyword without one would be searched
  whole with `bytes.find` (none is: see RARE_BYTES).

`GRPO_DOCTOR_KEYWORD_ENGINE=re` in the environment (read at import) keeps the stdlib engine even
where hyperscan is installed: to compare the two, or to step around a broken build of it.

A hit is exactly a keyword's occurrence: keywords are ASCII or whole UTF-8 characters (the zh_CN
shell's "已杀死"), and UTF-8 decoding (with "replace") neither makes nor breaks a run of ASCII
bytes or of valid multi-byte characters (an invalid byte before one is replaced on its own: a
lead byte is never a continuation byte), so `is_hot(line)` is true exactly when the line's bytes
hold a hit.

Typical use:
    hits = KeywordHits(chunk)
    offset = hits.next_from(0)  # where the first keyword is (len(chunk) when there is none)
"""
from __future__ import annotations

import os
import re
import threading
from bisect import bisect_left
from collections.abc import Callable, Iterable

from grpo_doctor.logs.detectors import KEYWORDS

# A keyword's anchor is the first of these bytes it holds: bytes rare in training logs
# (counted over the benchmark's log and tests/data), then "C" and "k", each shared by several
# keywords (NCCL WARN, NCCL error, Root Cause; Traceback, ocket, blocks, took), then "h" for
# atchdog, then "D" (DistStoreError, ActorDiedError, EngineDeadError), "H" (Heartbeat monitor)
# and "*" ("*** SIGABRT received ..."), and 0x9D, the middle byte of "杀" (E6 9D 80) for the zh_CN
# shell's "已杀死": a pass of memchr over an ASCII log that finds nothing. A pass costs ~0.35 ns a byte, more than a fairly common
# anchor adds, so few passes with anchors such as "k" ("[rankN]:" has one) beat more with rarer
# ones (docs/benchmarks.md); a keyword without an anchor would cost a whole pass of its own, so
# detectors.KEYWORDS spells every keyword with one (a test checks).
RARE_BYTES = b"jzxyCKFkhDH*\x9d"

Search = Callable[[bytes, int], int]  # (chunk, offset) -> offset of the next hit, or -1
ENGINE_VARIABLE = "GRPO_DOCTOR_KEYWORD_ENGINE"


def build_searches(keywords: Iterable[str]) -> tuple[Search, ...]:
    """One search per anchor (for the keywords it anchors) and one per keyword without an anchor."""
    anchored: dict[int, list[bytes]] = {}
    whole: list[bytes] = []
    for keyword in keywords:
        raw = keyword.encode("utf-8")
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


class HyperscanKeywords:
    """All `keywords` compiled into one hyperscan database (literals, block mode: a few ms)."""

    def __init__(self, keywords: Iterable[str]) -> None:
        import hyperscan

        raw = [keyword.encode("utf-8") for keyword in keywords]
        self._new_scratch = hyperscan.Scratch
        self._db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        self._db.compile(expressions=raw, ids=list(range(len(raw))), elements=len(raw), literal=True)
        # A scan releases the GIL and needs scratch space no other scan is using at the same time
        # (watch scans each stream's output in a thread of its own): one scratch per thread.
        self._local = threading.local()

    def hit_offsets(self, data: bytes) -> list[int]:
        """The offset of the last byte of every keyword occurrence in `data`, ascending."""
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = self._new_scratch(self._db)
        ends: list[int] = []
        append = ends.append
        # hyperscan reports each match at its end, in order of end.
        self._db.scan(data, match_event_handler=lambda _id, _start, end, _flags, _ctx: append(end - 1),
                      scratch=scratch)
        return ends


def _load_hyperscan() -> HyperscanKeywords | None:
    if os.environ.get(ENGINE_VARIABLE, "").strip().lower() == "re":
        return None
    try:
        return HyperscanKeywords(KEYWORDS)
    except Exception:  # noqa: BLE001 - not installed, no wheel for this CPU, a broken build: the stdlib engine
        return None


HYPERSCAN = _load_hyperscan()
ENGINE = "re" if HYPERSCAN is None else "hyperscan"


class KeywordHits:
    """The keywords' hits in one chunk, in order. With explicit `searches`, or without hyperscan,
    each stdlib search runs again only once passed; else one hyperscan pass lists every hit."""

    def __init__(self, data: bytes, searches: tuple[Search, ...] | None = None,
                 engine: HyperscanKeywords | None = HYPERSCAN) -> None:
        self._data = data
        self._end = len(data)
        self._searches = SEARCHES if searches is None else searches
        self._next = [-1] * len(self._searches)  # each search's next hit; -1: not searched yet
        self._listed: list[int] | None = None
        if searches is None and engine is not None:
            self._listed = engine.hit_offsets(data)
            self._at = 0  # index of the first listed hit not yet passed

    def next_from(self, pos: int) -> int:
        """The offset of a hit at or after `pos` with none before it, or len(data) when none is left.
        `pos` must not go back. A hit's offset is inside its keyword (at its anchor, or its last
        byte with hyperscan); `pos` is a line's start in every use, so both name the same line."""
        listed = self._listed
        if listed is not None:
            if self._at < len(listed) and listed[self._at] < pos:
                self._at = bisect_left(listed, pos, self._at)
            return listed[self._at] if self._at < len(listed) else self._end
        data, nexts, end = self._data, self._next, self._end
        for i, at in enumerate(nexts):
            if at < pos:
                found = self._searches[i](data, pos)
                nexts[i] = end if found < 0 else found
        return min(nexts, default=end)
