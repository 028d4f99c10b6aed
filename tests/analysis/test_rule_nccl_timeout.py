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
    assert ev["ran_for_ms"] >= 600081 and ev["last_completed"][0] == 1042


def test_different_seqnums_are_a_desync_pointing_at_launch_settings(tmp_path):
    log = tmp_path / "job.log"
    log.write_text(LINE.format(r=0, seq=20) + LINE.format(r=1, seq=21))
    [f] = nccl_timeout.check(load_evidence([log]), nccl_timeout.Config())
    assert f.evidence["desync"] and f.evidence["seqs"] == {0: 20, 1: 21} and f.evidence["seq"] == 20
    assert "identical across nodes" in f.hints[0]
