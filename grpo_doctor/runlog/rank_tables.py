"""One rank file read for the analysis: phase and memory records straight into table columns.

A run of 64 ranks x 2,000 steps holds 2 M records, 15 of every 16 a phase begin, a phase end or a
memory snapshot, and building a frozen dataclass for each costs more than parsing its line. Here
those three kinds go from the parsed line into columns (phases already paired, begin with end),
and only the kinds that rules and the report read as objects (header, step, error, end, rollout,
rng, and kinds this version does not know) become records. The log holds the columns as
`log.tables` (`RankTables`), with the answers the records left out would give (the open phase,
the last record, the host of a file without header), which `RankLog` then gives. Lines are judged
exactly as `eventlog.read_rank_file` judges them: the same bad lines, the same records, the same
warnings. A file beyond its read budget is read by window (window.py).

Typical use:
    log = read_rank_tables(Path("runs/job-17/ranks/rank-00003.jsonl"))
    log.tables.phases["duration_s"], log.open_path, log.last_step   # no phase records in log.records
"""
from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import Any

from grpo_doctor.runlog.columns import (
    Codes,
    Column,
    FloatsWithNone,
    as_list,
    compact,
    concatenated,
    may_be_long_int,
    selected,
)
from grpo_doctor.runlog.decode import (
    checked_record,
    decode_line,
    json_loads_line,
    may_hold_long_int,
    orjson_loads,
    paused_gc,
)
from grpo_doctor.runlog.eventlog import RANK_FILE_PATTERN
from grpo_doctor.runlog.lines import MAX_LINE_BYTES, lines_of, open_rank_file
from grpo_doctor.runlog.rank_log import RankLog
from grpo_doctor.runlog.window import (
    DAMAGED_REGION,
    REGION_BREAK,
    ReadPlan,
    plan_read,
    region_lines,
    restart_regions,
)
from grpo_doctor.schema import (
    BadRecord,
    Header,
    Memory,
    PhaseBegin,
    PhaseEnd,
    Record,
    Step,
    UnknownRecord,
    check_when,
    field_order,
)
from grpo_doctor.schema.field_checks import checker_of

# Per rank file; the loader adds rank and host. Open phases (no end yet) come last, end_t None.
PHASE_FIELDS = ("step", "phase", "path", "begin_t", "end_t", "duration_s", "error")
MEMORY_FIELDS = ("step", "t", "tag", "host_rss_bytes", "device", "allocated_bytes", "reserved_bytes",
                 "peak_allocated_bytes", "inactive_split_bytes", "free_bytes", "total_bytes", "num_alloc_retries",
                 "host_vms_bytes")
TABLED_TYPES = (PhaseBegin, PhaseEnd, Memory)


def _wire_keys(cls: type[Record]) -> tuple[str, ...]:
    """The keys of a line as the sink writes them: exactly the type's fields, in their order.

    A tuple, not a set: `tuple(data) == keys` costs less than `data.keys() == frozenset(keys)`.
    A line with its keys in another order, extra or missing takes the long way, `record_from_dict`.
    """
    return ("schema", "kind", *field_order(cls))


# Looked up by whatever a line's "kind" holds (a damaged line's may be anything): Any keys.
_WIRE_KEYS: dict[Any, tuple[str, ...]] = {cls.KIND.value: _wire_keys(cls) for cls in TABLED_TYPES}
_memory_values = itemgetter(*MEMORY_FIELDS)
_begin_values = itemgetter("step", "t", "path")
_end_values = itemgetter("phase", "path", "t", "duration_s", "error")


@dataclass
class RankTables:
    """One rank's phase begins, phase ends and memory snapshots in columns, held by its `RankLog`
    (`log.tables`) in place of those records, with what the records left no longer tell."""

    phases: dict[str, Column] = field(default_factory=dict)  # PHASE_FIELDS
    memory: dict[str, Column] = field(default_factory=dict)  # MEMORY_FIELDS
    # step, t and each metric of the Step records (which stay in `records` too), when every one
    # has the same metrics in the same order; None when not (the loader reads the records then).
    steps: dict[str, Column] | None = field(default_factory=dict)
    open_path: str | None = None  # the phase open at the end of the file
    last_record: Record | UnknownRecord | None = None  # the file's last record, of any kind
    first_host: str | None = None  # of the first record in the file; looked for only without a header
    read_plan: ReadPlan | None = None  # the bytes read (window.py)

    def followed_by(self, later: RankTables, records: list[Record | UnknownRecord]) -> RankTables:
        """These tables and a later file's of the same rank, one after the other; `records` are the
        merged logs' records, whose steps are tabled anew. What was open at the end of this file never
        ends (the later file is a new attempt, which starts with nothing open), as in one file."""
        ended = [end_t is not None for end_t in as_list(self.phases["end_t"])]
        return RankTables(
            phases={name: concatenated(selected(self.phases[name], ended), later.phases[name]) for name in PHASE_FIELDS},
            memory={name: concatenated(self.memory[name], later.memory[name]) for name in MEMORY_FIELDS},
            steps=_step_columns([r for r in records if type(r) is Step]), open_path=later.open_path,
            last_record=later.last_record, first_host=self.first_host or later.first_host, read_plan=None)


def read_rank_tables(path: str | Path, exact: bool = False, strict: bool = False,
                     budget_bytes: int | None = None, plan: ReadPlan | None = None) -> RankLog:
    """`read_rank_file`, with phase and memory records put into columns (see the module doc).

    Lines are decoded by orjson, which reads an integer beyond 64 bits as a float: only the lines
    that become records are checked for one (`may_hold_long_int`); the tabled values are checked
    once in their columns, and a file with a suspect is read again with `exact`. Likewise the
    tabled values' types (see field_checks) are checked once per column, not per line: a file
    with a value of the wrong type is read again `strict`, every line as a record, so that the
    line holding it is a bad line as `read_rank_file` would count it.

    A file larger than `budget_bytes` is read by window (window.py): its head, samples of its middle
    and its last part; line numbers are then byte offsets + 1 (`RankLog.sampled`). What it reads is
    bounded by the plan whatever the file holds (window.region_lines): a region without newlines is
    given up, counted in `log.num_damaged_regions`. Anything but a regular file is NotRegularFile.
    """
    path = Path(path)
    if plan is None:
        with open_rank_file(path) as f:  # the size of what is opened; a FIFO is refused, not waited on
            plan = plan_read(os.fstat(f.fileno()).st_size, budget_bytes)
    match = RANK_FILE_PATTERN.search(path.name)
    log = RankLog(rank=int(match.group(1)) if match else -1, path=path, sampled=not plan.whole,
                  tables=RankTables(read_plan=plan))
    lines = lines_of if plan.whole else lambda p: region_lines(p, plan, MAX_LINE_BYTES)
    with paused_gc():
        _tabulate(log, lines(path) if plan.size_bytes else iter(()), exact, strict)
        if log.pids:  # a record was read (none: nothing to look for, nothing tabled to check)
            _set_first(log, lines(path))  # within the plan too: never the whole of a big file
    if log.pids and not exact and _lost_long_int(log):
        return read_rank_tables(path, exact=True, strict=strict, plan=plan)
    if log.pids and not strict and not _tabled_types_hold(log):
        return read_rank_tables(path, exact=exact, strict=True, plan=plan)
    if not plan.whole and _restart_unread(log):
        wider = plan.with_regions(restart_regions(path, plan))
        if wider != plan:
            return read_rank_tables(path, exact=exact, strict=strict, plan=wider)
    return log


def _restart_unread(log: RankLog) -> bool:
    """Whether the last record read was written by a process no read header names: a restart whose
    header lies in the unread middle."""
    final = log.tabled().last_record
    return isinstance(final, Record) and final.pid not in {h.pid for h in log.headers}


def _tabulate(log: RankLog, lines: Iterable[tuple[int, bytes, bool]], exact: bool,
              strict: bool = False) -> None:
    """Reads (line number, line, ended with a newline) into `log` as `read_rank_file` reads a file.

    One loop with everything inline: it runs 2 M times on a big run, where a function call per
    line costs a second. Phase values go straight into column lists, in the order of the ends.
    """
    records, pids_add = log.records, log.pids.add
    begins: list[dict] = []  # open phase_begin lines, innermost last (as RankLog's open-phase stack)
    phases: dict[str, list] = {name: [] for name in PHASE_FIELDS}
    step_, phase_, path_, begin_t_, end_t_, duration_s_, error_ = (phases[n].append for n in PHASE_FIELDS)
    memory_rows: list[tuple] = []
    loads = orjson_loads if orjson_loads is not None and not exact else decode_line
    wire_keys, memory_values, begin_values, end_values = _WIRE_KEYS, _memory_values, _begin_values, _end_values
    if strict:  # every line through record_from_dict and its type checks (`_keep`)
        wire_keys = {}
    last = None  # the last line read
    for line_number, line, complete in lines:
        if line is REGION_BREAK:  # the lines between regions were not read: what was open may have closed
            begins.clear()
            continue
        if line is DAMAGED_REGION:  # a region given up (no newline within the cap): its lines unread too
            log.count_damaged_region(line_number)
            begins.clear()
            continue
        try:
            try:
                data = loads(line)
            except ValueError:  # NaN, a lone surrogate, a BOM: json's to judge
                data = json_loads_line(line)
            wire = wire_keys.get(data.get("kind")) if type(data) is dict else None
            if wire is None or tuple(data) != wire:
                data = _keep(data, line, exact, log, begins)  # raises for a line that is no record
            else:
                check_when(data)
                kind = data["kind"]  # what the line holds beside its columns (see _UNTABLED_CHECKS), inline
                if kind == "phase_end":
                    if data["synced"].__class__ is not bool:
                        _check_untabled(data)
                elif kind == "phase_begin":
                    if data["path"].__class__ is not str or data["phase"].__class__ is not str:
                        _check_untabled(data)
                else:
                    _check_untabled(data)
            if data is not None:
                pids_add(data["pid"])  # before any change: an unhashable pid leaves a bad line
        except (ValueError, TypeError, BadRecord) as exc:
            log.count_bad_line(line_number, complete, str(exc) if isinstance(exc, BadRecord) else None)
            continue
        last = line
        if data is None:
            continue
        kind = data["kind"]
        if kind == "phase_end":
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
        elif kind == "phase_begin":
            begins.append(data)
        else:
            memory_rows.append(memory_values(data))
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
    tables.steps = _step_columns([r for r in records if type(r) is Step])
    tables.open_path = begins[-1]["path"] if begins else None
    final = _record_of(last) if last is not None else None
    tables.last_record = final if isinstance(final, TABLED_TYPES) or final is None else records[-1]


def _set_first(log: RankLog, lines: Iterable[tuple[int, bytes, bool]]) -> None:
    """The host (and, for a file not named by rank, the rank) of the file's first record, which
    only a file without header needs: looked for after the file is read, not on every line."""
    if log.rank >= 0 and any(type(r) is Header for r in log.records):
        return
    for _, line, _ in lines:
        try:
            record = checked_record(decode_line(line))
            if isinstance(record, Record):
                hash(record.pid)  # as in `_tabulate`: a line with an unhashable pid is a bad one
        except (ValueError, TypeError, BadRecord):
            continue
        if isinstance(record, Record):
            log.tabled().first_host = record.host
            if log.rank < 0:
                log.rank = record.rank
            return


def _keep(data, line: bytes, exact: bool, log: RankLog, begins: list) -> dict | None:
    """A line that is not a phase or memory record as the sink writes it: its record is kept (None
    returned), or, for a phase or memory record with keys missing, extra or reordered, its dict as
    written here is returned to be tabled. Raises what `record_from_dict` raises."""
    if not exact and may_hold_long_int(line):
        data = json_loads_line(line)
    record = checked_record(data)
    if isinstance(record, TABLED_TYPES):
        return record.to_dict()
    if isinstance(record, Record):
        log.pids.add(record.pid)
        if type(record) is Header:  # a restart: what was open before it never ends
            begins.clear()
    log.records.append(record)
    return None


def _step_columns(steps: list[Step]) -> dict[str, Column] | None:
    if not steps:
        return {"step": [], "t": []}
    names = tuple(steps[0].metrics) if type(steps[0].metrics) is dict else ()
    if (not names or {"rank", "host", "step", "t"} & set(names)
            or any(type(s.metrics) is not dict or tuple(s.metrics) != names for s in steps)):
        return None
    metrics = [s.metrics for s in steps]
    return {"step": compact([s.step for s in steps]), "t": compact([s.t for s in steps]),
            **{name: compact([m[name] for m in metrics]) for name in names}}


def _record_of(line: bytes) -> Record | UnknownRecord:
    """The record of a line read before (the last of a file is wanted as an object)."""
    return checked_record(decode_line(line))


def _lost_long_int(log: RankLog) -> bool:
    """Whether orjson may have read an integer beyond 64 bits in a tabled line as a float."""
    tables = log.tabled()
    columns = [*tables.phases.values(), *tables.memory.values(), list(log.pids)]
    return any(may_be_long_int(column) for column in columns)


# Column -> (record type, field) whose type it must hold.
_TABLED_FIELDS = (
    ("phases", {"step": (PhaseBegin, "step"), "phase": (PhaseEnd, "phase"), "path": (PhaseEnd, "path"),
                       "begin_t": (PhaseBegin, "t"), "end_t": (PhaseEnd, "t"), "duration_s": (PhaseEnd, "duration_s"),
                       "error": (PhaseEnd, "error")}),
    ("memory", {name: (Memory, name) for name in MEMORY_FIELDS}),
)


_UNTABLED_CHECKS = {
    # what a tabled line holds beside its columns (a begin's phase and path are tabled only while it
    # is open; `synced` and the memory counters not at all), checked as it is read: the same bad lines
    # as `read_rank_file`, at the cost of a few type tests on the lines of these kinds.
    "phase_begin": tuple((name, checker_of(PhaseBegin, name)) for name in ("phase", "path")),
    "phase_end": (("synced", checker_of(PhaseEnd, "synced")),),
    "memory": tuple((name, checker_of(Memory, name)) for name in ("num_alloc_retries", "num_ooms", "gpu_processes")),
}


def _check_untabled(data: dict) -> None:
    for name, check in _UNTABLED_CHECKS[data["kind"]]:
        if not check(data[name]):
            raise BadRecord(f"{data['kind']} field {name}: {str(data[name])[:40]} is not of its type")


def _tabled_types_hold(log: RankLog) -> bool:
    """Whether every tabled value and pid has its field's type: per column, by its compact form
    (an int64 array holds ints only), value by value only in the columns left as lists."""
    if any(type(pid) is not int for pid in log.pids):
        return False
    for attribute, fields in _TABLED_FIELDS:
        columns = getattr(log.tables, attribute)
        for name, (cls, field_name) in fields.items():
            column, check = columns.get(name, ()), checker_of(cls, field_name)
            if name == "end_t" or name == "duration_s":  # an open phase's, None here, is no value read
                check = _or_none(check)
            if not _column_holds(column, check):
                return False
    return True


def _or_none(check):
    return lambda v: v is None or check(v)


def _column_holds(column: Column, check) -> bool:
    if isinstance(column, Codes):
        return check("")
    if isinstance(column, FloatsWithNone):
        return check(0.0) and check(None)
    if hasattr(column, "dtype"):  # numpy: int64 or float64
        return len(column) == 0 or check(0 if column.dtype.kind == "i" else 0.0)
    kinds = set(map(type, column))
    if kinds <= _SCALAR_TYPES:  # a scalar's check depends on its type alone: one value of each type
        return all(check(next(v for v in column if type(v) is kind)) for kind in kinds)
    return all(check(v) for v in column)


_SCALAR_TYPES = {type(None), bool, int, float, str}
