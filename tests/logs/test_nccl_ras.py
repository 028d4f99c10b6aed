"""NCCL's RAS report (`ncclras`), text and JSON, on real outputs from NCCL's docs and issues
(tests/data/nccl_ras/SOURCES.md): the typed summary, and the report read out of a log line by line."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpo_doctor.logs import nccl_ras
from grpo_doctor.logs.nccl_ras import RasProcess, RasRank, RasReport, parse, parse_json, parse_text_reports
from grpo_doctor.logs.signatures import scan_file, scan_text

RAS = Path(__file__).resolve().parents[1] / "data" / "nccl_ras"


def _read(name: str) -> str:
    return (RAS / name).read_text()


def test_an_incomplete_communicator_names_the_missing_rank_with_its_gpu_process_and_node():
    report = parse(_read("example_incomplete.txt"))  # NCCL 2.30.7, 8 ranks on 2 nodes, rank 7 exited
    assert report.form == "text" and report.verdict == "incomplete"
    [(comm, rank)] = report.missing_ranks
    assert (comm.label, comm.hash, comm.size, comm.num_missing, comm.status) == (
        "#0-0", "1bdb83b038775869", 8, 1, "RUNNING")
    assert rank == RasRank(rank=7, node="node1", pid=3748990, gpu=3, nvml_gpu=3)
    assert report.missing_processes == (RasProcess(pid=3748990, node="node1", gpus=(3,)),)
    assert report.num_missing_processes == 1 and report.nodes == ["node1"]
    [group] = report.groups
    assert (group.ranks_per_node, group.ranks_per_comm, group.ranks_in_group, group.errors) == ("3-4", 8, 7,
                                                                                             ("INCOMPLETE",))


def test_nccl_2_24_prints_only_the_missing_rank_numbers_and_the_process_apart():
    report = parse(_read("guide_incomplete.txt"))
    [(comm, rank)] = report.missing_ranks
    assert (comm.label, comm.size, rank.rank, rank.node, rank.pid) == ("#0-0", 32, 21, None, None)
    assert report.missing_processes == (RasProcess(pid=3487984, node="172.16.64.213", gpus=(5,)),)
    assert (report.timeouts, report.collection_s) == (2, 2.05)
    dead = parse(_read("guide_dead.txt"))
    assert dead.verdict == "dead" and dead.num_dead_processes == 1
    assert dead.dead_processes == (RasProcess(pid=3487984, node="172.16.64.213", gpus=(5,)),)
    assert [r.rank for _, r in dead.missing_ranks] == [21]


def test_a_dead_process_after_the_communicators_are_gone():
    report = parse(_read("example_dead.txt"))
    assert report.verdict == "dead" and report.no_communicators and not report.communicators
    assert report.dead_processes == (RasProcess(pid=3748990, node="node1", gpus=(3,)),)


def test_the_json_form_gives_each_communicators_size_and_missing_ranks():
    report = parse(_read("guide_status.json"))  # ncclras -f json, NCCL 2.29.1
    assert (report.form, report.nccl_version, report.cuda_runtime, report.verdict) == ("json", "2.29.1", 13000,
                                                                                      "incomplete")
    [comm] = report.communicators
    assert (comm.hash, comm.size, comm.num_reporting, comm.num_missing, comm.problems) == (
        "ae94423cfbb2ef4a", 2, 1, 1, ("INCOMPLETE",))
    assert comm.missing == (RasRank(rank=1, node="172.16.64.245", pid=1524345, gpu=1, nvml_gpu=1,
                                    detail="unresponsive"),)
    assert not comm.errors and report.timeouts == 0


def test_json_ranks_with_an_nccl_error_or_declared_dead_are_read():
    data = json.loads(_read("guide_status.json"))  # the real sample, its statuses changed
    data["communicators"][0]["ranks"][0]["status"]["async_error"] = 6
    data["communicators"][0]["missing_ranks"][0]["status"]["considered_dead"] = True
    report = parse_json(json.dumps(data))
    [comm] = report.communicators
    assert comm.errors[0].rank == 0 and comm.errors[0].detail == "async_error 6 (ncclRemoteError)"
    assert report.verdict == "dead"
    assert report.dead_processes == (RasProcess(pid=1524345, node="172.16.64.245", gpus=(1,)),)


def test_monitor_mode_peer_dead_events_text_and_json():
    text = parse(_read("guide_monitor_peer_dead.txt"))
    event = parse(_read("guide_monitor_peer_dead.json"))
    for report in (text, event):
        assert report.form == "monitor" and report.verdict == "dead"
        assert report.dead_processes == (RasProcess(pid=1524345, node="172.16.64.245", gpus=(1,)),)


def test_a_mismatch_lists_the_outlier_ranks_with_what_they_launched():
    report = parse(_read("issue_1911_mismatch.txt"))  # NCCL 2.26.2, 4 nodes x 8 GPUs
    assert (report.nccl_version, report.num_nodes, report.num_processes, report.num_gpus) == ("2.26.2", 4, 32, 32)
    assert report.verdict == "mismatch" and not report.missing_ranks
    [comm] = report.communicators
    assert comm.mismatch == "AllGather operation counts"
    assert [(r.rank, r.gpu, r.pid, r.node, r.detail) for r in comm.mismatched] == [
        (12, 4, 323032, "10.137.190.124", "has launched up to operation 641"),
        (13, 5, 323033, "10.137.190.124", "has launched up to operation 641")]
    straggler = parse(_read("example_mismatch.txt")).communicators[0].mismatched
    assert [(r.rank, r.detail) for r in straggler] == [(7, "has launched up to operation 60")]
    status = parse(_read("guide_finalize_mismatch.txt")).communicators[0]
    assert [r.detail for r in status.mismatched] == ["has status RUNNING"] * 4 + ["has status FINALIZE"] * 2


def test_uneven_nodes_give_the_totals_table_and_a_healthy_report_is_ok():
    report = parse(_read("issue_1762_incomplete.log"))  # NCCL 2.27.3: 8 + 2 processes
    assert (report.num_nodes, report.num_processes, report.num_gpus) == (2, 10, 10)
    assert [g.status for g in report.groups] == ["RUNNING", "RUNNING", "NOCOMM"]
    assert report.verdict == "incomplete" and report.missing_ranks[0][1].pid == 60004
    healthy = parse(_read("example_healthy.txt"))
    assert (healthy.verdict, healthy.nccl_version, healthy.num_gpus, healthy.cuda_driver) == ("ok", "2.30.7", 8, 13000)
    assert parse(_read("guide_job_summary.txt")).num_gpus == 32


def test_the_summary_survives_its_dict_as_a_signature_carries_it():
    for name in ("example_incomplete.txt", "guide_status.json", "issue_1911_mismatch.txt", "guide_dead.txt"):
        report = parse(_read(name))
        back = RasReport.from_dict(json.loads(json.dumps(report.to_dict())))
        assert back == report and back.verdict == report.verdict


@pytest.mark.parametrize("text", ["", "hello\nworld", "{}", "[1, 2]", '{"communicators": 3}', "{" * 5000,
                                  "Job summary\n", "\x00\xff garbage", "Rank 3 -- GPU 1 managed by process 9 on node x",
                                  "INCOMPLETE\nretrying upload\n", "Communicators...\n=====\n"])
def test_text_that_is_no_report_gives_none_and_never_raises(text):
    assert parse(text) is None
    assert [s for s in scan_text(text) if s.kind == "nccl-ras"] == []


def test_two_queries_in_one_text_are_two_reports_the_last_one_wins():
    text = _read("example_incomplete.txt") + "\n" + _read("example_healthy.txt")
    reports = parse_text_reports(text)
    assert [r.verdict for r in reports] == ["incomplete", "ok"]
    assert parse(text).verdict == "ok"


def test_the_report_in_a_log_is_one_signature_and_the_lines_around_it_are_still_read():
    sigs = scan_file(RAS / "issue_1730_healthy_then_timeout.log")  # a healthy report, then torch's watchdog
    assert [(s.kind, s.line_number) for s in sigs] == [("nccl-ras", 1), ("nccl-timeout", 24),
                                                        ("nccl-watchdog-status", 25)]
    assert sigs[0].fields["verdict"] == "ok" and sigs[0].fields["num_gpus"] == 256
    [ras] = scan_file(RAS / "issue_1762_incomplete.log")  # a torch warning before the report
    assert ras.line_number == 2 and ras.fields["verdict"] == "incomplete"
    assert ras.fields["communicators"][0]["missing"][0] == {"rank": 1, "node": "10.4.109.13", "pid": 60004,
                                                            "gpu": 0, "nvml_gpu": 0, "detail": None}
    assert "rank 1 (GPU 0, process 60004 on 10.4.109.13)" in ras.text


def test_every_real_text_example_is_one_signature_with_the_parsers_summary():
    for path in sorted(RAS.glob("*.txt")):
        sigs = [s for s in scan_file(path) if s.kind == "nccl-ras"]
        assert len(sigs) == 1, path.name
        assert sigs[0].fields == parse(path.read_text()).to_dict(), path.name


def test_a_report_between_prefixed_rank_output_and_a_traceback_leaves_both_read():
    text = ("[rank0]: step 12 loss 0.41\n" + _read("example_incomplete.txt")
            + "Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n"
              "RuntimeError: NCCL communicator was aborted on rank 0.\n")
    kinds = [s.kind for s in scan_text(text)]
    assert kinds == ["nccl-ras", "python-traceback"]


def test_the_opening_lines_are_keywords_of_the_scanner():
    from grpo_doctor.logs.detectors import KEYWORDS, is_hot

    assert set(nccl_ras.KEYWORDS) <= set(KEYWORDS)
    for line in ("Job summary", "NCCL version 2.26.2 compiled with CUDA 12.6", "Communicators... (0.00s)",
                 "Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors",
                 "#0-0 (cf264af53edbe986) INCOMPLETE", "INCOMPLETE",
                 "  1 job process is considered dead (unreachable via the RAS network)"):
        assert is_hot(line) and nccl_ras.opens_block(line), line
