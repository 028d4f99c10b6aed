"""Crash and fault wordings recognised by structure (issue 26 part 2), on verbatim lines of public issues
(tests/data/logs/structural_wordings.log; each line's source in structural_wordings.sources.md): process
managers' exit lines (torch.multiprocessing, Kubernetes, Ray's core worker), gloo's lost peer behind a CI
log's time prefix, NCCL failure reports without a watchdog line, a dump signal naming the rank that timed
out, and which of two torchrun root causes came first."""
from __future__ import annotations

from pathlib import Path

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.log_crashes import crashes_from_logs
from grpo_doctor.analysis.rules import run_rules
from grpo_doctor.logs.signatures import scan_file, scan_text

LOG = Path(__file__).resolve().parents[1] / "data" / "logs" / "structural_wordings.log"


def _by_line():
    return {s.line_number: s for s in scan_file(LOG)}


def _findings(text: str, tmp_path: Path):
    log = tmp_path / "excerpt.log"
    log.write_text(text, encoding="utf-8")
    findings, _ = run_rules(load_evidence([log]))
    return findings


def _lines(*numbers: int) -> str:
    lines = LOG.read_text(encoding="utf-8").splitlines()
    return "".join(lines[n - 1] + "\n" for n in numbers)


def test_gloo_lost_peer_is_read_behind_a_ci_time_prefix_and_without_a_traceback():
    sigs = _by_line()
    for line, ip in ((1, "172.17.0.2"), (4, "172.28.0.12")):
        assert (sigs[line].kind, sigs[line].fields["component"], sigs[line].fields["ip"]) == (
            "worker-died", "peer-lost", ip)


def test_a_traceback_behind_a_ci_time_prefix_is_read_with_its_exception():
    [tb] = [s for s in scan_text(_lines(20, 21, 22, 1)) if s.kind == "python-traceback"]
    assert tb.fields["exc_type"] == "RuntimeError" and tb.fields["frames"] == [
        "/opt/conda/lib/python3.6/site-packages/torch/distributed/distributed_c10d.py:2617 in barrier"]


def test_torch_multiprocessing_exits_name_the_process_index_as_local_rank():
    sigs = _by_line()
    found = {n: (sigs[n].fields["local_rank"], sigs[n].fields["exitcode"], sigs[n].fields["signal"])
             for n in (2, 3, 5, 6)}
    assert found == {2: (3, 10, None), 3: (2, 10, None), 5: (0, 1, None), 6: (0, None, "SIGKILL")}
    assert {sigs[n].fields["origin"] for n in found} == {"multiprocessing"}


def test_a_sigkilled_multiprocessing_child_is_a_crash_suspected_of_a_host_oom(tmp_path):
    [crash] = _findings(_lines(6), tmp_path)
    assert crash.id == "rank-crash" and crash.ranks == (0,)
    assert crash.evidence["suspected"] == "host-oom" and crash.evidence["rank_is_local"]


def test_gloo_peer_loss_and_the_harness_exits_in_a_ci_log(tmp_path):
    findings = _findings(_lines(1, 2, 3), tmp_path)
    assert [f.id for f in findings] == ["rank-crash", "rank-crash"]
    peer = next(f for f in findings if not f.ranks)
    assert "Connection closed by peer 172.17.0.2:16786" in peer.title
    exits = next(f for f in findings if f.ranks)
    assert exits.ranks == (2, 3) and exits.evidence["exitcode"] == 10


def test_kubernetes_exit_code_137_says_sigkill_and_how_to_tell_oom_from_preemption(tmp_path):
    sigs = _by_line()
    assert sigs[9].fields["exitcode"] == 137 and sigs[10].fields["exitcode"] == 137
    for text in (_lines(7, 8, 9), _lines(10)):
        [crash] = _findings(text, tmp_path)
        assert crash.id == "rank-crash" and "SIGKILL (exit code 137)" in crash.title
        detail = crash.evidence["exit_detail"]
        assert "OOMKilled" in detail and "Memory cgroup out of memory" in detail and "Preempting" in detail


def test_ray_core_worker_actor_death_is_a_ray_actor_crash(tmp_path):
    [crash] = _findings(_lines(11), tmp_path)
    assert crash.id == "rank-crash" and crash.title.startswith("Ray actor 633c65fbc45b072368cc3bfd01000000 died")
    assert "creation task" in crash.evidence["exc_type"]


def test_nccl_taking_the_process_down_without_a_watchdog_line_is_an_nccl_error_of_those_ranks(tmp_path):
    for text, rank in ((_lines(12), 3), (_lines(13), 2)):
        [finding] = _findings(text, tmp_path)
        assert finding.id == "nccl-error" and finding.ranks == (rank,)


def test_nccl_taking_the_process_down_after_a_watchdog_timeout_is_the_timeout_only(tmp_path):
    timeout = ("[rank3]:[E626 16:48:25.440243908 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective "
               "operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
               "ran for 600081 milliseconds before timing out.\n")
    assert [f.id for f in _findings(timeout + _lines(12), tmp_path)] == ["nccl-timeout"]


def test_a_dump_signal_names_the_rank_that_timed_out_not_the_one_that_printed_it(tmp_path):
    sigs = _by_line()
    assert (sigs[14].rank, sigs[14].fields["rank"], sigs[14].fields["timed_out_rank"]) == (2, 5, 2)
    assert (sigs[15].rank, sigs[15].fields["timed_out_rank"]) == (1, 1)
    [timeout] = _findings(_lines(14), tmp_path)
    assert timeout.id == "nccl-timeout" and timeout.evidence["ranks"] == [2]


def test_nccl_info_error_chains_name_the_result_code(tmp_path):
    sigs = _by_line()
    assert (sigs[16].fields["error_code"], sigs[16].fields["file"], sigs[16].fields["line"]) == (
        "ncclInternalError", "misc/socket.cc", 561)
    assert sigs[18].fields["error_code"] == "ncclSystemError"
    [internal] = _findings(_lines(16, 17), tmp_path)
    assert internal.id == "nccl-error" and internal.evidence["error_kind"] == "internal"
    [remote] = _findings(_lines(19), tmp_path)
    assert remote.evidence["error_kind"] == "remote-peer" and remote.evidence["peers"] == ["10.104.148.191"]


def test_of_two_torchrun_root_causes_the_earliest_by_time_is_the_root():
    # Two agents' blocks as two nodes print them (the first block read is the later failure).
    block = ("Root Cause (first observed failure):\n[0]:\n  time      : {time}\n  host      : {host}\n"
             "  rank      : {rank} (local_rank: 0)\n  exitcode  : {code} (pid: {pid})\n  error_file: <N/A>\n"
             "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n"
             "============================================================\n")
    text = (block.format(time="2024-11-02_21:03:09", host="node-b", rank=8, code=-6, pid=2)
            + block.format(time="2024-11-02_21:03:02", host="node-a", rank=0, code=1, pid=1))
    rows = [{"kind": s.kind, "rank": s.rank, "fields": s.fields, "source": "x", "host": None,
             "line_number": s.line_number, "text": s.text} for s in scan_text(text)]
    by_rank, _ = crashes_from_logs(rows)
    assert (by_rank[0]["root_cause"], by_rank[8]["root_cause"]) == (True, False)


def test_the_taking_down_line_alone_is_an_nccl_error_of_its_rank(tmp_path):
    for text, ranks in ((_lines(23), ()), (_lines(24), (3,))):
        [finding] = _findings(text, tmp_path)
        assert (finding.id, finding.ranks) == ("nccl-error", ranks)
        assert "took the process down" in finding.title


def test_the_taking_down_line_after_a_watchdog_timeout_is_the_timeouts(tmp_path):
    timeout = ("[rank3]:[E626 16:48:25.440243908 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective "
               "operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
               "ran for 600081 milliseconds before timing out.\n")
    assert [f.id for f in _findings(timeout + _lines(24), tmp_path)] == ["nccl-timeout"]


def test_ray_failing_the_pending_tasks_of_a_dead_actor_is_judged_by_the_actors_death_line(tmp_path):
    # Ray logs the pending line for every actor that ends without restarts, a ray.kill or a shutdown too:
    # the actor's own "state: DEAD" line says whether it failed (ray#18586: creation_task_exception=1).
    [crash] = _findings(_lines(11, 25), tmp_path)
    assert crash.id == "rank-crash" and crash.title.startswith("Ray actor 633c65fbc45b072368cc3bfd01000000 died")
    killed = ("[2024-05-02 10:11:19,866 I 2122527 2122927] actor_manager.cc:139: received notification on actor, "
              "state: DEAD, actor_id: 633c65fbc45b072368cc3bfd01000000, ip address: 10.0.0.5, port: 44673, "
              "num_restarts: 0, death cause: RAY_KILL\n")
    queue = ("[2024-05-02 10:11:19,866 I 2122527 2122927] direct_actor_transport.cc:228: Failing tasks waiting for "
             "death info, size=0, actor_id=633c65fbc45b072368cc3bfd01000000\n")
    assert _findings(_lines(25), tmp_path) == []
    assert _findings(killed + _lines(25) + queue, tmp_path) == []  # a healthy run's ray.kill at the end


def test_an_nccl_communicators_abort_alone_is_teardown_not_a_failure(tmp_path):
    assert _findings(_lines(26), tmp_path) == []
    assert [s.kind for s in scan_text(_lines(26))] == []
