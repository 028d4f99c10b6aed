"""Lines that a terminal (or a paste from one) broke at its width: a message split mid-word.

A terminal wraps a long line at a fixed column, wherever that falls: inside a word ("Watchdog
caught collective opera" / "tion timeout: WorkNCCL(SeqNum=4, ...) ran for 1800010 milliseconds
before ti" / "ming out."), inside an address or a sequence number. The pieces after the first carry
no prefix at all. Two ways back, both only where the pieces join into more than either says:
  - forward: a long line with a keyword that states nothing is held (`WrapState`); the next line,
    if it has no prefix, is glued on (without a space: the break is mid-word; then with one) and
    read again, up to `MAX_WRAP_LINES` pieces;
  - backward: a line without a prefix that states something, right after a long prefixed line
    that held no keyword ("[rank6]:[E429 ...] [PG ID 0 ... Rank 6] ProcessGroupNCCL'" / "s watchdog
    got stuck for 480 seconds ..."), is read glued to that line; the glued reading wins only when
    its fields say strictly more (e.g. the rank and process group the first piece named).
Log collectors that wrap at word boundaries and repeat nothing are `joiner`'s business.

Typical use:
    text = glue(held_text, next_message)       # candidates: held_text + next, held_text + " " + next
    richer(detect(glued), detect(alone))       # True when the glued reading says more
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

WRAP_MIN_CHARS = 80  # a terminal narrower than this is rare; shorter lines are whole lines
MAX_WRAP_LINES = 4


def glue(first: str, rest: str) -> Iterator[str]:
    """The ways `rest` may continue `first`: mid-word first, then at a space."""
    first = first.rstrip()
    yield first + rest
    if not rest[:1].isspace():
        yield first + " " + rest


def richness(found: list[tuple[str, dict[str, Any]]]) -> int:
    """How much a reading states: its signatures, and their fields that are not None."""
    return sum(1 + sum(value is not None for value in fields.values()) for _kind, fields in found)


def richer(glued: list[tuple[str, dict[str, Any]]], alone: list[tuple[str, dict[str, Any]]]) -> bool:
    return richness(glued) > richness(alone)
