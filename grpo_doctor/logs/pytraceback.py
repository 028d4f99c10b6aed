"""Python tracebacks read line by line from one stream, from `Traceback (most recent call last):`
to the exception line (`RuntimeError: message`).

Frames (`  File "x.py", line 3, in f`) and their source lines are told from the exception line
by indentation: the exception line is indented less than the frames, which also reads a traceback
nested inside torchrun's error block (frames at 4 spaces, exception at 2). Lines from other
processes that interleave in an unprefixed stream are skipped while they cannot be the exception
line (an exception line is `Name: message` or a bare `...Error`-like name). Memory is bounded: only
the last `MAX_FRAMES` frames are kept, however deep the recursion. A paste that starts after the
`Traceback` line begins at its first frame (`partial`). `parse_collapsed` reads a traceback a
collector squeezed onto one line.

Typical use:
    tb = TracebackState(partial=False)
    status = tb.offer('  File "train.py", line 88, in <module>')   # CONSUMED
    status = tb.offer("RuntimeError: boom")                        # FINISHED
    tb.fields(rank=3)  # {"exc_type": "RuntimeError", "message": "boom", "frames": ["train.py:88 in <module>"], ...}
"""
from __future__ import annotations

import re
from collections import deque
from typing import Any

HEADER = "Traceback (most recent call last):"
MAX_FRAMES = 20
MAX_NOISE_LINES = 200  # lines that fit no traceback shape before one is given up as cut off
CONSUMED, FINISHED, NOT_MINE = "consumed", "finished", "not-mine"

FRAME = re.compile(r'^(\s*)File "(.+?)", line (\d+)(?:, in (.+?))?\s*$')
_FRAME_ANY = re.compile(r'File "(.+?)", line (\d+)(?:, in ([^\s]+))?')
_EXCEPTION = re.compile(r"^((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:\([\w.]+\))?)(?::(?: (.*))?)?$")
_EXCEPTION_SUFFIXES = ("Error", "Exception", "Interrupt", "Exit", "Warning", "Failure", "Iteration", "Timeout")
_COLLAPSED_EXCEPTION = re.compile(
    r"(?:^|\s)((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit|Failure|Timeout)(?:\([\w.]+\))?):\s*(.*)$"
)


def exception_name(line: str) -> tuple[str, str | None] | None:
    """(type, message) when `line` (unindented) reads as an exception line, else None."""
    m = _EXCEPTION.match(line)
    if m is None:
        return None
    name, has_colon = m.group(1), ":" in line[len(m.group(1)):len(m.group(1)) + 1]
    base = name.split("(")[0]
    if "." in base or base.endswith(_EXCEPTION_SUFFIXES) or (has_colon and base[:1].isupper() and base != base.title()):
        return name, (m.group(2) or "").strip() or None
    return None


class TracebackState:
    """One traceback of one stream being read; `offer` each of that stream's lines."""

    __slots__ = ("partial", "frames", "num_frames", "exc_type", "message", "exception_line", "_file_indent",
                 "_noise", "last_line_index")

    def __init__(self, partial: bool, last_line_index: int = 0) -> None:
        self.partial = partial
        self.frames: deque[str] = deque(maxlen=MAX_FRAMES)
        self.num_frames = 0
        self.exc_type: str | None = None
        self.message: str | None = None
        self.exception_line = ""
        self._file_indent: int | None = None
        self._noise = 0
        self.last_line_index = last_line_index

    def offer(self, text: str) -> str:
        """CONSUMED (a frame or source line), FINISHED (the exception line: read `fields()`; the
        line may say more, e.g. an OOM, so scan it too) or NOT_MINE (another process's line; the
        traceback is given up after MAX_NOISE_LINES of those, see `given_up`)."""
        stripped = text.lstrip()
        indent = len(text) - len(stripped)
        if not stripped:
            return CONSUMED
        frame = FRAME.match(text)
        if frame:
            if self._file_indent is None:
                self._file_indent = len(frame.group(1))
            self.add_frame(frame.group(2), frame.group(3), frame.group(4))
            return CONSUMED
        if self._file_indent is not None and indent > self._file_indent:
            return CONSUMED  # the frame's source line, its ^^^^ markers, or locals
        if stripped.startswith("[Previous line repeated"):
            return CONSUMED
        if self._file_indent is None or indent < self._file_indent:
            found = exception_name(stripped)
            if found:
                self.exc_type, self.message = found
                self.exception_line = stripped
                return FINISHED
        self._noise += 1
        return NOT_MINE

    @property
    def given_up(self) -> bool:
        return self._noise > MAX_NOISE_LINES

    def add_frame(self, filename: str, line: str, function: str | None) -> None:
        self.frames.append(f"{filename}:{line} in {function or '?'}")
        self.num_frames += 1

    def fields(self, rank: int | None) -> dict[str, Any]:
        return {"exc_type": self.exc_type, "message": self.message, "frames": list(self.frames),
                "num_frames": self.num_frames, "rank": rank, "partial": self.partial}


def parse_collapsed(text: str) -> TracebackState | None:
    """A whole traceback on one line (`Traceback (most recent call last): File "x.py", line 3, in f
    g() ValueError: bad`), or None when the line holds no frame after the header."""
    start = text.find(HEADER)
    frames = list(_FRAME_ANY.finditer(text, start + len(HEADER)))
    if start < 0 or not frames:
        return None
    tb = TracebackState(partial=False)
    for f in frames:
        tb.add_frame(f.group(1), f.group(2), f.group(3))
    tail = text[frames[-1].end():]
    m = _COLLAPSED_EXCEPTION.search(tail)
    if m:
        tb.exc_type, tb.message = m.group(1), m.group(2).strip() or None
        tb.exception_line = tail[m.start(1):].strip()
    return tb
