import json
import shutil

import pytest
from rundata import LOGS, common, header, write_hang, write_rank

from grpo_doctor.analysis.load import EvidenceError, load_evidence
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
    assert ev.run is None and ev.hangs[0]["host"] == "node-9"
    kinds = ev.signatures.groupby("source").kind.apply(set).to_dict()
    assert "nccl-timeout" in kinds[str(sig_dir / "signatures.jsonl")]
    assert "child-failed" in kinds[str(LOGS / "torchrun_nccl_timeout.log")]
    assert any("unreadable" in w for w in ev.warnings)


def test_binary_and_empty_files_are_tolerated(tmp_path):
    ev = load_evidence([LOGS / "binary_garbage.log", LOGS / "empty.log"])
    assert ev.phases.empty and ev.run is None


def test_a_directory_of_plain_logs_is_scanned(tmp_path):
    shutil.copy(LOGS / "cuda_oom_variants.log", tmp_path)
    assert "cuda-oom" in set(load_evidence([tmp_path]).signatures.kind)


def test_a_missing_path_is_one_message_with_a_hint(tmp_path):
    with pytest.raises(EvidenceError, match="does not exist") as info:
        load_evidence([tmp_path / "nope"])
    assert info.value.hint
