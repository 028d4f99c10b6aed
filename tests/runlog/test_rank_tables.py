import json
from dataclasses import replace

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.runlog.columns import as_list
from grpo_doctor.runlog.decoder import RankFileTail, read_rank_file
from grpo_doctor.runlog.rank_log import RankLog
from grpo_doctor.schema import End, Error, Memory, PhaseBegin, PhaseEnd, RunPaths, Step
from tests.analysis.rundata import common, header, write_rank


def begin(rank, step, t, path, **kw):
    return PhaseBegin(**common(rank, step=step, t=t, **kw), phase=path.rsplit("/", 1)[-1], path=path)


def end(rank, step, t, path, error=None):
    return PhaseEnd(**common(rank, step=step, t=t), phase=path.rsplit("/", 1)[-1], path=path, duration_s=t - 1.0,
                    synced=False, error=error)


def memory(rank, step, t):
    return Memory(**common(rank, step=step, t=t), tag="step", host_rss_bytes=2**30, device=0, allocated_bytes=2**33)


def _tail_log(path) -> RankLog:
    """The file as watch's incremental mode reads it: every record typed, none in columns."""
    tail = RankFileTail(path)
    log = RankLog(rank=0, path=path, records=list(tail.read_records()))
    log.num_bad_lines = tail.num_bad_lines
    return log


def test_the_whole_file_mode_answers_as_the_incremental_mode(tmp_path):
    path = write_rank(tmp_path, 0, [
        header(0, 1), begin(0, 0, 1.0, "rollout"), begin(0, 0, 2.0, "rollout/generate"),
        end(0, 0, 3.0, "rollout", error="RuntimeError"),  # the inner end was skipped by the exception
        memory(0, 0, 4.0), Step(**common(0, step=0, t=5.0), metrics={"loss": 0.5}),
        header(0, 1), begin(0, 1, 6.0, "backward"),  # a restart: what was open before it never ends
        Error(**common(0, step=1, t=7.0), exc_type="ValueError", message="m", traceback="", phase="backward",
              path="backward"),
        begin(0, 1, 8.0, "backward/all_reduce"),
    ])
    with path.open("ab") as f:
        f.write(b"not json\n" + json.dumps(memory(0, 1, 9.0).to_dict()).encode() + b'\n{"schema":1,"kind":"ph')
    tabled, full = read_rank_file(path), _tail_log(path)
    assert [type(r).__name__ for r in tabled.records] == ["Header", "Step", "Header", "Error"]
    for answer in ("open_path", "last_record", "last_step", "end", "errors", "headers", "host", "rank"):
        assert getattr(tabled, answer) == getattr(full, answer), answer
    assert tabled.num_bad_lines == 2 and full.num_bad_lines == 1  # the tail waits for the last line's newline
    assert (tabled.first_bad_line, tabled.truncated_tail, tabled.pids) == (11, True, {1000})
    assert tabled.open_path == "backward/all_reduce" and isinstance(tabled.last_record, Memory)
    phases = load_evidence([tmp_path]).phases
    # Closed phases in the order of their ends, then the open ones; "rollout/generate" never ended.
    assert phases[["step", "path", "begin_t"]].values.tolist() == [
        [0, "rollout", 1.0], [1, "backward", 6.0], [1, "backward/all_reduce", 8.0]]
    assert phases["end_t"].tolist()[0] == 3.0 and phases["end_t"][1:].isna().all()
    assert phases["error"].tolist()[0] == "RuntimeError" and phases["error"][1:].isna().all()


def test_phase_lines_with_other_keys_are_tabled_as_the_declaration_reads_them(tmp_path):
    reordered = {k: v for k, v in reversed(list(begin(0, 0, 1.0, "a").to_dict().items()))}
    extra = {**end(0, 0, 2.0, "a").to_dict(), "added_by_a_newer_version": 1}
    sparse = {k: v for k, v in memory(0, 0, 3.0).to_dict().items() if k not in ("device", "gpu_processes")}
    no_rank = {k: v for k, v in begin(0, 1, 4.0, "b").to_dict().items() if k != "rank"}  # a required field
    path = RunPaths(tmp_path).rank_file(0)
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(d) + "\n" for d in [header(0, 1).to_dict(), reordered, extra, sparse, no_rank]))
    log = read_rank_file(path)
    assert log.num_bad_lines == 1 and log.first_bad_line == 5
    ev = load_evidence([tmp_path])
    assert ev.phases[["path", "begin_t", "end_t"]].values.tolist() == [["a", 1.0, 2.0]]
    assert ev.memory["device"].isna().all() and ev.memory["t"].tolist() == [3.0]


def test_numbers_orjson_would_change_are_read_as_json_reads_them(tmp_path):
    path = RunPaths(tmp_path).rank_file(0)
    path.parent.mkdir(parents=True)
    lines = [json.dumps(header(0, 1).to_dict()),
             json.dumps({**memory(0, 0, 1.0).to_dict(), "allocated_bytes": 2**70}),  # orjson: a float
             json.dumps(Step(**common(0, step=0, t=2.0), metrics={"loss": float("nan"), "seed": 2**65}).to_dict())]
    path.write_text("\n".join(lines) + "\n")
    ev = load_evidence([tmp_path])
    assert ev.memory["allocated_bytes"].tolist() == [2**70]
    step = ev.run.ranks[0].records[-1]
    assert step.metrics["seed"] == 2**65 and isinstance(step.metrics["seed"], int) and step.metrics["loss"] != 0.0


def test_a_rank_in_two_directories_is_tabled_in_time_order(tmp_path):
    node0, node1 = tmp_path / "node0", tmp_path / "node1"
    write_rank(node1, 1, [replace(header(1, 2, host="node-9"), t=9.0), begin(1, 1, 10.0, "rollout", host="node-9"),
                          End(**common(1, step=1, t=11.0, host="node-9"), reason="signal")])
    write_rank(node0, 1, [replace(header(1, 2), t=0.5), begin(1, 0, 1.0, "rollout"), end(1, 0, 2.0, "rollout"),
                          begin(1, 1, 3.0, "rollout")])  # killed in step 1, restarted on node-9
    write_rank(node0, 0, [replace(header(0, 2), t=0.5), begin(0, 0, 1.0, "rollout"), end(0, 0, 2.0, "rollout")])
    ev = load_evidence([node0, node1])
    assert any("rank 1 appears in both" in w for w in ev.warnings)
    log = ev.run.ranks[1]
    assert log.host == "node-9" and log.open_path == "rollout" and str(log.end.reason) == "signal"
    rows = ev.phases[ev.phases["rank"] == 1]  # the begin at 3.0 never ends, and the restart forgets it
    assert rows["begin_t"].tolist() == [1.0, 10.0] and rows["end_t"].tolist()[0] == 2.0 and set(rows["host"]) == {"node-9"}


def test_a_file_without_header_takes_host_and_rank_from_its_first_record(tmp_path):
    path = tmp_path / "ranks" / "rank-copy.jsonl"  # not named by rank
    path.parent.mkdir()
    path.write_text("".join(json.dumps(r.to_dict()) + "\n"
                            for r in [begin(5, 0, 1.0, "rollout", host="gpu-7"), end(5, 0, 2.0, "rollout")]))
    log = read_rank_file(path)
    assert log.rank == 5 and log.host == "gpu-7" and log.records == []
    assert isinstance(log.last_record, PhaseEnd)


def test_an_integer_past_int64_in_a_float_field_is_tabled_as_json_reads_it(tmp_path):
    # orjson reads 2**64 + 1 as the float 2**64: the phase line is judged on json's reading instead.
    path = RunPaths(tmp_path).rank_file(0)
    path.parent.mkdir(parents=True)
    lines = [header(0, 1).to_dict(), begin(0, 0, 1.0, "a").to_dict(),
             {**end(0, 0, 2.0, "a").to_dict(), "duration_s": 2**64 + 1}]
    path.write_text("".join(json.dumps(d) + "\n" for d in lines))
    durations = as_list(read_rank_file(path).tabled().phases["duration_s"])
    assert durations == [2**64 + 1] and type(durations[0]) is int


def test_both_whole_file_modes_judge_every_damaged_line_alike(tmp_path):
    # The columns and the typed records come from one judgement of each line (decoder.judged_line): the
    # counts, the first bad line, the pids and the answers are the same whichever the caller asks for.
    good = [header(0, 1), begin(0, 0, 1.0, "rollout"), end(0, 0, 2.0, "rollout"), memory(0, 0, 3.0),
            Step(**common(0, step=0, t=4.0), metrics={"loss": 0.5})]
    damaged = [
        b"garbage, not json",
        json.dumps({**begin(0, 1, 5.0, "x").to_dict(), "rank": "x"}).encode(),  # a wrong type in a tabled kind
        json.dumps({**memory(0, 1, 6.0).to_dict(), "step": 2**64}).encode(),  # past int64: json's exact int
        json.dumps({**end(0, 1, 7.0, "x").to_dict(), "synced": "no"}).encode(),
        json.dumps({**begin(0, 1, 8.0, "y").to_dict(), "pid": 2000}).encode(),  # a second process, no header
        json.dumps({"schema": 1, "kind": "rollout_v9", "rank": 0, "nested": [[[]]]}).encode(),  # a kind unknown here
        b'{"schema":1,"kind":"step","rank":0,"metrics":null}',
        b'{"schema":1,"kind":"pha',  # torn: the rank was killed mid-write
    ]
    path = write_rank(tmp_path, 0, good)
    with path.open("ab") as f:
        f.write(b"\n".join(damaged))
    tabled, typed = read_rank_file(path), read_rank_file(path, columns=False)
    for answer in ("num_bad_lines", "first_bad_line", "truncated_tail", "pids", "open_path", "last_step", "end",
                   "errors", "headers", "host", "rank"):
        assert getattr(tabled, answer) == getattr(typed, answer), answer
    assert tabled.num_bad_lines == 5 and tabled.truncated_tail and tabled.pids == {1000, 2000}
    assert tabled.open_path == "y"
