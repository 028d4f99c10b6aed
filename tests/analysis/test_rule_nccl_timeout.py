from rundata import LOGS

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import nccl_timeout

LINE = ("[rank{r}]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank {r}] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=8, NumelOut=8, Timeout(ms)=600000) "
        "ran for 600081 milliseconds before timing out.\n")


def test_same_seqnum_everywhere_names_the_rank_that_never_reported():
    [f] = nccl_timeout.check(load_evidence([LOGS / "torchrun_nccl_timeout.log"]), nccl_timeout.Config())
    assert (f.id, f.severity, f.ranks) == ("nccl-timeout", "critical", (7,))
    ev = f.evidence
    assert (ev["seq"], ev["op"], ev["numel_in"], ev["numel_out"], ev["timeout_ms"]) == (1043, "ALLREDUCE", 1259621,
                                                                                         1259621, 600000)
    assert ev["ranks"] == [0, 1, 2, 3, 4, 5, 6] and ev["absent_ranks"] == [7] and not ev["desync"]
    assert ev["ran_for_ms"] >= 600081 and ev["last_completed_by_rank"][0] == 1042 and ev["last_completed"] == 1042
    assert isinstance(ev["pg"], int) or ev["pg"] is None


def test_different_seqnums_are_a_desync_pointing_at_different_code_paths(tmp_path):
    log = tmp_path / "job.log"
    log.write_text(LINE.format(r=0, seq=20) + LINE.format(r=1, seq=21))
    [f] = nccl_timeout.check(load_evidence([log]), nccl_timeout.Config())
    assert f.evidence["desync"] and f.evidence["seqs"] == {0: 20, 1: 21} and f.evidence["seq"] == 20
    assert "different code paths" in f.hints[0]
    # no header shows a setting differing between nodes: no "make the launch identical" advice
    assert nccl_timeout.HINT_LAUNCH not in f.hints
    assert f.hints[-1].startswith("This job's collective timeout was 600 s.") and "--ddp_timeout 600" not in f.hints[-1]


def test_a_desync_with_launch_settings_differing_between_nodes_advises_identical_launches(tmp_path):
    from rundata import header, write_rank
    for rank, nproc in ((0, "2"), (2, "1")):
        write_rank(tmp_path / "run", rank, [header(rank, launch={"NNODES": "2", "NPROC_PER_NODE": nproc})])
    log = tmp_path / "job.log"
    log.write_text(LINE.format(r=0, seq=20) + LINE.format(r=2, seq=21))
    [f] = nccl_timeout.check(load_evidence([tmp_path / "run", log]), nccl_timeout.Config())
    assert f.evidence["desync"] and f.hints[:2] == (nccl_timeout.HINT_DESYNC, nccl_timeout.HINT_LAUNCH)
