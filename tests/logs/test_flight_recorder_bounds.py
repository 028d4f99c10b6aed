"""Hostile flight-recorder dumps: small files that expand to huge or deep structures are refused quickly.

A pickle names an object once and refers to it again with a two-byte memo lookup, so a few hundred
bytes can describe a list of a billion billion strings ("billion laughs"); only turning it into text
or walking it expands it. The reader must refuse such a dump in one FlightDumpError, in bounded
time and memory, and keep reading real ones (tests/data/fr) as before.
"""
import json
import pickle
import resource
import tracemalloc
from pathlib import Path

import pytest

from grpo_doctor.logs.flight_recorder import FlightDumpError, read_flight_dump

FR = Path(__file__).resolve().parents[1] / "data" / "fr"


def _laughs(levels: int, width: int = 10):
    node = ["lol"] * width
    for _ in range(levels):
        node = [node] * width  # the same list `width` times: one memo entry, `width` references
    return node


def _dump(tmp_path: Path, name: str, data) -> Path:
    path = tmp_path / name
    path.write_bytes(pickle.dumps(data, protocol=4))
    return path


def _refused_quickly(path: Path) -> str:
    """Refused without expanding it: the reader's own allocations stay small (a memory bound, not a
    clock: the old reader built gigabytes of text from a 294-byte dump before judging it)."""
    tracemalloc.start()
    try:
        with pytest.raises(FlightDumpError) as info:
            read_flight_dump(path)
        peak_bytes = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak_bytes < 64 * 2**20, f"a small dump must be judged without expanding it ({peak_bytes} bytes)"
    return str(info.value)


@pytest.fixture(autouse=True)
def _memory_cap():
    """A dump of a few hundred bytes must not need gigabytes: cap this process's heap while it is read."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = 4 * 2**30  # well above what the test process needs, well below what an expansion takes
    resource.setrlimit(resource.RLIMIT_AS, (cap if hard == resource.RLIM_INFINITY else min(cap, hard), hard))
    yield
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def test_a_billion_laughs_ranks_list_is_refused_in_one_error(tmp_path):
    dump = {"version": "2.10", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": _laughs(8)}},
            "pg_status": {}, "entries": []}
    path = _dump(tmp_path, "nccl_trace_rank_0", dump)
    assert path.stat().st_size < 400
    message = _refused_quickly(path)
    assert str(path) in message and "expanded" in message


def test_billion_laughs_inside_entries_is_refused(tmp_path):
    entry = {"process_group": ("0", "default_pg"), "collective_seq_id": 1, "profiling_name": "nccl:all_reduce",
             "input_sizes": _laughs(7), "output_sizes": [], "input_dtypes": [], "output_dtypes": []}
    path = _dump(tmp_path, "nccl_trace_rank_1", {"version": "2.10", "pg_config": {}, "entries": [entry] * 50})
    assert "expanded" in _refused_quickly(path)


def _short_str(text: str) -> bytes:
    return b"\x8c" + bytes([len(text)]) + text.encode()  # SHORT_BINUNICODE


def test_a_dump_nested_past_any_real_layout_is_refused(tmp_path):
    # 100,000 lists each inside the next: pickle.dumps cannot write that (it recurses), opcodes can:
    # EMPTY_LIST pushed n times, then APPEND n-1 times, as the value of "entries".
    depth = 100_000
    nested = b"]" * depth + b"a" * (depth - 1)
    data = (b"\x80\x04}" + _short_str("version") + _short_str("2.10") + b"s"
            + _short_str("entries") + nested + b"s.")
    path = tmp_path / "nccl_trace_rank_2"
    path.write_bytes(data)
    assert "nested" in _refused_quickly(path)


def test_a_json_dump_nested_1100_levels_is_refused(tmp_path):
    path = tmp_path / "nccl_trace_rank_3.json"
    path.write_text('{"version": "2.10", "comm_lib_version": "x", "pg_config": {}, "entries": '
                    + "[" * 1100 + "]" * 1100 + "}")
    _refused_quickly(path)


def test_a_ranks_field_of_the_wrong_type_is_refused_not_stringified(tmp_path):
    dump = {"version": "2.10", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": {"a": 1}}},
            "entries": []}
    assert "ranks" in _refused_quickly(_dump(tmp_path, "nccl_trace_rank_4", dump))


@pytest.mark.parametrize("path", sorted(p for p in FR.rglob("nccl_trace_rank_*")), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_real_dumps_are_still_read(path):
    dump = read_flight_dump(path)
    assert dump.entries and dump.rank is not None
    json.dumps(dump.to_dict())
