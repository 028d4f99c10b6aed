"""The one decoder of rank files: every line judged once against schema/records.py's declarations,
then kept as a typed record or put into column batches. Three modes over that one judgement:

- whole file (`read_rank_file(path)`) and by window (`read_rank_file(path, budget_bytes=...)`, the
  regions of window.py): a `RankLog` whose phase begins, phase ends and memory snapshots (15 of every
  16 records of a big run) went into column batches (`RankTables`), the other kinds into records;
- incremental tail (`RankFileTail`, watch): the records appended since the last look, every kind typed.

A line is judged by `judged_line`: decoded exactly (orjson where it gives json's value, json for
what orjson reads otherwise: NaN, lone surrogates, integers beyond 64 bits), its kind looked up, its
keys taken as the sink writes them (or, reordered, extra or missing, normalised), its step, t and
mono checked, then every declared field's type and the rank's range (field_checks.wrong_value).
What fails is one bad line, counted, its reason kept; nothing is read twice.

Typical use:
    log = read_rank_file(Path("runs/job-17/ranks/rank-00003.jsonl"))
    log.tables.phases["duration_s"], log.open_path, log.last_step   # no phase records in log.records
    tail = RankFileTail(path); tail.read_records()                    # new complete records
    record_from_dict(json.loads(line))                                # one already-decoded line
"""
from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable
from operator import itemgetter
from pathlib import Path
from typing import Any

from grpo_doctor.runlog.columns import compact
from grpo_doctor.runlog.decode import decode_line_fast, json_loads_line, may_hold_long_int, paused_gc
from grpo_doctor.runlog.lines import MAX_LINE_BYTES, lines_of, open_rank_file
from grpo_doctor.runlog.rank_log import RankLog
from grpo_doctor.runlog.rank_tables import MEMORY_FIELDS, PHASE_FIELDS, RankTables, step_columns
from grpo_doctor.runlog.tail import GrowingFile
from grpo_doctor.runlog.window import (
    DAMAGED_REGION,
    REGION_BREAK,
    ReadPlan,
    plan_read,
    region_lines,
    restart_regions,
)
from grpo_doctor.schema import (
    RECORD_TYPES,
    BadRecord,
    Header,
    Memory,
    PhaseBegin,
    PhaseEnd,
    Record,
    Rollout,
    Step,
    UnknownRecord,
    check_when,
    field_order,
    omitted_when_none,
    restore_non_finite,
    wire_order,
)
from grpo_doctor.schema.field_checks import (
    MAX_UNKNOWN_DEPTH,
    values_hold,
    values_hold_within_int64,
    within_depth,
    wrong_value,
)
from grpo_doctor.schema.records import cache_by_class

RANK_FILE_PATTERN = re.compile(r"rank-(\d+)\.jsonl$")
# The kinds that go into column batches, and each one's declared fields the columns leave out
# (the loader adds rank and host; mono orders nothing a table shows). test_record_declarations
# fails when a declared field of these kinds is in neither.
TABLED_TYPES = (PhaseBegin, PhaseEnd, Memory)
UNTABLED_FIELDS: dict[type, frozenset[str]] = {
    PhaseBegin: frozenset(("rank", "host", "pid", "mono", "detail")),
    PhaseEnd: frozenset(("rank", "host", "pid", "step", "mono", "synced")),
    Memory: frozenset(("rank", "host", "pid", "mono", "num_ooms", "gpu_processes")),
}
_WIRE_KEYS: dict[str, tuple[str, ...]] = {kind: wire_order(cls) for kind, cls in RECORD_TYPES.items()}
# kind -> (record type, the keys of its line as the sink writes them, the test of its values): one
# dict lookup per line for all three.
_KINDS = {kind: (cls, wire_order(cls), values_hold(cls)) for kind, cls in RECORD_TYPES.items()}
_TABLED_KINDS = {cls.KIND.value: (cls, wire_order(cls), values_hold_within_int64(cls)) for cls in TABLED_TYPES}
_memory_values = itemgetter(*MEMORY_FIELDS)
_begin_values = itemgetter("step", "t", "path")
_end_values = itemgetter("phase", "path", "t", "duration_s", "error")
_set_field = object.__setattr__


def judged_line(line: bytes) -> tuple[type[Record] | None, dict[str, Any]]:
    """(record type, the line's values by field name) for a line that is a record of a declared kind,
    (None, the line's dict) for a well-formed line of a kind this version does not know. Raises
    ValueError (no JSON), TypeError or BadRecord (no record, or a field not of its declared type).

    A phase or memory line as the sink writes it whose values all hold (every number within int64)
    is judged on orjson's reading alone: 15 of every 16 lines of a big run. Any other line is read
    as json reads it (decode.py: orjson only where it gives json's value), then judged."""
    data = decode_line_fast(line)
    kind = data.get("kind") if type(data) is dict else None
    if type(kind) is str:
        tabled = _TABLED_KINDS.get(kind)
        if tabled is not None and tuple(data) == tabled[1] and tabled[2](data):
            return tabled[0], data
    return _judged(json_loads_line(line) if may_hold_long_int(line) else data)


def _judged(data: Any) -> tuple[type[Record] | None, dict[str, Any]]:
    kind = data.get("kind") if type(data) is dict else None
    if type(kind) is not str:
        raise BadRecord("not a record: no 'kind'")
    known = _KINDS.get(kind)
    if known is None:
        if not within_depth(data, MAX_UNKNOWN_DEPTH):
            raise BadRecord(f"{kind} record nested more than {MAX_UNKNOWN_DEPTH} levels deep")
        return None, data
    cls, wire, values_hold_for = known
    if cls is Step or cls is Rollout:
        data = restore_non_finite(cls, data)
    if tuple(data) != wire:
        data = _normalised(cls, data)
    if not values_hold_for(data):
        check_when(data)  # its wording first, for a step, t or mono that is no number
        raise BadRecord(wrong_value(cls, data) or "")
    return cls, data


def _normalised(cls: type[Record], data: dict[str, Any]) -> dict[str, Any]:
    """A line whose keys are not exactly the sink's: its declared fields in order, defaults for the
    missing optional ones, unknown keys dropped (a newer writer's). Raises BadRecord for a missing
    required field."""
    if omitted_when_none(cls) and tuple(k for k in data if k not in omitted_when_none(cls)) == _WIRE_KEYS[data["kind"]]:
        return data  # as written, with an optional field set
    missing = _required(cls) - data.keys()
    if missing:
        raise BadRecord(f"{data['kind']} record lacks {sorted(missing)}")
    return {"schema": data.get("schema"), "kind": data["kind"],
            **{name: data[name] if name in data else _default(cls, name) for name in field_order(cls)}}


def built(cls: type[Record] | None, data: dict[str, Any]) -> Record | UnknownRecord:
    """The typed record of a judged line: field by field, as the frozen __init__ sets them, without
    the keyword call (a third of the cost; not `__dict__.update`, which keeps each line's own key
    strings and doubles a record's memory)."""
    return UnknownRecord(kind=data["kind"], data=data) if cls is None else _typed(cls, data)


def record_from_dict(data: Any) -> Record | UnknownRecord:
    """The record of one line's dict as json decoded it, judged as every line of a rank file is (a
    reordered, older or newer line normalised; a wrong-typed field a BadRecord): for tools and tests
    that hold a dict, never a second way to read one."""
    return built(*_judged(data))


def _typed(cls: type[Record], data: dict[str, Any]) -> Record:
    record = object.__new__(cls)
    for name in field_order(cls):
        _set_field(record, name, data.get(name))
    return record


# ---------------------------------------------------------------------------------------------
# Whole file and by window


def read_rank_file(path: str | Path, budget_bytes: int | None = None, plan: ReadPlan | None = None,
                   columns: bool = True) -> RankLog:
    """One rank file into a `RankLog` with column batches (see the module doc); with `columns`
    False, every line a typed record in `log.records` (no tables; for tools and tests that walk
    every record of a small file).

    A file larger than `budget_bytes` is read by window (window.py): its head, samples of its middle
    and its last part; line numbers are then byte offsets + 1 (`RankLog.sampled`). What it reads is
    bounded by the plan whatever the file holds (window.region_lines): a region without newlines is
    given up, counted in `log.num_damaged_regions`. Anything but a regular file is NotRegularFile.
    Where the last record read comes from a process that no read header names (a restart whose
    header lies in the unread middle), the file is read again with the window around that header.
    """
    path = Path(path)
    if plan is None:
        with open_rank_file(path) as f:  # the size of what is opened; a FIFO is refused, not waited on
            plan = plan_read(os.fstat(f.fileno()).st_size, budget_bytes)
    match = RANK_FILE_PATTERN.search(path.name)
    log = RankLog(rank=int(match.group(1)) if match else -1, path=path, sampled=not plan.whole,
                  tables=RankTables(read_plan=plan) if columns else None)
    lines = lines_of(path) if plan.whole else region_lines(path, plan, MAX_LINE_BYTES)
    with paused_gc():
        (_tabulate if columns else _collect)(log, lines if plan.size_bytes else iter(()))
    if not plan.whole and _restart_unread(log):
        wider = plan.with_regions(restart_regions(path, plan))
        if wider != plan:
            return read_rank_file(path, plan=wider, columns=columns)
    return log


def _restart_unread(log: RankLog) -> bool:
    """Whether the last record read was written by a process no read header names."""
    final = log.last_record
    return isinstance(final, Record) and final.pid not in {h.pid for h in log.headers}


def _tabulate(log: RankLog, lines: Iterable[tuple[int, bytes, bool]]) -> None:
    """Judged lines into `log`: phases paired into columns (in the order of their ends, an end popping
    to its begin), memory rows, records of the other kinds. One loop with everything inline: it runs
    2 M times on a big run, where a function call per line costs a second."""
    records, pids_add = log.records, log.pids.add
    begins: list[dict] = []  # open phase_begin values, innermost last (as RankLog's open-phase stack)
    phases: dict[str, list] = {name: [] for name in PHASE_FIELDS}
    step_, phase_, path_, begin_t_, end_t_, duration_s_, error_ = (phases[n].append for n in PHASE_FIELDS)
    memory_rows: list[tuple] = []
    memory_values, begin_values, end_values = _memory_values, _begin_values, _end_values
    last: tuple[type[Record] | None, dict] | None = None
    first: dict | None = None  # the first record's values: the host of a file without header
    for line_number, line, complete in lines:
        if line is REGION_BREAK:  # the lines between regions were not read: what was open may have closed
            begins.clear()
            continue
        if line is DAMAGED_REGION:  # a region given up (no newline within the cap): its lines unread too
            log.count_damaged_region(line_number)
            begins.clear()
            continue
        try:
            cls, data = judged_line(line)
        except (ValueError, TypeError, BadRecord) as exc:
            log.count_bad_line(line_number, complete, str(exc) if isinstance(exc, BadRecord) else None)
            continue
        last = cls, data
        if cls is PhaseEnd:
            phase, path, end_t, duration_s, error = end_values(data)
            while begins:  # pop to the matching begin: an exception may have skipped inner ends
                step, begin_t, begin_path = begin_values(begins.pop())
                if begin_path == path:
                    step_(step)
                    phase_(phase)
                    path_(path)
                    begin_t_(begin_t)
                    end_t_(end_t)
                    duration_s_(duration_s)
                    error_(error)
                    break
        elif cls is PhaseBegin:
            begins.append(data)
        elif cls is Memory:
            memory_rows.append(memory_values(data))
        else:
            records.append(built(cls, data))
            if cls is None:
                continue
            if cls is Header:  # a restart: what was open before it never ends
                begins.clear()
        pids_add(data["pid"])
        if first is None:
            first = data
    for begin in begins:  # still open at the end of the file
        step_(begin["step"])
        phase_(begin["phase"])
        path_(begin["path"])
        begin_t_(begin["t"])
        end_t_(None)
        duration_s_(None)
        error_(None)
    tables = log.tabled()
    tables.phases = {name: compact(values) for name, values in phases.items()}
    memory = list(zip(*memory_rows, strict=True)) if memory_rows else [() for _ in MEMORY_FIELDS]
    tables.memory = {name: compact(list(values)) for name, values in zip(MEMORY_FIELDS, memory, strict=True)}
    tables.steps = step_columns([r for r in records if type(r) is Step])
    tables.open_path = begins[-1]["path"] if begins else None
    tables.last_record = None if last is None else built(*last) if last[0] in TABLED_TYPES else records[-1]
    if first is not None and (log.rank < 0 or not any(type(r) is Header for r in records)):
        tables.first_host = first["host"]
        if log.rank < 0:
            log.rank = first["rank"]


def _collect(log: RankLog, lines: Iterable[tuple[int, bytes, bool]]) -> None:
    """Judged lines into `log.records`, every kind typed (`read_rank_file(..., columns=False)`)."""
    records, pids_add = log.records, log.pids.add
    for line_number, line, complete in lines:
        if line is REGION_BREAK:
            continue
        if line is DAMAGED_REGION:
            log.count_damaged_region(line_number)
            continue
        try:
            cls, data = judged_line(line)
        except (ValueError, TypeError, BadRecord) as exc:
            log.count_bad_line(line_number, complete, str(exc) if isinstance(exc, BadRecord) else None)
            continue
        records.append(built(cls, data))
        if cls is not None:
            pids_add(data["pid"])
            if log.rank < 0:
                log.rank = data["rank"]


# ---------------------------------------------------------------------------------------------
# Incremental tail


class RankFileTail:
    """The records appended to one growing rank file since the last look (watch polls every rank
    file every second or so). The bytes are followed by tail.GrowingFile; each complete line is
    judged here as in the other modes, bad lines counted in `num_bad_lines`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.file = GrowingFile(path)
        self._bad_records = 0

    @property
    def num_bad_lines(self) -> int:
        return self.file.num_dropped + self._bad_records

    def read_records(self) -> list[Record]:
        """The new records; lines that are no record (or of a kind this version does not know) are
        skipped, the bad ones counted."""
        records = []
        for line in self.file.read_lines():
            try:
                cls, data = judged_line(line)
            except (ValueError, TypeError, BadRecord):
                self._bad_records += 1
                continue
            if cls is not None:
                records.append(_typed(cls, data))
        return records


@cache_by_class
def _required(cls: type[Record]) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls)
                     if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)


def _default(cls: type[Record], name: str) -> Any:
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
