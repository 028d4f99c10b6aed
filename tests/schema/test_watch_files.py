"""watch's hang reports and summary as types: what watch wrote in a recorded run reads back whole and
writes the same keys again; older files load; damaged ones are refused with the field named."""
import json
from pathlib import Path

import pytest

from grpo_doctor.analysis.watch_files import read_hang_report, read_summary, read_watch_dir
from grpo_doctor.schema.json_shapes import FormatError
from grpo_doctor.schema.run_paths import RunPaths, WatchPaths
from grpo_doctor.schema.stacks import Frame, ThreadStack
from grpo_doctor.schema.watch_files import HangRank, HangReport, WatchedRank, WatchSummary

RECORDED = Path(__file__).parents[1] / "data" / "inject" / "watch_hang" / "supervisor" / "vm"


def test_a_recorded_hang_report_reads_as_attributes_and_writes_back_the_same_json():
    data = json.loads((RECORDED / "hang-1.json").read_text())
    report = HangReport.from_dict(data)
    assert (report.host, report.culprits, report.odd_ranks) == ("vm", (1,), (1,))
    assert report.ranks[1] == HangRank(pid=31509, verdict="stuck", open_phase="rollout", step=1, idle_s=5.0,
                                       timeout_s=5.0)
    assert report.stacks[1].frames[0].function == "_block_forever"
    assert report.to_dict() == data  # the on-disk keys and values are kept
    assert HangReport.from_dict(json.loads(json.dumps(report.to_dict()))) == report


def test_a_recorded_summary_reads_as_attributes_and_writes_back_the_same_json():
    data = json.loads((RECORDED / "summary.json").read_text())
    summary = WatchSummary.from_dict(data)
    assert summary.hang_ended_by_watch and summary.exit_status == 124 and summary.live_scan_complete
    assert summary.ranks[0] == WatchedRank(pid=31508, step=1, open_phase="reward", ended="signal")
    assert summary.to_dict() == data
    assert WatchSummary.from_dict(json.loads(json.dumps(summary.to_dict()))) == summary


def test_a_hang_report_built_by_watch_round_trips():
    thread = ThreadStack(7, "MainThread", False, (Frame("all_reduce", "torch/distributed/distributed_c10d.py", 3252),))
    report = HangReport(host="node-1", detected_t=1.5, ranks={0: HangRank(pid=7, verdict="moving"), 3: HangRank()},
                        groups=("rank 0: all_reduce",), culprits=(3,), odd_ranks=(3,), stack_dirs=("a", "b"),
                        stack_errors={3: "process gone: 8"}, ptrace_denied=True, flight_recorder_files=("fr-0",),
                        gpus=({"index": 0, "util_pct": 0},), stacks={0: thread})
    assert HangReport.from_dict(json.loads(json.dumps(report.to_dict()))) == report
    assert report.ranks_with_verdict("moving") == (0,)


def test_older_and_minimal_watch_files_load_with_defaults():
    # Before watch kept stacks, and a hang report as an early version named the odd ranks.
    old = HangReport.from_dict({"host": "n", "ranks": {"2": {"verdict": "stuck"}}, "odd": [2]})
    assert old.odd_ranks == (2,) and old.stacks == {} and old.ranks[2].open_phase is None
    assert HangReport.from_dict({}) == HangReport()
    # Before the live scan: the output counts as scanned.
    summary = WatchSummary.from_dict({"host": "n", "hang_ended_by_watch": True, "ranks": {}})
    assert summary.live_scan_complete and summary.num_hangs == 0 and summary.hang_ended_by_watch
    assert WatchSummary.from_dict({"live_scan_complete": None}).live_scan_complete


@pytest.mark.parametrize("data, field", [
    ({"ranks": {"0": {"verdict": 3}}}, "ranks"),
    ({"culprits": ["x"]}, "culprits"),
    ({"stacks": {"0": {"frames": [{"function": 1}]}}}, "stacks"),
    ({"stacks": {"0": {"frames": []}}}, "stacks"),  # no thread_id
    ({"stacks": {"0": {"frames": 5}}}, "stacks"),  # once a TypeError out of the report
    ({"stacks": {"0": {"frames": True}}}, "stacks"),
    ({"detected_t": "soon"}, "detected_t"),
    ({"ranks": {"zero": {}}}, "ranks"),
    ({"ptrace_denied": "no"}, "ptrace_denied"),
])
def test_a_damaged_hang_report_names_the_field(data, field):
    with pytest.raises(FormatError, match=f"field {field} is"):
        HangReport.from_dict(data)


@pytest.mark.parametrize("data, message", [
    ([1, 2], "holds an array, not an object"),
    (None, "holds null, not an object"),
    ({"ranks": {"0": 7}}, "field ranks is an object"),
    ({"live_scan_complete": "no"}, "field live_scan_complete is a string"),
    ({"signatures": {"oom": "many"}}, "field signatures is an object"),
    ({"ranks": {"0": {"pid": True}}}, "field ranks is an object"),  # a bool is no pid
    ({"a": json.loads("[" * 20 + "]" * 20)}, "nested more than 16 levels deep"),
])
def test_a_damaged_summary_is_refused_with_what_is_wrong(data, message):
    with pytest.raises(FormatError, match=message):
        WatchSummary.from_dict(data)


def test_reading_a_watch_directory_warns_once_per_damaged_file_and_keeps_the_rest(tmp_path):
    watch = RunPaths(tmp_path).watch_files("node-0")
    watch.root.mkdir(parents=True)
    watch.summary_json.write_text('{"ranks": {"0": 7}}')
    watch.hang_report(2).write_text(json.dumps({"ranks": {"1": {"verdict": "stuck"}}, "culprits": [1]}))
    watch.hang_report(10).write_text(json.dumps({"host": "elsewhere"}))
    watch.hang_report(3).write_text("{cut sho")
    files = {p.name: p for p in watch.root.iterdir()}
    warnings: list[str] = []
    summary, hangs = read_watch_dir(watch, files, warnings)
    assert summary is None and [(h.host, h.culprits) for h in hangs] == [("node-0", (1,)), ("elsewhere", ())]
    assert hangs[0].file == str(watch.hang_report(2))  # in order of N, not of names; the host from the folder
    assert len(warnings) == 2 and "summary.json: not as watch writes it (field ranks" in warnings[0]
    assert "hang-3.json: cannot be read" in warnings[1]


def test_an_oversized_or_unreadable_watch_file_is_one_warning(tmp_path):
    big = tmp_path / "summary.json"
    big.write_text('{"ranks": ' + "[" * 1100 + "]" * 1100 + "}")
    warnings: list[str] = []
    assert read_summary(big, warnings) is None and "nested too deeply" in warnings[0]
    assert read_hang_report(tmp_path / "hang-9.json", warnings) is None and "cannot be read" in warnings[1]
    assert WatchPaths.hang_number(Path("hang-12.json")) == 12 and WatchPaths.hang_number(Path("summary.json")) is None
