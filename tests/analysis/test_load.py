import json
import shutil

import pytest
from rundata import LOGS, common, header, write_hang, write_rank

from grpo_doctor.analysis.load import EvidenceError, load_evidence
from grpo_doctor.runlog.eventlog import load_run
from grpo_doctor.schema import Error, PhaseBegin, PhaseEnd, Step


def test_phases_steps_and_errors_become_tables(tmp_path):
    write_rank(tmp_path, 0, [
        header(0, 1), PhaseBegin(**common(0, step=0, t=1.0), phase="rollout", path="rollout"),
        PhaseEnd(**common(0, step=0, t=3.5), phase="rollout", path="rollout", duration_s=2.5, synced=False),
        Step(**common(0, step=0, t=4.0), metrics={"loss": 0.5, "reward": 1.0}),
        PhaseBegin(**common(0, step=1, t=5.0), phase="forward", path="forward"),
        Error(**common(0, step=1, t=6.0), exc_type="RuntimeError", message="boom", traceback="", phase="forward",
              path="forward"),
    ])
    ev = load_evidence([tmp_path])
    done = ev.phases.dropna(subset=["duration_s"])
    assert done[["rank", "host", "step", "path", "duration_s"]].values.tolist() == [[0, "node-0", 0, "rollout", 2.5]]
    assert ev.phases[ev.phases.end_t.isna()].path.tolist() == ["forward"]  # still open when it stopped
    assert ev.steps[["rank", "step", "loss", "reward"]].values.tolist() == [[0, 0, 0.5, 1.0]]
    assert ev.errors[["rank", "exc_type", "phase"]].values.tolist() == [[0, "RuntimeError", "forward"]]


def test_a_watched_run_without_rank_files_and_raw_logs_are_read(tmp_path):
    write_hang(tmp_path, "node-9", 1, {"host": "node-9", "ranks": {"0": {"verdict": "stuck"}}, "culprits": [0]})
    sig_dir = tmp_path / "supervisor" / "node-9"
    sig_dir.joinpath("signatures.jsonl").write_text(json.dumps(
        {"kind": "nccl-timeout", "rank": 0, "line_number": 3, "text": "t", "fields": {"seq": 5}}) + "\nnot json\n")
    ev = load_evidence([tmp_path, LOGS / "torchrun_nccl_timeout.log"])
    assert ev.run is None and ev.hangs[0].host == "node-9"
    kinds: dict[str, set[str]] = {}
    for row in ev.signature_rows:
        kinds.setdefault(row["source"], set()).add(row["kind"])
    assert "nccl-timeout" in kinds[str(sig_dir / "signatures.jsonl")]
    assert "child-failed" in kinds[str(LOGS / "torchrun_nccl_timeout.log")]
    assert any("unreadable" in w for w in ev.warnings)


def test_binary_and_empty_files_are_tolerated(tmp_path):
    ev = load_evidence([LOGS / "binary_garbage.log", LOGS / "empty.log"])
    assert ev.phases.empty and ev.run is None


def test_a_directory_of_plain_logs_is_scanned(tmp_path):
    shutil.copy(LOGS / "cuda_oom_variants.log", tmp_path)
    assert "cuda-oom" in {row["kind"] for row in load_evidence([tmp_path]).signature_rows}


def test_a_missing_path_is_one_message_with_a_hint(tmp_path):
    with pytest.raises(EvidenceError, match="does not exist") as info:
        load_evidence([tmp_path / "nope"])
    assert info.value.hint


def _damaged_run(tmp_path):
    """A rank file whose lines a corrupt disk or a cut write can leave: a lone surrogate, escaped and
    as raw bytes, in a phase name, and a time that is not a number."""
    path = write_rank(tmp_path, 0, [header(0, 1), Step(**common(0, step=0, t=4.0), metrics={"loss": 0.5})])
    begin = PhaseBegin(**common(0, step=1, t=5.0), phase="rollout", path="rollout").to_dict()
    escaped = json.dumps({**begin, "phase": "roll\ud800out", "path": "roll\ud800out"}).encode()
    raw = json.dumps({**begin, "t": 6.0}).encode().replace(b'"rollout"', b'"r\xed\xa0\x80"')
    not_a_time = json.dumps({**begin, "t": "yesterday"}).encode()
    with path.open("ab") as f:
        f.write(b"\n".join([escaped, raw, not_a_time]) + b"\n")
    return tmp_path


def test_lone_surrogates_are_replaced_and_a_time_that_is_no_number_is_a_bad_line(tmp_path):
    ev = load_evidence([_damaged_run(tmp_path)])  # the tabled reader of report
    assert set(ev.phases.path) == {"r\ufffd", "roll\ufffdout"}  # both records kept
    assert any("skipped 1 unreadable line" in w for w in ev.warnings), ev.warnings
    log = load_run([tmp_path]).ranks[0]  # the record reader of watch and summary
    assert [r.path for r in log.of_kind(PhaseBegin)] == ["roll\ufffdout", "r\ufffd"]
    assert log.num_bad_lines == 1


def test_a_report_on_damaged_lines_is_written_with_a_warning(tmp_path, capsys):
    from grpo_doctor.cli.main import main

    run_dir = _damaged_run(tmp_path)
    assert main(["report", str(run_dir), "--json"]) == 0
    assert any("unreadable" in w for w in json.loads(capsys.readouterr().out)["warnings"])
    assert (run_dir / "report.html").stat().st_size > 0
