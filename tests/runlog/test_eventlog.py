import json

import pytest
from helpers import write_rank

from grpo_doctor.runlog.decoder import read_rank_file
from grpo_doctor.runlog.eventlog import RunDirError, load_run
from grpo_doctor.runlog.lines import MAX_LINE_BYTES
from grpo_doctor.schema import End, Header, PhaseBegin, PhaseEnd, RunPaths, Step


def _common(rank, step=0, t=100.0):
    return dict(rank=rank, host=f"node-{rank // 2}", pid=1000 + rank, step=step, t=t, mono=t)


def _header(rank, world_size=4):
    return Header(**_common(rank), local_rank=rank % 2, world_size=world_size, node_rank=rank // 2,
                  local_world_size=2, gpu_uuid=None, versions={}, launch={}, argv=[])


def test_a_truncated_last_line_is_skipped_counted_and_reported(tmp_path):
    write_rank(tmp_path, 0, [_header(0, 1), Step(**_common(0), metrics={"loss": 1.0})], tail=b'{"schema":1,"kind":"ph')
    run = load_run([tmp_path])
    log = run.ranks[0]
    assert [type(r) for r in log.records] == [Header, Step]
    assert log.num_bad_lines == 1 and log.truncated_tail
    assert any("truncated" in w and "rank-00000.jsonl" in w for w in run.warnings)


def test_garbage_and_binary_lines_between_records_are_skipped(tmp_path):
    path = write_rank(tmp_path, 0, [_header(0, 1)])
    with path.open("ab") as f:
        f.write(b"\x00\xff\xfe garbage\n")
        f.write(b"[1, 2, 3]\n")
        f.write(b'{"kind": "step"}\n')  # a record missing its fields
        f.write(json.dumps(Step(**_common(0, step=4), metrics={}).to_dict()).encode() + b"\n")
    log = load_run([tmp_path]).ranks[0]
    assert log.num_bad_lines == 3 and log.first_bad_line == 2
    assert log.last_step == 4


def test_an_overlong_line_is_one_bad_line_not_a_memory_blowup(tmp_path):
    path = write_rank(tmp_path, 0, [_header(0, 1)])
    with path.open("ab") as f:
        f.write(b"x" * (MAX_LINE_BYTES * 2 + 10) + b"\n")
        f.write(json.dumps(Step(**_common(0, step=1), metrics={}).to_dict()).encode() + b"\n")
    log = read_rank_file(path)
    assert log.num_bad_lines == 1 and log.last_step == 1


def test_ranks_from_one_directory_per_node_are_merged_and_missing_ranks_named(tmp_path):
    node0, node1 = tmp_path / "node0", tmp_path / "node1"
    for rank in (0, 1):
        write_rank(node0, rank, [_header(rank)])
    write_rank(node1, 3, [_header(3)])
    run = load_run([node0, node1])
    assert sorted(run.ranks) == [0, 1, 3]
    assert run.world_size == 4 and run.missing_ranks == [2]
    assert any("rank(s) 2 of world size 4" in w for w in run.warnings)


def test_an_empty_rank_file_is_reported_not_fatal(tmp_path):
    write_rank(tmp_path, 0, [_header(0, 2)])
    RunPaths(tmp_path).rank_file(1).write_bytes(b"")
    run = load_run([tmp_path])
    assert any("rank-00001.jsonl: no readable records" in w for w in run.warnings)
    assert run.missing_ranks == [1]


def test_open_phase_is_where_a_rank_stopped(tmp_path):
    records = [
        _header(0, 1),
        PhaseBegin(**_common(0), phase="rollout", path="rollout"),
        PhaseBegin(**_common(0), phase="generate", path="rollout/generate"),
        PhaseEnd(**_common(0), phase="generate", path="rollout/generate", duration_s=1, synced=False),
        PhaseEnd(**_common(0), phase="rollout", path="rollout", duration_s=1, synced=False),
        PhaseBegin(**_common(0, step=1), phase="backward", path="backward"),
        PhaseBegin(**_common(0, step=1), phase="all_reduce", path="backward/all_reduce"),
    ]
    write_rank(tmp_path, 0, records)
    assert load_run([tmp_path]).ranks[0].open_path == "backward/all_reduce"


def test_an_exception_that_skips_inner_phase_ends_does_not_confuse_the_open_phase(tmp_path):
    records = [
        _header(0, 1),
        PhaseBegin(**_common(0), phase="a", path="a"),
        PhaseBegin(**_common(0), phase="b", path="a/b"),
        PhaseEnd(**_common(0), phase="a", path="a", duration_s=1, synced=False, error="RuntimeError"),
        End(**_common(0), reason="exception"),
    ]
    write_rank(tmp_path, 0, records)
    assert load_run([tmp_path]).ranks[0].open_path is None


def test_a_path_that_is_not_a_run_directory_is_a_clear_error(tmp_path):
    with pytest.raises(RunDirError, match="does not exist"):
        load_run([tmp_path / "nope"])
    with pytest.raises(RunDirError, match="holds no rank files") as err:
        load_run([tmp_path])
    assert "not its parent" in err.value.hint


def test_an_unreadable_rank_file_is_a_warning_and_the_other_ranks_load(tmp_path):
    write_rank(tmp_path, 0, [_header(0, 2)])
    RunPaths(tmp_path).rank_file(1).mkdir()  # not a file at all
    run = load_run([tmp_path])
    assert sorted(run.ranks) == [0]
    assert any("rank-00001.jsonl: cannot be read" in w for w in run.warnings)


def test_a_restarted_rank_is_judged_by_its_latest_attempt(tmp_path):
    records = [
        _header(0, 1),
        End(**_common(0), reason="exit"),
        _header(0, 1),
        PhaseBegin(**_common(0, step=3), phase="rollout", path="rollout"),
    ]
    write_rank(tmp_path, 0, records)
    log = load_run([tmp_path]).ranks[0]
    assert log.end is None and log.open_path == "rollout"  # killed in its second attempt


def test_values_only_the_stdlib_json_reads_alike_are_read_as_it_reads_them(tmp_path):
    # NaN (a diverged loss, as the sink writes it) and lone surrogates: orjson refuses them; an
    # integer beyond 64 bits: orjson would make it a float.
    step = Step(**_common(0), metrics={"loss": float("nan"), "kl": float("inf"), "seed": 2**70, "x": "\ud800"})
    write_rank(tmp_path, 0, [_header(0, 1), step])
    metrics = load_run([tmp_path]).ranks[0].records[-1].metrics
    assert metrics["loss"] != metrics["loss"] and metrics["kl"] == float("inf")
    assert metrics["seed"] == 2**70 and isinstance(metrics["seed"], int)
    assert metrics["x"] == "\ufffd"  # a lone surrogate no UTF-8 writer (pyarrow, the report) would take


def test_every_line_of_a_long_file_is_read_whole(tmp_path):
    steps = [Step(**_common(0, step=i), metrics={"pad": "x" * (i % 997)}) for i in range(3000)]
    path = write_rank(tmp_path, 0, [_header(0, 1), *steps], tail=b"\n  \n")
    log = read_rank_file(path)
    assert log.num_bad_lines == 0 and [r.step for r in log.records[1:]] == list(range(len(steps)))
