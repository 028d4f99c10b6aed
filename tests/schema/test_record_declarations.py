"""schema/records.py's declarations are what the rank side writes and what the reader reads: a field
added on one side only (the recorder's queued tuples, the declaration, the decoder) fails here."""
from __future__ import annotations

import dataclasses
import json
import types
import typing
from enum import Enum
from pathlib import Path

import pytest

from grpo_doctor.host.nvml import Nvml
from grpo_doctor.rank.identity import RankIdentity
from grpo_doctor.rank.recorder import Recorder
from grpo_doctor.runlog.columns import as_list
from grpo_doctor.runlog.decoder import UNTABLED_FIELDS, RankFileTail, read_rank_file
from grpo_doctor.runlog.rank_tables import MEMORY_FIELDS, PHASE_FIELDS
from grpo_doctor.schema import (
    RECORD_TYPES,
    End,
    EndReason,
    Header,
    Memory,
    PhaseBegin,
    PhaseEnd,
    Record,
    RunPaths,
    Step,
    field_order,
    omitted_when_none,
    wire_order,
)

IDENT = RankIdentity(rank=3, local_rank=3, world_size=4, node_rank=0, local_world_size=4, host="gpu-a1", pid=4242,
                     attempt=0)


def _recorded(tmp_path: Path) -> tuple[Path, list[dict]]:
    """A real Recorder's file after each hot-path call and the less frequent ones, and its lines."""
    rec = Recorder(tmp_path, IDENT, sync=False, warn=print, nvml=Nvml())
    rec.begin_phase("rollout", sync=False)
    rec.begin_phase("all_reduce", sync=False, detail={"group": "default", "seq": 7, "async": False})
    rec.end_phase(None, None)
    rec.end_phase(None, None)
    rec.step(0, {"loss": 0.5, "reward": 1})
    rec.memory_snapshot("step")
    rec.end(EndReason.EXIT)
    path = RunPaths(tmp_path).rank_file(IDENT.rank)
    return path, [json.loads(line) for line in path.read_text().splitlines()]


def test_every_line_the_recorder_writes_holds_exactly_its_declared_fields(tmp_path):
    _, lines = _recorded(tmp_path)
    assert [line["kind"] for line in lines] == ["header", "phase_begin", "phase_begin", "phase_end", "phase_end",
                                                "step", "memory", "end"]
    for line in lines:
        cls = RECORD_TYPES[line["kind"]]
        written_when_set = tuple(name for name in omitted_when_none(cls) if name in line)
        assert tuple(line) == wire_order(cls) + written_when_set, line["kind"]
    assert "detail" not in lines[1] and lines[2]["detail"] == {"group": "default", "seq": 7, "async": False}


def test_the_recorder_queues_each_value_into_the_field_named_for_it(tmp_path):
    path, _ = _recorded(tmp_path)
    records = [r for r in read_rank_file(path, columns=False).records if isinstance(r, Record)]
    begins = [r for r in records if type(r) is PhaseBegin]
    ends = [r for r in records if type(r) is PhaseEnd]
    assert [(b.phase, b.path, b.detail) for b in begins] == [
        ("rollout", "rollout", None), ("all_reduce", "rollout/all_reduce", {"group": "default", "seq": 7, "async": False})]
    assert [(e.phase, e.path, e.synced, e.error) for e in ends] == [
        ("all_reduce", "rollout/all_reduce", False, None), ("rollout", "rollout", False, None)]
    assert all(0 <= e.duration_s < 60 for e in ends) and ends[0].duration_s <= ends[1].duration_s
    step = next(r for r in records if type(r) is Step)
    assert (step.step, step.metrics) == (0, {"loss": 0.5, "reward": 1})
    assert all((r.rank, r.host, r.pid) == (3, "gpu-a1", 4242) for r in records)
    assert type(records[0]) is Header and type(records[-1]) is End and records[-1].reason == "exit"
    assert next(r for r in records if type(r) is Memory).tag == "step"


def _sample(hint, name: str):
    """A value of the annotated type that is no field's default and differs per field name."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return _sample(next(a for a in args if a is not type(None)), name)
    if isinstance(hint, type) and issubclass(hint, Enum):
        return list(hint)[1].value
    if hint is bool:
        return True
    if hint is int:
        return 1000 + len(name)
    if hint is float:
        return 0.5 + len(name)
    if hint is str or hint is typing.Any:
        return f"{name}-value"
    if origin is dict:
        return {"k": _sample(args[1], name) if args[1] is not typing.Any else 1}
    if origin is list:
        return [_sample(args[0], name)]
    raise TypeError(f"no sample for {hint!r}: a new annotation in records.py; add it here")


def _every_field_set(cls: type[Record]) -> Record:
    hints = typing.get_type_hints(cls)
    values = {f.name: _sample(hints[f.name], f.name) for f in dataclasses.fields(cls)}
    values.update(rank=3, host="gpu-a1", pid=4242, step=5, t=1_795_000_000.25, mono=88.5)
    if cls is Header:
        values.update(world_size=4, local_rank=3, schema_version=1)
    return cls(**values)


@pytest.mark.parametrize("cls", list(RECORD_TYPES.values()), ids=list(RECORD_TYPES))
def test_a_record_with_every_declared_field_set_reads_back_whole(tmp_path, cls):
    record = _every_field_set(cls)
    path = RunPaths(tmp_path).rank_file(3)
    path.parent.mkdir(parents=True)
    # A phase end is tabled with its begin (a begin's own fields are checked in its own case).
    before = [PhaseBegin(**_every_field_set(PhaseBegin).__dict__ | {"phase": record.phase, "path": record.path})
              ] if isinstance(record, PhaseEnd) else []
    path.write_text("".join(json.dumps(r.to_dict()) + "\n" for r in [*before, record]))
    assert tuple(record.to_dict()) == ("schema", "kind", *field_order(cls))
    assert read_rank_file(path, columns=False).records == [*before, record]
    assert RankFileTail(path).read_records() == [*before, record]
    tabled = read_rank_file(path)
    assert tabled.last_record == record and tabled.num_bad_lines == 0
    if cls in UNTABLED_FIELDS:  # in column batches: every declared field in a column, or said to be left out
        columns = {PhaseBegin: {"t": "begin_t"}, PhaseEnd: {"t": "end_t"}}.get(cls, {})
        table = tabled.tabled().memory if cls is Memory else tabled.tabled().phases
        for name in field_order(cls):
            if name not in UNTABLED_FIELDS[cls]:
                column = columns.get(name, name)
                assert column in (MEMORY_FIELDS if cls is Memory else PHASE_FIELDS), f"{cls.__name__}.{name}"
                assert as_list(table[column]) == [getattr(record, name)], f"{cls.__name__}.{name}"
    else:
        assert tabled.records == [record]
