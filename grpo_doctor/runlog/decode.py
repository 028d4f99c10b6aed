"""Decoding a rank file's lines into JSON values, exactly as json reads them: orjson where it gives
json's answer, json where not. The decoder (decoder.py) judges the values against the schema.

Typical use:
    value = decode_line_fast(line) if not may_hold_long_int(line) else json_loads_line(line)   # ValueError
    with paused_gc():                                                         # millions of records to build
        ...
"""
from __future__ import annotations

import contextlib
import gc
import json
import re
from collections.abc import Callable, Iterator
from typing import Any

orjson_loads: Callable[[bytes], Any] | None
try:  # a dependency, yet optional here: without it lines go through the stdlib json (3x slower)
    from orjson import loads as orjson_loads
except ImportError:  # pragma: no cover - orjson has wheels for every platform we support
    orjson_loads = None

# orjson reads an integer beyond 64 bits as a float, json as an int: a line with a run of 19 digits
# (the shortest such integer) not after a decimal point is decoded by json alone.
_DIGITS_AND_POINTS = bytes(48 if 48 <= c <= 57 else c if c == 46 else 32 for c in range(256))  # digits "0"
_LONG_DIGIT_RUN = b"0" * 19


# The C scanner json.loads ends in, without its per-call checks (set by JSONDecoder.__init__; typeshed omits it).
_scan_json = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def decode_line_fast(line: bytes):
    """`json.loads(line)` by orjson (3x faster) where it gives the same value, but for an integer beyond
    64 bits, which comes back a float (`may_hold_long_int` says which lines need `json_loads_line`).

    orjson refuses what json accepts beyond the standard (bare NaN and Infinity, which sinks before
    strict JSON wrote for a diverged loss; lone surrogates; a BOM), so a line it refuses is json's to judge, and errors
    (what counts as a bad line) stay json's own.
    """
    if orjson_loads is not None:
        try:
            return orjson_loads(line)
        except ValueError:
            pass
    return json_loads_line(line)


def json_loads_line(line: bytes):
    """`json.loads(line)`, a third faster for lines as the sink writes them (UTF-8, starting `{"`).

    json.loads on bytes first guesses the encoding (always UTF-8 for a line starting `{"`) and
    skips whitespace with a regex; at 2 M records that overhead is several seconds. Anything the
    short path does not accept exactly as json.loads would goes through json.loads itself, so
    errors (and what counts as a bad line) are json's own.
    """
    try:
        if line.startswith(b'{"'):
            try:
                text = line.decode("utf-8", "surrogatepass")
                value, end = _scan_json(text, 0)
                if end == len(text) or not text[end:].strip(" \t\n\r"):  # json's whitespace, nothing else
                    return _without_lone_surrogates(value, line)
            except (ValueError, StopIteration):
                pass
        return _without_lone_surrogates(json.loads(line), line)
    except RecursionError:  # JSON nested past the interpreter's limit (a few KB of "[[[[..." suffices)
        raise ValueError("JSON nested too deeply") from None


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")  # escaped, or raw bytes (surrogatepass)
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _without_lone_surrogates(value, line: bytes):
    """json decodes an escaped lone surrogate (a cut emoji, garbage) to a string no UTF-8 writer
    takes (pyarrow, the HTML report): U+FFFD replaces it, and the record is kept."""
    if not _SURROGATE_ESCAPE.search(line):  # the usual case: one regex scan of a line json refused
        return value
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_without_lone_surrogates(v, line) for v in value]
    if isinstance(value, dict):
        return {_without_lone_surrogates(k, line): _without_lone_surrogates(v, line) for k, v in value.items()}
    return value


def may_hold_long_int(text: bytes) -> bool:
    """Whether `text` has a run of 19 digits that is no fraction (0.0007131951411119577 has one)."""
    marked = text.translate(_DIGITS_AND_POINTS)
    start = marked.find(_LONG_DIGIT_RUN)
    while start >= 0:
        if start == 0 or marked[start - 1] != 46:  # not after ".": an integer, or digits in a string
            return True
        start = marked.find(_LONG_DIGIT_RUN, start + len(_LONG_DIGIT_RUN))
    return False


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """No cyclic garbage collection inside: for building millions of objects that hold no cycles.

    The collector runs every few hundred allocations and its older generations walk every object
    built so far, again and again while a big run loads: a quarter of the load time. Records and
    table rows have no reference cycles, so nothing waits for it; it resumes as it was.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
