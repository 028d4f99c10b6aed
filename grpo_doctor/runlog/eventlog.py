"""Reads a run's event log back: every rank file of one run directory or of several (one per node).

Damaged input is expected, not exceptional: a rank killed mid-write leaves a truncated last
line, log collectors splice in garbage, a node's directory may be missing. The reader skips
what it cannot parse, counts it, and says so in `RunLog.warnings`; it never raises on a bad
file, only on a path that does not exist or holds no run at all (`RunDirError`).

Typical use:
    run = load_run(["runs/job-17"])            # or one directory per node
    for rank, log in sorted(run.ranks.items()):
        print(rank, log.header.host, log.last_step, log.open_path)
    for w in run.warnings:
        print("warning:", w)
"""
from __future__ import annotations

import contextlib
import gc
import json
import os
import re
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from grpo_doctor.schema import (
    SCHEMA_VERSION,
    BadRecord,
    End,
    Error,
    Header,
    PhaseBegin,
    PhaseEnd,
    Record,
    RunPaths,
    Step,
    UnknownRecord,
    record_from_dict,
)
from grpo_doctor.schema.errors import DoctorError
from grpo_doctor.schema.field_checks import MAX_WORLD_SIZE, sane_world_size, wrong_field
from grpo_doctor.schema.ranks import format_ranks

try:  # a dependency, yet optional here: without it lines go through the stdlib json (3x slower)
    from orjson import loads as orjson_loads
except ImportError:  # pragma: no cover - orjson has wheels for every platform we support
    orjson_loads = None

RANK_FILE_PATTERN = re.compile(r"rank-(\d+)\.jsonl$")
# A line longer than this is garbage (a record is a few KiB at most); reading stops holding it.
MAX_LINE_BYTES = 16 * 1024 * 1024
READ_BLOCK_BYTES = 256 * 1024
# orjson reads an integer beyond 64 bits as a float, json as an int: a line with a run of 19 digits
# (the shortest such integer) not after a decimal point is decoded by json alone.
_DIGITS_AND_POINTS = bytes(48 if 48 <= c <= 57 else c if c == 46 else 32 for c in range(256))  # digits "0"
_LONG_DIGIT_RUN = b"0" * 19


class RunDirError(DoctorError):
    """A path given to the reader is not a run directory; carries a hint for the user."""

    def __init__(self, message: str, hint: str):
        super().__init__(message)
        self.hint = hint


@dataclass
class RankLog:
    """Everything one rank file holds, in file order.

    `records` is appended to or replaced, never edited in place: the questions below are answered
    from an index of the few records that matter (headers, ends, errors, the last step, the open
    phases), built in one pass and rebuilt when the list is replaced or grows. A run of 64 ranks x
    2,000 steps holds 2 M records, and the report asks these questions many times per rank.
    """

    rank: int
    path: Path
    records: list[Record | UnknownRecord] = field(default_factory=list)
    num_bad_lines: int = 0
    first_bad_line: int | None = None
    first_bad_reason: str | None = None  # what was wrong with the first bad line, when known
    truncated_tail: bool = False  # the last line had no newline: the process died mid-write
    sampled: bool = False  # only part of a big file was read (window.py): line numbers are byte offsets + 1
    pids: set[int] = field(default_factory=set)
    _index: _RecordIndex | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def headers(self) -> list[Header]:
        return [self.records[i] for i in self._indexed().header_positions]

    @property
    def header(self) -> Header | None:
        """The latest header: the one describing the last attempt of this rank."""
        positions = self._indexed().header_positions
        return self.records[positions[-1]] if positions else None

    def of_kind(self, cls: type) -> list:
        return [r for r in self.records if isinstance(r, cls)]

    @property
    def open_path(self) -> str | None:
        """Phase path still open at the end of the log (where a hung or killed rank stopped)."""
        return self._indexed().open_path

    @property
    def last_step(self) -> int | None:
        last = self._indexed().last_step
        return last.step if last is not None else None

    @property
    def last_record(self) -> Record | UnknownRecord | None:
        return self.records[-1] if self.records else None

    @property
    def host(self) -> str | None:
        """The latest header's host, else the first record's (a file whose header was lost)."""
        if self.header is not None:
            return self.header.host
        first = next((r for r in self.records if isinstance(r, Record)), None)
        return first.host if first is not None else None

    @property
    def current_attempt(self) -> list[Record | UnknownRecord]:
        """Records since the last header: a rank restarted by torchrun starts a new attempt."""
        positions = self._indexed().header_positions
        return self.records[positions[-1]:] if positions else self.records

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

    def absorb(self, other: RankLog) -> None:
        """Take in another file of the same rank (one directory per node, a rank restarted elsewhere)."""
        self.records = sorted(self.records + other.records, key=record_time)
        self.num_bad_lines += other.num_bad_lines
        self.pids |= other.pids

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


RankFilesReader = Callable[[list[Path]], Iterable["RankLog | OSError"]]


def load_run(paths: Sequence[str | Path], read_files: RankFilesReader | None = None) -> RunLog:
    """Load every rank file under the given run directories (or rank files named directly).

    `read_files` maps the rank files to their logs (or the OSError that reading one raised), in
    order; by default they are read one after the other with `read_rank_file`. The analysis reads
    them in parallel into `RankLog` subclasses whose phase and memory records went into tables.
    """
    if not paths:
        raise RunDirError("no run directory given", "pass the run directory that watch or the trainer printed")
    run = RunLog(dirs=[Path(p) for p in paths])
    files = [rank_file for path in run.dirs for rank_file in _rank_files(path, run.warnings)]
    with paused_gc():
        for rank_file, log in zip(files, (read_files or _read_one_by_one)(files), strict=True):
            if isinstance(log, OSError):
                run.warnings.append(f"{rank_file}: cannot be read ({log.strerror}); its rank is left out")
                continue
            _merge(run, log)
    _warn_about_gaps(run)
    return run


def _read_one_by_one(files: list[Path]) -> Iterator[RankLog | OSError]:
    for rank_file in files:
        try:
            yield read_rank_file(rank_file)
        except OSError as exc:
            yield exc


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


def _rank_files(path: Path, warnings: list[str]) -> list[Path]:
    """The rank files of a run directory, or `path` itself when it is a file. What is no regular
    file (a FIFO would block the reader forever, a device never end) is skipped with a warning."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise RunDirError(f"{path} does not exist", "check the path; run directories are printed at start-up") from None
    except OSError as exc:
        raise RunDirError(f"{path} cannot be read ({exc.strerror})", "check its permissions") from None
    if stat.S_ISREG(mode):
        return [path]
    if not stat.S_ISDIR(mode):
        raise RunDirError(f"{path} is {special_file_kind(mode)}, not a rank file or run directory",
                          "pass a run directory written by grpo-doctor, or one of its ranks/rank-*.jsonl files")
    ranks_dir = RunPaths(path).ranks
    try:
        names = sorted(entry for entry in os.listdir(ranks_dir) if RANK_FILE_GLOB.match(entry))
    except FileNotFoundError:
        names = []
    except OSError as exc:  # not a directory, or not readable by this user
        raise RunDirError(f"{ranks_dir} cannot be read ({exc.strerror})",
                          "check that directory's permissions (the user running grpo-doctor must read it)") from None
    files = regular_files([ranks_dir / name for name in names], warnings)
    if not files:
        raise RunDirError(
            f"{path} holds no rank files (expected {ranks_dir}/rank-00000.jsonl, ...)",
            "pass a run directory written by grpo-doctor (GRPO_DOCTOR_RUN_DIR), not its parent",
        )
    return files


RANK_FILE_GLOB = re.compile(r"rank-.*\.jsonl\Z", re.S)


def regular_files(paths: Iterable[Path], warnings: list[str]) -> list[Path]:
    """The paths that are regular files, without opening any; each other one named in a warning
    (a FIFO, device or socket: opening it could block, reading it never end)."""
    out = []
    for path in paths:
        try:
            mode = os.stat(path).st_mode
        except OSError as exc:
            warnings.append(f"{path}: cannot be read ({exc.strerror}); left out")
            continue
        if stat.S_ISREG(mode):
            out.append(path)
        else:
            warnings.append(f"{path}: cannot be read ({special_file_kind(mode)}, not a regular file); skipped")
    return out


def special_file_kind(mode: int) -> str:
    """'a FIFO', 'a character device', ... for what `os.stat` says is no regular file or directory."""
    for test, name in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "not a regular file"


def read_rank_file(path: str | Path) -> RankLog:
    path = Path(path)
    match = RANK_FILE_PATTERN.search(path.name)
    log = RankLog(rank=int(match.group(1)) if match else -1, path=path)
    records, pids = log.records, log.pids
    for line_number, line, complete in lines_of(path):
        try:
            record = checked_record(decode_line(line))
            if isinstance(record, Record):
                pids.add(record.pid)
        except (ValueError, TypeError, BadRecord) as exc:
            log.count_bad_line(line_number, complete, str(exc) if isinstance(exc, BadRecord) else None)
            continue
        if isinstance(record, Record) and log.rank < 0:
            log.rank = record.rank
        records.append(record)
    return log


def checked_record(data) -> Record | UnknownRecord:
    """`record_from_dict`, and its fields of the types the schema declares (see field_checks): a
    record that every rule and report can trust. Raises BadRecord naming the field."""
    record = record_from_dict(data)
    problem = wrong_field(record)
    if problem is not None:
        raise BadRecord(problem)
    return record


_scan_json = json.JSONDecoder().scan_once  # the C scanner json.loads ends in, without its per-call checks


def decode_line(line: bytes):
    """`json.loads(line)`: by orjson (3x faster) where it gives the same value, else by json."""
    return decode_line_fast(line) if not may_hold_long_int(line) else json_loads_line(line)


def decode_line_fast(line: bytes):
    """`decode_line` but for an integer beyond 64 bits, which comes back a float.

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


def lines_of(path: Path) -> Iterator[tuple[int, bytes, bool]]:
    """(line number, bytes without the newline, ended with a newline) for every line that is not
    blank, in bounded memory, over lines of any length; a line of MAX_LINE_BYTES or more is
    yielded empty, one bad line. Read in blocks and split: in the loader's worker processes that
    costs 15 % less CPU than a readline per line.
    """
    with path.open("rb") as f:
        number, tail = 0, b""
        while block := f.read(READ_BLOCK_BYTES):
            lines = (tail + block if tail else block).split(b"\n")
            tail = lines.pop()  # the line the next block finishes (b"" after a newline)
            for line in lines:
                number += 1
                if len(line) >= MAX_LINE_BYTES:
                    yield number, b"", True
                # isspace, not strip: the same answer for a non-empty line without copying it.
                elif line and not line.isspace():
                    yield number, line, True
            if len(tail) >= MAX_LINE_BYTES:
                number += 1
                tail = _skip_past_newline(f)
                yield number, b"", True
        if tail and not tail.isspace():  # the process died while writing its last line
            yield number + 1, tail, False


def _skip_past_newline(f) -> bytes:
    """Reads on to the end of an overlong line; returns what follows its newline in the last block."""
    while block := f.read(READ_BLOCK_BYTES):
        newline = block.find(b"\n")
        if newline >= 0:
            return block[newline + 1:]
    return b""


def may_hold_long_int(text: bytes) -> bool:
    """Whether `text` has a run of 19 digits that is no fraction (0.0007131951411119577 has one)."""
    marked = text.translate(_DIGITS_AND_POINTS)
    start = marked.find(_LONG_DIGIT_RUN)
    while start >= 0:
        if start == 0 or marked[start - 1] != 46:  # not after ".": an integer, or digits in a string
            return True
        start = marked.find(_LONG_DIGIT_RUN, start + len(_LONG_DIGIT_RUN))
    return False


def _merge(run: RunLog, log: RankLog) -> None:
    where = str(log.path)
    if log.num_bad_lines:
        how = " (the last line is truncated: the process died while writing)" if log.truncated_tail else ""
        why = f" ({log.first_bad_reason})" if log.first_bad_reason else ""
        at = f"byte {log.first_bad_line - 1}" if log.sampled else f"line {log.first_bad_line}"
        run.warnings.append(f"{where}: skipped {log.num_bad_lines} unreadable line(s), first at {at}{why}{how}")
    if log.last_record is None:
        run.warnings.append(f"{where}: no readable records")
        return
    if log.header is None:
        run.warnings.append(f"{where}: no header record; host and launch settings of rank {log.rank} are unknown")
    newer = [h.schema_version for h in log.headers if h.schema_version > SCHEMA_VERSION]
    if newer:
        run.warnings.append(
            f"{where}: written with schema {max(newer)}, this grpo-doctor reads {SCHEMA_VERSION}; "
            "upgrade grpo-doctor to read every field"
        )
    for size in sorted({h.world_size for h in log.headers if not sane_world_size(h)}):
        run.warnings.append(f"{where}: header field world_size is {size}, outside 1 to {MAX_WORLD_SIZE}; ignored")
    hosts = {h.host for h in log.headers}
    if len(log.headers) > 1 and len(hosts) > 1:
        run.warnings.append(f"{where}: rank {log.rank} was claimed from several hosts ({', '.join(sorted(hosts))})")
    if log.rank in run.ranks:
        other = run.ranks[log.rank]
        run.warnings.append(f"rank {log.rank} appears in both {other.path} and {where}; records merged in time order")
        other.absorb(log)
    else:
        run.ranks[log.rank] = log


def record_time(record: Record | UnknownRecord) -> float:
    return record.t if isinstance(record, Record) else float(record.data.get("t") or 0.0)


def _warn_about_gaps(run: RunLog) -> None:
    missing = run.missing_ranks
    if missing:
        run.warnings.append(
            f"no records from rank(s) {format_ranks(missing)} of world size {run.world_size}: "
            "those processes never started recording, or their node's run directory was not passed"
        )
