"""The "collective-mismatch" rule on real gloo flight-recorder dumps (tests/data/fr/), and on dumps made live."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO, clean_env

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import collective_mismatch, run_rules
from grpo_doctor.schema import RunPaths

FR = Path(__file__).resolve().parents[1] / "data" / "fr"


def _findings(*paths):
    return list(collective_mismatch.check(load_evidence(list(paths)), collective_mismatch.Config()))


def _run_dir(tmp_path, scenario):
    fr = RunPaths(tmp_path / "run").flight_recorder
    shutil.copytree(FR / scenario, fr)
    return fr.parent


def test_the_rank_that_skipped_an_all_reduce_is_named_with_its_last_call(tmp_path):
    [f] = _findings(_run_dir(tmp_path, "skip"))
    assert (f.id, f.severity, f.ranks) == ("collective-mismatch", "critical", (2,))
    assert "rank(s) 2 never issued all_reduce #3 of process group 0 (default_pg)" in f.title
    ev = f.evidence
    assert (ev["seq"], ev["op"], ev["input_sizes"], ev["pg"]) == (3, "all_reduce", [[16]], "0 (default_pg)")
    assert ev["ranks_present"] == [0, 1] and ev["ranks_missing"] == [2] and ev["ranks_without_dump"] == []
    assert ev["last_issued"] == {0: 3, 1: 3, 2: 2} and set(ev["last_completed"]) == {0, 1, 2}
    assert ev["missing_last_calls"][2]["op"] == "broadcast" and "make_dumps.py" in ev["missing_last_calls"][2]["frame"]
    hints = " ".join(f.hints)
    assert "if rank == 0:" in hints and "drop_last" in hints and "stack" in hints
    assert collective_mismatch.HINT_LAUNCH not in f.hints  # no evidence of launch settings differing


def test_a_different_shape_names_the_odd_rank_and_counts_the_later_mismatches():
    [f] = _findings(FR / "shape")
    assert f.ranks == (2,) and "different shapes" in f.title and "rank(s) 2: all_reduce [[6, 4]]" in f.title
    ev = f.evidence
    assert ev["kinds"] == ["sizes"] and ev["odd_ranks"] == [2] and ev["seq"] == 3
    assert ev["calls"][2]["input_sizes"] == [[6, 4]] and ev["calls"][0]["input_sizes"] == [[4, 6]]
    assert ev["num_mismatched_seqs"] == 2 and ev["first_mismatched_seqs"] == [3, 4]


def test_dump_files_given_directly_are_matched():
    [f] = _findings(*sorted((FR / "skip").glob("nccl_trace_rank_?")))
    assert f.evidence["ranks_missing"] == [2]


def test_ranks_that_issued_the_same_collectives_give_no_finding():
    assert _findings(FR / "skip" / "nccl_trace_rank_0", FR / "skip" / "nccl_trace_rank_1") == []


def test_an_unreadable_dump_in_fr_is_a_warning_naming_it_and_the_rest_still_count(tmp_path):
    run_dir = _run_dir(tmp_path, "skip")
    (RunPaths(run_dir).flight_recorder / "nccl_trace_rank_3").write_bytes(b"")  # killed while dumping
    ev = load_evidence([run_dir])
    assert any("nccl_trace_rank_3" in w and "empty file" in w for w in ev.warnings)
    findings, warnings = run_rules(ev)
    assert [f.ranks for f in findings if f.id == "collective-mismatch"] == [(2,)]
    assert not any("collective_mismatch failed" in w for w in warnings)


@pytest.mark.distributed
def test_dumps_written_live_by_torchrun_gloo_name_the_skipping_rank(tmp_path):
    fr = RunPaths(tmp_path / "run").flight_recorder
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone",
           str(REPO / "tests" / "data" / "fr" / "make_dumps.py"), "skip", str(fr)]
    done = subprocess.run(cmd, cwd=tmp_path, env=clean_env(OMP_NUM_THREADS="1"), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    [f] = _findings(fr.parent)
    assert f.ranks == (1,) and f.evidence["op"] == "all_reduce" and f.evidence["ranks_present"] == [0]


INJECT = REPO / "tests" / "data" / "inject"


def test_without_dumps_the_ranks_tracebacks_name_the_rank_that_called_the_extra_collective():
    # demo --inject desync:rank=1,step=2: rank 1 broadcast in rollout (timed out), rank 0 all_gathered in
    # reward (lost its peer). A tie of one rank each: rank 0 had completed rollout, so rank 1 is the odd one.
    [f] = collective_mismatch.check(load_evidence([INJECT / "desync"]), collective_mismatch.Config())
    assert (f.ranks, f.phase, f.step) == ((1,), "rollout", 2)
    assert (f.evidence["source"], f.evidence["decided_by"]) == ("tracebacks", "phase order")
    assert f.evidence["calls"][1]["site"] == "inject.py:190" and f.evidence["calls"][0]["site"] == "dist.py:75"
    assert f.evidence["calls"][1]["op"] == "broadcast_object_list" and f.evidence["calls"][0]["op"] == "all_gather"
    assert "inject.py:190" in f.title and "dist.py:75" in f.title


def test_under_watch_the_stacks_name_the_rank_that_called_the_extra_collective():
    [f] = collective_mismatch.check(load_evidence([INJECT / "watch_desync"]), collective_mismatch.Config())
    assert (f.ranks, f.evidence["source"], f.evidence["decided_by"]) == ((1,), "stacks", "phase order")
    assert f.evidence["calls"][1]["site"] == "inject.py:190" and f.evidence["calls"][0]["site"] == "dist.py:75"


def test_a_hang_or_a_crash_is_no_mismatch():
    for run in ("hang", "oom", "watch_hang"):
        assert not list(collective_mismatch.check(load_evidence([INJECT / run]), collective_mismatch.Config())), run


CORPUS = Path(__file__).parent.parent / "data" / "corpus"


def test_watchdog_lines_of_different_ops_at_one_seq_name_the_odd_rank_and_lead_the_timeouts():
    findings, _ = run_rules(load_evidence([CORPUS / "pytorch" / "watchdog-timeout-rank3-broadcast-vs-allreduce.log"]))
    lead = findings[0]
    assert (lead.id, lead.ranks, lead.role) == ("collective-mismatch", (3,), "root-cause")
    assert lead.evidence["seq"] == 4084 and lead.evidence["calls"][3]["op"] == "BROADCAST"
    assert {f.id: f.caused_by for f in findings[1:]} == {"nccl-timeout": "collective-mismatch@3"}


def test_an_op_name_a_paste_cut_short_is_no_mismatch():
    findings = list(collective_mismatch.check(
        load_evidence([CORPUS / "ms-swift" / "terminal-wrapped-allgather-timeout.log"]), collective_mismatch.Config()))
    assert findings == []
