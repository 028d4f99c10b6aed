"""Failure signatures found in raw logs, line by line: live on a job's output or on whole files later.

`LineScanner.feed(line)` returns the signatures a line completes (see `kinds.FIELDS` for every
kind's fields). It is built for `grpo-doctor watch`, which feeds every line of a job's output:
a line that holds none of a few keywords costs a handful of substring tests and nothing else,
unless an open construct of some stream may continue in it. Constructs over several lines are
kept per stream (the line's prefixes, see `prefixes.split_prefix`), since ranks interleave: a
Python traceback (bounded memory), torchrun's ChildFailedError block, and messages a collector
wrapped or split (joined back with spaces, see `joiner`). A line a collector collapsed (literal
`\\n` escapes, or torchrun's block on one line) is cut back into its lines. `close()` finishes
what is still open (a traceback cut off by a kill) and keeps the scanner usable.

NCCL watchdog reports repeat: the timeout is printed, then again inside "Process group watchdog
thread terminated with exception: ..."; status lines come in two wordings at once. Those repeats
(same rank, same sequence number) give one signature. Other repeats (one per rank) are kept.

Typical use:
    scanner = LineScanner()
    for line in proc.stdout:
        for sig in scanner.feed(line):
            print(sig.kind, sig.rank, sig.fields)
    leftovers = scanner.close()
    scan_file("job.log")  # the same over a whole file, in bounded memory, searching its raw bytes
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_doctor.logs import exit_lines, gpu_faults, nccl_ras, torchrun
from grpo_doctor.logs.chunk_keywords import KeywordHits
from grpo_doctor.logs.detectors import JOIN_SPECS, detect, is_hot
from grpo_doctor.logs.joiner import Joined, Joiner
from grpo_doctor.logs.kinds import (
    ALL_KINDS,
    CHILD_FAILED,
    GPU_FAULT,
    NCCL_ERROR,
    NCCL_RAS,
    NCCL_TIMEOUT,
    NCCL_WATCHDOG_STATUS,
    PYTHON_TRACEBACK,
    WORKER_DIED,
    complete_fields,
)
from grpo_doctor.logs.lines import CHUNK_BYTES, iter_chunks, line_at
from grpo_doctor.logs.prefixes import split_prefix_tuple
from grpo_doctor.logs.pytraceback import CONSUMED, FINISHED, FRAME, HEADER, TracebackState, parse_collapsed
from grpo_doctor.logs.wraps import MAX_WRAP_LINES, WRAP_MIN_CHARS, glue, richer

__all__ = ["ALL_KINDS", "LineScanner", "Signature", "scan_file", "scan_text"]

_MAX_TEXT_CHARS = 4000
_JOIN_STALE_LINES = 64  # a wrapped message whose stream went quiet this long is finished as is
_STALE_LINES = 5000  # a traceback / block whose stream went quiet this long is given up
_MAX_SEEN = 100_000
# A paste from a terminal that padded each line to its width with spaces and lost the newlines:
# "    raise value<168 spaces>ray.exceptions.ActorDiedError: ...". Cut only where the text after
# the padding holds a keyword (a right-aligned source location, as Rich prints it, stays).
_PAD = " " * 24
_PADDING = re.compile(r"(?<=\S) {24,}(?=\S)")
# A prefixed line whose message is only c10d's rank tag ("[Rank 0]", "[PG 0 Rank") states nothing
# whatever its length: a paste wrapped at a narrow width put the rest of the message on the next line.
_RANK_TAG_ONLY = re.compile(r"\[(?:PG\b[^\]]{0,80}? )?Rank(?: \d+\]?)?$")


def _tagged_rank(previous: str) -> int | None:
    """The rank of the line before when it was only a prefix and c10d's rank tag: the line after it,
    bare, is the rest of that message (a paste wrapped at a narrow width)."""
    rank, _source, message = split_prefix_tuple(previous)
    tagged = rank is not None and len(message) < 100 and _RANK_TAG_ONLY.match(message.strip()) is not None
    return rank if tagged else None


@dataclass(frozen=True)
class Signature:
    """One failure signature: `line_number` (1-based) of its first line, `rank` (global rank
    when the log says it, else None), `text` (the message without prefixes, joined when it
    spanned lines, at most 4000 characters) and the kind's `fields`."""

    kind: str
    rank: int | None
    line_number: int
    text: str
    fields: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "rank": self.rank, "line_number": self.line_number, "text": self.text,
                "fields": copy.deepcopy(self.fields)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Signature:
        return cls(kind=data["kind"], rank=data.get("rank"), line_number=int(data["line_number"]),
                   text=data.get("text", ""), fields=copy.deepcopy(data.get("fields") or {}))


class LineScanner:
    """Finds signatures in a stream of log lines; see the module docstring."""

    def __init__(self) -> None:
        self._index = 0
        self._joiner = Joiner(JOIN_SPECS)
        self._tracebacks: dict[str, tuple[TracebackState, int | None, int]] = {}
        self._blocks: dict[str, torchrun.ChildFailedBlock] = {}
        self._ras: dict[str, nccl_ras.RasBlock] = {}  # NCCL RAS reports (ncclras output) being read, per stream
        self._seen: set[tuple[Any, ...]] = set()
        self._previous = ""  # the line before, raw: the first piece of a terminal-wrapped line
        self._wrap: tuple[str, int | None, str, int, int] | None = None  # (source, rank, text, index, pieces)
        self._raw_chars = 0  # the length of the line being read, prefixes included (a terminal wraps those too)
        self._raw_line = ""  # the line being read, prefixes included (a syslog prefix names the host)
        self._line_before = ""  # the line before it, raw (a pod's "Exit Code:" stands under its "Reason:")
        self._launcher_tb = False  # the traceback whose exception line is being read ran in a launcher

    def feed(self, line: str) -> list[Signature]:
        """The signatures `line` completes (the next line of the log; a trailing newline is fine)."""
        self._index += 1
        hot = is_hot(line)
        if not hot and not self._open():
            self._previous = line
            return []
        out: list[Signature] = []
        rank, source, message = split_prefix_tuple(line)
        previous, self._previous = self._previous, line
        self._raw_chars = len(line)
        self._raw_line = line
        self._line_before = previous
        bare = not source and len(message) == len(line.rstrip("\r\n"))  # no prefix at all: maybe a wrap's piece
        if bare and rank is None:
            rank = _tagged_rank(previous)
        if self._wrap is not None:
            if self._joiner.held:  # a message the joiner knows how to finish: its reading wins
                self._wrap = None
            elif self._continue_wrap(bare, message, out):
                return out
        if hot and bare and not self._open() and self._wrapped_from(previous, message, out):
            return out
        if hot and "\\n" in message:  # a collector escaped the newlines of a multi-line message
            for piece in message.replace('\\"', '"').split("\\n"):
                inner_rank, inner_source, inner_message = split_prefix_tuple(piece)
                # A piece may repeat the line's own prefix, or add one of its own.
                piece_source = source if source.endswith(inner_source) else source + inner_source
                self._route(piece_source, rank if inner_rank is None else inner_rank, inner_message, out)
        elif hot and torchrun.is_collapsed(message):
            self._blocks.setdefault(source, torchrun.ChildFailedBlock())
            for piece in torchrun.split_collapsed(message):
                self._route(source, rank, piece, out)
        elif hot and _PAD in message and (pieces := _padded_pieces(message)):
            for piece in pieces:  # lines a terminal padded to its width and a paste ran together
                self._route(source, rank, piece, out)
        else:
            self._route(source, rank, message, out)
        if self._index % 256 == 0:
            self._expire(out)
        return out

    def feed_chunk(self, chunk: bytes, out: list[Signature]) -> None:
        """`feed` for every line of `chunk` (whole lines of a file, see `lines.iter_chunks`),
        appending to `out`. While nothing is open, a line without a keyword only moves the line
        count on, so the keywords are searched in the chunk's bytes (see `chunk_keywords`) and
        only the lines from a hit to where nothing is open again are decoded and fed."""
        hits = KeywordHits(chunk)
        pos, size = 0, len(chunk)
        while pos < size:
            if not self._open():
                hit = hits.next_from(pos)
                if hit == size:
                    self._index += chunk.count(b"\n", pos) + (not chunk.endswith(b"\n"))
                    if pos < size:  # the next chunk's first line may continue this one's last
                        self._previous = line_at(chunk, chunk.rfind(b"\n", 0, size - 1) + 1)[0]
                    return
                line_start = max(pos, chunk.rfind(b"\n", pos, hit) + 1)
                skipped = chunk.count(b"\n", pos, line_start)
                self._index += skipped
                if skipped:  # the line before the hit: maybe the first piece of a wrapped line
                    self._previous = line_at(chunk, chunk.rfind(b"\n", 0, line_start - 1) + 1)[0]
                pos = line_start
            line, pos = line_at(chunk, pos)
            out.extend(self.feed(line))

    def close(self) -> list[Signature]:
        """Finish everything still open (end of the log); the scanner can go on being fed."""
        out: list[Signature] = []
        for joined in self._joiner.flush():
            self._scan_joined(joined, out)
        for source in list(self._blocks):
            self._emit_entries(self._blocks.pop(source).finish(), out)
        for source in list(self._ras):
            self._emit_entries(self._ras.pop(source).finish(), out, NCCL_RAS)
        for source in list(self._tracebacks):
            self._end_traceback(source, out)
        return sorted(out, key=_line_number)

    def _open(self) -> bool:
        """Whether a construct is open (a line without a keyword may then matter)."""
        return bool(self._joiner.held or self._tracebacks or self._blocks or self._ras or self._wrap)

    def _route(self, source: str, rank: int | None, text: str, out: list[Signature]) -> None:
        index = self._index
        if self._joiner.held:
            taken, joined = False, None
            if self._joiner.holds(source):
                taken, joined = self._joiner.offer(source, text, index)
            elif not source:  # a collector's wrap of a held line carries no prefix
                taken, joined = self._joiner.offer_adjacent(text, index)
            if joined is not None:
                self._scan_joined(joined, out)
            if taken:
                return
        block = self._blocks.get(source)
        if block is not None:
            taken, entries = block.offer(text, index)
            self._emit_entries(entries, out)
            if block.closed:
                del self._blocks[source]
            if taken:
                return
        ras = self._ras.get(source)
        if ras is not None:
            taken, entries = ras.offer(text, index)
            self._emit_entries(entries, out, NCCL_RAS)
            if ras.closed:
                del self._ras[source]
            if taken:
                return
        held = self._tracebacks.get(source)
        if held is not None:
            tb = held[0]
            status = tb.offer(text)
            tb.last_line_index = index
            if status == CONSUMED:
                return
            if status == FINISHED:  # an exception line: scan it whatever it holds
                self._launcher_tb = any(word in frame for frame in tb.frames for word in exit_lines.LAUNCHER_FRAMES)
                self._end_traceback(source, out)
                self._detect(source, rank, text, out)
                self._launcher_tb = False
                return
            if tb.given_up:
                self._end_traceback(source, out)
        if is_hot(text):
            self._detect(source, rank, text, out)

    def _detect(self, source: str, rank: int | None, text: str, out: list[Signature]) -> None:
        index = self._index
        if HEADER in text:
            collapsed = parse_collapsed(text)
            if collapsed is not None:
                self._emit(PYTHON_TRACEBACK, rank, index, collapsed.exception_line or text, collapsed.fields(rank), out)
                return
            self._end_traceback(source, out)  # a new traceback ends one left unfinished
            self._tracebacks[source] = (TracebackState(partial=False, last_line_index=index), rank, index)
            return
        if 'File "' in text and source not in self._tracebacks and FRAME.match(text):
            tb = TracebackState(partial=True, last_line_index=index)  # a paste that starts mid-traceback
            tb.offer(text)
            self._tracebacks[source] = (tb, rank, index)
            return
        if source not in self._ras and nccl_ras.opens_block(text):
            ras = self._ras[source] = nccl_ras.RasBlock()
            taken, entries = ras.offer(text, index)
            self._emit_entries(entries, out, NCCL_RAS)
            if taken:
                return
        if source not in self._blocks and torchrun.opens_block(text):
            block = self._blocks[source] = torchrun.ChildFailedBlock()
            taken, entries = block.offer(text, index)
            self._emit_entries(entries, out)
            if taken:
                return
        if not self._joiner.start(source, rank, text, index):
            before = len(out)
            self._detect_line(rank, text, index, out)
            if len(out) == before and max(len(text), self._raw_chars) >= WRAP_MIN_CHARS:
                self._wrap = (source, rank, text, index, 1)  # states nothing: maybe cut by a terminal

    def _continue_wrap(self, bare: bool, message: str, out: list[Signature]) -> bool:
        """Glue a line without prefix to the held first piece of a wrapped line; True when that
        made a signature (the line is used up)."""
        source, rank, text, index, pieces = self._wrap
        self._wrap = None
        if not bare or not message.strip():
            return False
        for joined in glue(text, message.rstrip()):
            found = detect(joined)
            if found:
                for kind, fields in found:
                    self._emit(kind, rank, index, joined, fields, out)
                return True
        if pieces < MAX_WRAP_LINES:
            self._wrap = (source, rank, text.rstrip() + message.rstrip(), index, pieces + 1)
        return False

    def _wrapped_from(self, previous: str, message: str, out: list[Signature]) -> bool:
        """Read `message` glued to the line before it when that prefixed line was the first piece
        of a terminal-wrapped message (see `wraps`); True when the glued reading said more."""
        if len(previous) < WRAP_MIN_CHARS or is_hot(previous):
            return False
        rank, _source, first = split_prefix_tuple(previous)
        if rank is None:
            return False
        alone = detect(message)
        for joined in glue(first, message.rstrip()):
            found = detect(joined)
            if richer(found, alone):
                for kind, fields in found:
                    self._emit(kind, rank, self._index - 1, joined, fields, out)
                return True
        return False

    def _detect_line(self, rank: int | None, text: str, index: int, out: list[Signature]) -> None:
        for kind, found in detect(text):
            self._emit(kind, rank, index, text, found, out)

    def _scan_joined(self, joined: Joined, out: list[Signature]) -> None:
        self._detect_line(joined.rank, joined.text, joined.line_index, out)

    def _emit(self, kind: str, rank: int | None, index: int, text: str, found: dict[str, Any] | None,
              out: list[Signature]) -> None:
        if found is None or not self._in_context(kind, found):
            return
        fields = complete_fields(kind, found)
        if kind == GPU_FAULT and fields["node"] is None and index == self._index:
            fields["node"] = gpu_faults.node_of(self._raw_line)  # the prefix, stripped before parsing, names it
        if kind == CHILD_FAILED and fields["rank"] is not None:
            rank = fields["rank"]  # the failed worker's rank, not the launcher's prefix
        elif kind == NCCL_WATCHDOG_STATUS and fields["timed_out_rank"] is not None:
            rank = fields["timed_out_rank"]  # told to dump by that rank's timeout: the timeout is that rank's
        elif rank is None and (kind != NCCL_ERROR or fields["pg"] in (None, 0) or fields["pg_desc"] == "default_pg"):
            rank = fields.get("rank")  # an NCCL error's rank in a subgroup is not the global rank
        key = _repeat_key(kind, rank, fields)
        if key is not None:
            if key in self._seen:
                return
            if len(self._seen) >= _MAX_SEEN:
                self._seen.clear()
            self._seen.add(key)
        out.append(Signature(kind, rank, index, text.strip()[:_MAX_TEXT_CHARS], fields))

    def _in_context(self, kind: str, found: dict[str, Any]) -> bool:
        """Whether an exit line that says a failure only in its context has it: a CalledProcessError under
        a launcher's traceback (or naming a launcher), a pod's "Exit Code:" under its "Reason:"."""
        if kind != WORKER_DIED:
            return True
        if found.get("launcher") is False and not self._launcher_tb:
            return False
        return not found.get("pod_line") or "Reason:" in self._line_before or "State:" in self._line_before

    def _emit_entries(self, entries: list[tuple[dict[str, Any], int, str]], out: list[Signature],
                      kind: str = CHILD_FAILED) -> None:
        for found, index, text in entries:
            self._emit(kind, None, index, text, found, out)

    def _end_traceback(self, source: str, out: list[Signature]) -> None:
        held = self._tracebacks.pop(source, None)
        if held is None:
            return
        tb, rank, index = held
        # Kept when it reached its exception line, or when it was cut off after a real start.
        if tb.exc_type is not None or (tb.num_frames and not tb.partial):
            self._emit(PYTHON_TRACEBACK, rank, index, tb.exception_line or HEADER, tb.fields(rank), out)

    def _expire(self, out: list[Signature]) -> None:
        for joined in self._joiner.expire(self._index, _JOIN_STALE_LINES):
            self._scan_joined(joined, out)
        cutoff = self._index - _STALE_LINES
        for source in [s for s, held in self._tracebacks.items() if held[0].last_line_index < cutoff]:
            self._end_traceback(source, out)
        for source in [s for s, block in self._blocks.items() if block.last_line_index < cutoff]:
            self._emit_entries(self._blocks.pop(source).finish(), out)
        for source in [s for s, ras in self._ras.items() if ras.last_line_index < cutoff]:
            self._emit_entries(self._ras.pop(source).finish(), out, NCCL_RAS)


def _padded_pieces(message: str) -> list[str] | None:
    """`message` cut at terminal padding before a piece that holds a keyword, or None."""
    pieces = _PADDING.split(message)
    if len(pieces) < 2 or not any(is_hot(piece) for piece in pieces[1:]):
        return None
    return pieces


def _repeat_key(kind: str, rank: int | None, fields: dict[str, Any]) -> tuple[Any, ...] | None:
    if kind == NCCL_TIMEOUT:
        return kind, rank, fields["rank"], fields["seq"], fields["op"], fields["timeout_ms"]
    if kind == NCCL_WATCHDOG_STATUS:
        return kind, rank, fields["rank"], fields["seq"], fields["last_enqueued"]
    return None


def scan_text(text: str) -> list[Signature]:
    """Every signature in `text`, in order of first line (lines split on "\\n" only, as in files)."""
    scanner = LineScanner()
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    out = [sig for line in lines for sig in scanner.feed(line)]
    return sorted(out + scanner.close(), key=_line_number)


def scan_file(path: str | Path, max_bytes: int | None = None, *, chunk_bytes: int = CHUNK_BYTES) -> list[Signature]:
    """Every signature in the file at `path`, read in chunks of whole lines in bounded memory (see
    `lines.iter_chunks`: long lines cut at 64 KiB, bad bytes replaced, content never raises); the
    same as feeding `LineScanner` every line. With `max_bytes`, only the lines that start in the
    file's first `max_bytes` bytes are read; line numbers stay true."""
    scanner = LineScanner()
    out: list[Signature] = []
    for chunk in iter_chunks(path, max_bytes, chunk_bytes=chunk_bytes):
        scanner.feed_chunk(chunk, out)
    return sorted(out + scanner.close(), key=_line_number)


def _line_number(sig: Signature) -> int:
    return sig.line_number
