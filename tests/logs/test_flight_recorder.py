"""The flight-recorder reader, on real dumps torch 2.13 wrote with gloo (tests/data/fr/README.md)."""
import os
import pickle
from pathlib import Path

import pytest

from grpo_doctor.logs.flight_recorder import (
    FlightDump,
    FlightDumpError,
    is_flight_dump,
    read_flight_dump,
)

DATA = Path(__file__).resolve().parents[1] / "data"
FR, LOGS = DATA / "fr", DATA / "logs"


def _key(e):
    return (e.pg_name, e.collective_seq_id, e.op, e.input_sizes, e.output_sizes, e.input_dtypes)


def test_real_gloo_dump_is_read_with_its_rank_from_the_file_name():
    dump = read_flight_dump(FR / "skip" / "nccl_trace_rank_0")
    assert (dump.rank, dump.version, dump.format) == (0, "2.10", "pickle")
    assert [(e.pg_desc, e.collective_seq_id, e.op) for e in dump.entries] == [
        ("default_pg", 1, "all_reduce"), ("pair", 1, "all_reduce"), ("default_pg", 2, "broadcast"),
        ("default_pg", 3, "all_reduce")]
    last = dump.entries[-1]
    assert (last.input_sizes, last.input_dtypes, last.state, last.is_p2p) == (((16,),), ("Float",), "scheduled", False)
    assert last.timeout_ms == 60_000 and last.profiling_name == "gloo:all_reduce"
    assert last.user_frame.filename.endswith("make_dumps.py") and last.user_frame.name == "main"
    assert dump.pg_status[0].last_enqueued == 3 and dump.pg_status[0].last_started is None  # gloo: not tracked


def test_json_dump_holds_the_same_collectives_without_frames():
    pickled = read_flight_dump(FR / "shape" / "nccl_trace_rank_2")
    as_json = read_flight_dump(FR / "shape" / "nccl_trace_rank_2.json")
    assert (as_json.rank, as_json.format, as_json.version) == (2, "json", "2.10")
    assert [_key(e) for e in as_json.entries] == [_key(e) for e in pickled.entries]
    assert all(not e.frames for e in as_json.entries)
    assert as_json.pg_status[0].last_enqueued == 5  # written as the string "5"


def test_dump_round_trips_through_its_dict():
    dump = read_flight_dump(FR / "skip" / "nccl_trace_rank_2")
    assert FlightDump.from_dict(dump.to_dict()) == dump


def test_dumps_are_told_from_logs_by_their_first_bytes():
    assert is_flight_dump(FR / "skip" / "nccl_trace_rank_1")
    assert is_flight_dump(FR / "skip" / "nccl_trace_rank_1.json")
    for name in ("torchrun_nccl_timeout.log", "binary_garbage.log", "empty.log"):
        assert not is_flight_dump(LOGS / name), name


def _error(path, **kw) -> str:
    with pytest.raises(FlightDumpError) as info:
        read_flight_dump(path, **kw)
    message = str(info.value)
    assert str(path) in message and "\n" not in message
    return message


def test_truncated_dump_is_one_error_naming_the_file(tmp_path):
    data = (FR / "skip" / "nccl_trace_rank_0").read_bytes()
    cut = tmp_path / "nccl_trace_rank_0"
    cut.write_bytes(data[: len(data) // 2])
    assert "not a readable flight-recorder pickle" in _error(cut)


def test_empty_file_is_named_as_a_rank_killed_while_dumping(tmp_path):
    (tmp_path / "nccl_trace_rank_5").write_bytes(b"")
    assert "empty file" in _error(tmp_path / "nccl_trace_rank_5")


def test_text_and_foreign_pickles_are_not_dumps(tmp_path):
    (tmp_path / "notes.txt").write_text("hello, not a dump\n")
    assert "not a readable flight-recorder" in _error(tmp_path / "notes.txt")
    (tmp_path / "list.pkl").write_bytes(pickle.dumps([1, 2, 3], protocol=2))
    assert "not a flight-recorder dump" in _error(tmp_path / "list.pkl")
    (tmp_path / "entry.json").write_text('{"version": "2.10", "entries": [{"record_id": 0}]}')
    assert "lacks process_group" in _error(tmp_path / "entry.json")


class _RunsACommand:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("protocol", [0, 2, 5])
def test_a_pickle_that_imports_os_is_refused_and_runs_nothing(tmp_path, protocol):
    marker = tmp_path / "pwned"
    evil = tmp_path / "nccl_trace_rank_0"
    evil.write_bytes(pickle.dumps({"version": "2.10", "entries": [_RunsACommand(marker)]}, protocol=protocol))
    message = _error(evil)
    assert not marker.exists()
    if protocol >= 2:
        assert "refused to load" in message and "system" in message


def test_files_over_the_size_limit_are_refused_before_reading():
    assert "over the 100-byte limit" in _error(FR / "skip" / "nccl_trace_rank_0", max_bytes=100)


def test_older_layout_without_is_p2p_tells_p2p_ops_by_name(tmp_path):
    path = tmp_path / "trace_3.json"
    path.write_text('{"version": "2.2", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},'
                    ' "entries": [{"process_group": ["0", "default_pg"], "collective_seq_id": 0,'
                    ' "profiling_name": "nccl:send 0->1", "input_sizes": [[4]], "output_sizes": [[4]]}]}')
    dump = read_flight_dump(path)
    assert dump.rank == 3 and dump.pg_ranks == {"0": (0, 1)}
    assert dump.entries[0].is_p2p and dump.entries[0].op == "send"
