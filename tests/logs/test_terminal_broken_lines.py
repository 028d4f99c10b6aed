"""Lines a terminal padded or broke, as users paste them (issue 26). Real lines: the corpus's
other/tranx-dmesg-oom-terminal-padded (pcyin/tranX#41: dmesg padded at a fixed width, a number cut by
the padding) and pytorch/c10d-test-wrapped-watchdog-timeout-rank0 (pytorch/pytorch#122850: a watchdog
line wrapped after its rank tag)."""
from pathlib import Path

from grpo_doctor.logs.oom import parse_kernel_oom
from grpo_doctor.logs.signatures import scan_file

CORPUS = Path(__file__).resolve().parents[1] / "data" / "corpus"


def test_a_padded_dmesg_oom_line_keeps_its_pid_and_sizes():
    line = (CORPUS / "other" / "tranx-dmesg-oom-terminal-padded.log").read_text(encoding="utf-8").splitlines()[1]
    assert "53312244 " in line  # the padding cuts total-vm from its unit
    found = parse_kernel_oom(line)
    assert found is not None
    assert (found["pid"], found["process"]) == (25315, "python3")
    assert (found["total_vm_bytes"], found["anon_rss_bytes"]) == (53312244 * 1024, 31451456 * 1024)


def test_spaces_inside_a_normal_oom_line_are_not_padding():
    found = parse_kernel_oom("Out of memory: Killed process 40417 (python) total-vm:1000kB, anon-rss:2000kB, file-rss:0kB")
    assert found is not None and (found["pid"], found["anon_rss_bytes"]) == (40417, 2000 * 1024)


def test_a_watchdog_line_wrapped_after_its_rank_tag_names_that_rank():
    sigs = scan_file(CORPUS / "pytorch" / "c10d-test-wrapped-watchdog-timeout-rank0.log")
    [timeout] = [s for s in sigs if s.kind == "nccl-timeout"]
    assert timeout.rank == 0
    assert (timeout.fields["seq"], timeout.fields["timeout_ms"], timeout.fields["ran_for_ms"]) == (2, 1000, 1099)


def test_a_bare_line_after_a_line_that_says_more_than_a_rank_tag_gets_no_rank(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("[rank3]:[E327 17:04:16.986381360 ProcessGroupNCCL.cpp:565] [Rank 3] starting\n"
                   "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=12, "
                   "NumelOut=12, Timeout(ms)=1000) ran for 1099 milliseconds before timing out.\n")
    [timeout] = [s for s in scan_file(log) if s.kind == "nccl-timeout"]
    assert timeout.rank is None
