"""One rank's event log as read back, and a run's: the questions every part asks of them (the
latest header, the open phase, the last step, how the attempt ended), answered from an index.

Typical use:
    log = run.ranks[3]
    log.header.host, log.last_step, log.open_path, log.end, log.errors
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, cast

from grpo_doctor.schema import End, Error, Header, Memory, PhaseBegin, PhaseEnd, Record, Step, UnknownRecord
from grpo_doctor.schema.field_checks import sane_world_size

if TYPE_CHECKING:  # rank_tables.py and decoder.py build on this module
    from grpo_doctor.runlog.rank_tables import RankTables

if TYPE_CHECKING:
    pass


@dataclass
class RankLog:
    """Everything one rank file holds, in file order.

    `records` is appended to or replaced, never edited in place: the questions below are answered
    from an index of the few records that matter (headers, ends, errors, the last step, the open
    phases), built in one pass and rebuilt when the list is replaced or grows. A run of 64 ranks x
    2,000 steps holds 2 M records, and the report asks these questions many times per rank.

    Read by the decoder (decoder.py), the phase and memory records are in `tables` instead of
    `records`; the answers below are the same either way, and `of_kind` refuses those kinds then
    rather than answer "none".
    """

    rank: int
    path: Path
    records: list[Record | UnknownRecord] = field(default_factory=list)
    num_bad_lines: int = 0
    first_bad_line: int | None = None
    first_bad_reason: str | None = None  # what was wrong with the first bad line, when known
    truncated_tail: bool = False  # the last line had no newline: the process died mid-write
    sampled: bool = False  # only part of a big file was read (window.py): line numbers are byte offsets + 1
    # Regions of a file read by window given up: no newline within MAX_LINE_BYTES (garbage, a hole of
    # NUL bytes), or a last line not finished within the read's allowance (window.region_lines).
    num_damaged_regions: int = 0
    first_damaged_offset: int | None = None
    pids: set[int] = field(default_factory=set)
    tables: RankTables | None = None
    _index: _RecordIndex | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def headers(self) -> list[Header]:
        return [cast(Header, self.records[i]) for i in self._indexed().header_positions]

    @property
    def header(self) -> Header | None:
        """The latest header: the one describing the last attempt of this rank."""
        positions = self._indexed().header_positions
        return cast(Header, self.records[positions[-1]]) if positions else None

    def tabled(self) -> RankTables:
        """`tables`, for a log read by runlog/decoder.py (which sets them before any line)."""
        if self.tables is None:
            raise ValueError(f"{self.path}: read without tables (not by decoder.read_rank_file)")
        return self.tables

    def of_kind(self, cls: type) -> list:
        if self.tables is not None and cls in _TABLED_KINDS:
            raise ValueError(f"{cls.__name__} records of rank {self.rank} are in its tables (log.tables), "
                             "not in its records")
        return [r for r in self.records if isinstance(r, cls)]

    @property
    def open_path(self) -> str | None:
        """Phase path still open at the end of the log (where a hung or killed rank stopped)."""
        if self.tables is not None:
            return self.tables.open_path
        return self._indexed().open_path

    @property
    def last_step(self) -> int | None:
        last = self._indexed().last_step
        return last.step if last is not None else None

    @property
    def last_record(self) -> Record | UnknownRecord | None:
        if self.tables is not None:
            return self.tables.last_record
        return self.records[-1] if self.records else None

    @property
    def host(self) -> str | None:
        """The latest header's host, else the first record's (a file whose header was lost)."""
        if self.header is not None:
            return self.header.host
        if self.tables is not None:
            return self.tables.first_host
        first = next((r for r in self.records if isinstance(r, Record)), None)
        return first.host if first is not None else None

    @property
    def end(self) -> End | None:
        """How the latest attempt ended; None while it runs, or when it was killed outright."""
        ends = self._indexed().attempt_ends
        return ends[-1] if ends else None

    @property
    def errors(self) -> list[Error]:
        """Errors of the latest attempt."""
        return list(self._indexed().attempt_errors)

    def count_bad_line(self, line_number: int, complete: bool, reason: str | None = None) -> None:
        """A line that is no record: counted, the first remembered; an unfinished last line is a
        process that died mid-write."""
        if not complete:
            self.truncated_tail = True
        self.num_bad_lines += 1
        if self.first_bad_line is None:
            self.first_bad_line, self.first_bad_reason = line_number, reason

    def count_damaged_region(self, offset_plus_one: int) -> None:
        """A region given up by the windowed read (window.DAMAGED_REGION at byte offset + 1)."""
        self.num_damaged_regions += 1
        if self.first_damaged_offset is None:
            self.first_damaged_offset = offset_plus_one - 1

    def absorb(self, other: RankLog) -> None:
        """Take in another file of the same rank (one directory per node, a rank restarted elsewhere):
        records merged in time order, tables one file after the other, the earlier file first."""
        if (self.tables is None) != (other.tables is None):
            raise ValueError("rank logs read by different readers cannot be merged")
        records = sorted(self.records + other.records, key=record_time)
        mine, theirs = self.tables, other.tables
        if mine is not None and theirs is not None:
            earlier_mine = _first_time(self) <= _first_time(other)
            self.tables = mine.followed_by(theirs, records) if earlier_mine else theirs.followed_by(mine, records)
        self.records = records
        self.num_bad_lines += other.num_bad_lines
        if self.first_bad_line is None:  # the other file's first bad line, where this one had none
            self.first_bad_line, self.first_bad_reason = other.first_bad_line, other.first_bad_reason
        self.num_damaged_regions += other.num_damaged_regions
        if self.first_damaged_offset is None:
            self.first_damaged_offset = other.first_damaged_offset
        self.pids |= other.pids
        self.sampled = self.sampled or other.sampled

    def _indexed(self) -> _RecordIndex:
        index = self._index
        if index is None or index.records is not self.records or index.length != len(self.records):
            index = self._index = _RecordIndex.of(self.records)
        return index


@dataclass(frozen=True)
class _RecordIndex:
    """RankLog's answers, from one pass over `records` (kept to tell when the list changed)."""

    records: list
    length: int
    header_positions: tuple[int, ...]
    attempt_ends: tuple[End, ...]  # since the last header
    attempt_errors: tuple[Error, ...]
    last_step: Step | None
    open_path: str | None

    @classmethod
    def of(cls, records: list) -> _RecordIndex:
        headers: list[int] = []
        ends: list[End] = []
        errors: list[Error] = []
        stack: list[str] = []
        last_step = None
        # The same logic as advance_open_phases, inlined: a call per record costs a second on 2 M records.
        for i, r in enumerate(records):
            if isinstance(r, PhaseBegin):
                stack.append(r.path)
            elif isinstance(r, PhaseEnd):
                while stack and stack.pop() != r.path:
                    pass
            elif isinstance(r, Step):
                last_step = r
            elif isinstance(r, Header):
                headers.append(i)
                stack.clear()
                ends.clear()
                errors.clear()
            elif isinstance(r, End):
                ends.append(r)
            elif isinstance(r, Error):
                errors.append(r)
        return cls(records=records, length=len(records), header_positions=tuple(headers), attempt_ends=tuple(ends),
                   attempt_errors=tuple(errors), last_step=last_step, open_path=stack[-1] if stack else None)


@dataclass
class RunLog:
    dirs: list[Path]
    ranks: dict[int, RankLog] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @property
    def world_size(self) -> int | None:
        """The largest world size the ranks' headers give, of those within MAX_WORLD_SIZE (a larger
        one is corruption, warned about, and must not size anything)."""
        sizes = {log.header.world_size for log in self.ranks.values() if log.header and sane_world_size(log.header)}
        return max(sizes) if sizes else None

    @property
    def missing_ranks(self) -> list[int]:
        size = self.world_size
        return [r for r in range(size) if r not in self.ranks] if size else []


def advance_open_phases(stack: list[str], record: Record | UnknownRecord) -> None:
    """Update the stack of open phase paths with one record, in file order."""
    if isinstance(record, Header):
        stack.clear()
    elif isinstance(record, PhaseBegin):
        stack.append(record.path)
    elif isinstance(record, PhaseEnd):
        # Pop to the matching begin: an exception may have skipped inner ends.
        while stack and stack.pop() != record.path:
            pass


_TABLED_KINDS = (PhaseBegin, PhaseEnd, Memory)


def _first_time(log: RankLog) -> float:
    return record_time(log.records[0]) if log.records else float("inf")


def record_time(record: Record | UnknownRecord) -> float:
    return record.t if isinstance(record, Record) else float(record.data.get("t") or 0.0)
