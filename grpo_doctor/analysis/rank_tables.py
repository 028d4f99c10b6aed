"""One rank file read for the analysis: phase and memory records straight into table columns.

A run of 64 ranks x 2,000 steps holds 2 M records, 15 of every 16 a phase begin, a phase end or a
memory snapshot, and building a frozen dataclass for each costs more than parsing its line. Here
those three kinds go from the parsed line into columns (phases already paired, begin with end),
and only the kinds that rules and the report read as objects (header, step, error, end, rollout,
rng, and kinds this version does not know) become records. The answers `RankLog` gives from
phase records (the open phase, the last record, the host of a file without header) are taken
while reading. Lines are judged exactly as `eventlog.read_rank_file` judges them: the same bad
lines, the same records, the same warnings.

Typical use:
    log = read_rank_tables(Path("runs/job-17/ranks/rank-00003.jsonl"))
    log.phase_columns["duration_s"], log.open_path, log.last_step   # no phase records in log.records
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_doctor.analysis.columns import Column, compact
from grpo_doctor.eventlog import (
    RANK_FILE_PATTERN,
    RankLog,
    decode_line,
    lines_of,
    paused_gc,
    read_rank_file,
    record_time,
)
from grpo_doctor.schema import (
    BadRecord,
    Header,
    Memory,
    PhaseBegin,
    PhaseEnd,
    Record,
    UnknownRecord,
    field_order,
    record_from_dict,
)

# Per rank file; the loader adds rank and host. Open phases (no end yet) come last, end_t None.
PHASE_FIELDS = ("step", "phase", "path", "begin_t", "end_t", "duration_s", "error")
MEMORY_FIELDS = ("step", "t", "tag", "host_rss_bytes", "device", "allocated_bytes", "reserved_bytes",
                 "peak_allocated_bytes", "inactive_split_bytes", "free_bytes", "total_bytes")
TABLED_TYPES = (PhaseBegin, PhaseEnd, Memory)


def _wire_keys(cls: type[Record]) -> frozenset[str]:
    """The keys of a line that `record_from_dict` builds without filtering: exactly the type's fields."""
    return frozenset(("schema", "kind", *field_order(cls)))


_BEGIN_KEYS, _END_KEYS, _MEMORY_KEYS = (_wire_keys(cls) for cls in TABLED_TYPES)


@dataclass
class TabledRankLog(RankLog):
    """A `RankLog` whose phase begins, phase ends and memory snapshots are in columns, not `records`.

    `records` holds every other record, in file order; `of_kind(PhaseEnd)` is empty. `open_path`,
    `last_record` and `host` answer as for the whole file.
    """

    sources: list[Path] = field(default_factory=list)  # the files read (several once merged)
    phase_columns: dict[str, Column] = field(default_factory=dict)  # PHASE_FIELDS
    memory_columns: dict[str, Column] = field(default_factory=dict)  # MEMORY_FIELDS
    final_open_path: str | None = None
    final_record: Record | UnknownRecord | None = None
    first_host: str | None = None  # of the first record in the file

    @property
    def open_path(self) -> str | None:
        return self.final_open_path

    @property
    def last_record(self) -> Record | UnknownRecord | None:
        return self.final_record

    @property
    def host(self) -> str | None:
        header = self.header
        return header.host if header is not None else self.first_host

    def absorb(self, other: RankLog) -> None:
        """As `RankLog.absorb`: the files read again whole and their records tabled in time order."""
        others = other.sources if isinstance(other, TabledRankLog) else [other.path]
        merged = sorted((r for path in self.sources + others for r in read_rank_file(path).records),
                        key=record_time)
        self.sources += others
        bad_lines, pids = self.num_bad_lines + other.num_bad_lines, self.pids | other.pids
        self.records, self.pids = [], set()
        add, finish = _tabulator(self)
        for record in merged:
            add(record.to_dict() if isinstance(record, Record) else record.data)
        finish()
        self.num_bad_lines, self.pids = bad_lines, pids


def read_rank_tables(path: str | Path) -> TabledRankLog:
    """`read_rank_file`, with phase and memory records put into columns (see the module doc)."""
    path = Path(path)
    match = RANK_FILE_PATTERN.search(path.name)
    log = TabledRankLog(rank=int(match.group(1)) if match else -1, path=path, sources=[path])
    with paused_gc():
        add, finish = _tabulator(log)
        for line_number, line, complete, exact in lines_of(path):
            try:
                add(decode_line(line, exact))
            except (ValueError, TypeError, BadRecord):
                if not complete:
                    log.truncated_tail = True
                log.num_bad_lines += 1
                log.first_bad_line = log.first_bad_line or line_number
        finish()
    return log


def _tabulator(log: TabledRankLog) -> tuple[Callable[[Any], None], Callable[[], None]]:
    """(add, finish): `add` takes one parsed line in file order and raises what `record_from_dict`
    raises for a line that is no record; `finish` puts the columns and final answers into `log`.

    Closures, not methods: `add` runs 2 M times on a big run, and local names are its cheapest.
    """
    records, pids_add = log.records, log.pids.add
    begins: list[dict] = []  # open phase_begin lines, innermost last (as RankLog's open-phase stack)
    phase_rows: list[tuple] = []  # closed phases, in the order of their ends
    memory_rows: list[tuple] = []
    first_tabled: list = []  # [line, number of records kept before it] of the first tabled line
    last_tabled: list = [None]  # the last line when it was tabled, else None

    def add(data: Any) -> None:
        if type(data) is dict:
            kind = data.get("kind")
            # pids first: an unhashable pid (TypeError) leaves a bad line that changed nothing.
            if kind == "phase_end" and data.keys() == _END_KEYS:
                pids_add(data["pid"])
                path = data["path"]
                while begins:  # pop to the matching begin: an exception may have skipped inner ends
                    begin = begins.pop()
                    if begin["path"] == path:
                        phase_rows.append((begin["step"], data["phase"], path, begin["t"], data["t"],
                                           data["duration_s"], data["error"]))
                        break
            elif kind == "phase_begin" and data.keys() == _BEGIN_KEYS:
                pids_add(data["pid"])
                begins.append(data)
            elif kind == "memory" and data.keys() == _MEMORY_KEYS:
                pids_add(data["pid"])
                memory_rows.append((data["step"], data["t"], data["tag"], data["host_rss_bytes"], data["device"],
                                    data["allocated_bytes"], data["reserved_bytes"], data["peak_allocated_bytes"],
                                    data["inactive_split_bytes"], data["free_bytes"], data["total_bytes"]))
            else:
                return _keep(data)
            last_tabled[0] = data
            if not first_tabled:
                first_tabled[:] = [data, len(records)]
            return None
        return _keep(data)

    def _keep(data: Any) -> None:
        record = record_from_dict(data)
        if isinstance(record, TABLED_TYPES):  # fields missing or extra: now as this version writes them
            return add(record.to_dict())
        if isinstance(record, Record):
            pids_add(record.pid)
            if type(record) is Header:  # a restart: what was open before it never ends
                begins.clear()
        records.append(record)
        last_tabled[0] = None
        return None

    def finish() -> None:
        rows = phase_rows + [(b["step"], b["phase"], b["path"], b["t"], None, None, None) for b in begins]
        log.phase_columns = _columns(rows, PHASE_FIELDS)
        log.memory_columns = _columns(memory_rows, MEMORY_FIELDS)
        log.final_open_path = begins[-1]["path"] if begins else None
        log.final_record = record_from_dict(last_tabled[0]) if last_tabled[0] is not None else \
            (records[-1] if records else None)
        first = _first_record(records, first_tabled)
        if first is not None:
            log.first_host = first["host"] if isinstance(first, dict) else first.host
            if log.rank < 0:
                log.rank = first["rank"] if isinstance(first, dict) else first.rank

    return add, finish


def _first_record(records: list, first_tabled: list) -> Record | dict | None:
    """The file's first record (not an unknown kind): a kept one, or the first tabled line if it came first."""
    kept_before = first_tabled[1] if first_tabled else len(records)
    first = next((r for r in records[:kept_before] if isinstance(r, Record)), None)
    return first if first is not None or not first_tabled else first_tabled[0]


def _columns(rows: Iterable[tuple], names: tuple[str, ...]) -> dict[str, Column]:
    columns = list(zip(*rows, strict=True)) or [() for _ in names]
    return {name: compact(list(values)) for name, values in zip(names, columns, strict=True)}
