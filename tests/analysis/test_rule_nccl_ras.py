"""`nccl-ras`: an NCCL RAS report pasted into a log given to `grpo-doctor report` names the ranks and
processes the job lost, with their node, GPU and pid (real reports: tests/data/nccl_ras/SOURCES.md)."""
from __future__ import annotations

import json
from pathlib import Path

from rundata import common, write_rank

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import nccl_ras, run_rules
from grpo_doctor.cli.main import main
from grpo_doctor.schema import Header

RAS = Path(__file__).resolve().parents[1] / "data" / "nccl_ras"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "findings.md"


def _findings(*paths):
    return [f for f in run_rules(load_evidence(list(paths)))[0] if f.id == "nccl-ras"]


def test_the_missing_rank_is_named_with_its_node_gpu_and_pid():
    [f] = _findings(RAS / "example_incomplete.txt")
    assert (f.id, f.severity, f.hosts) == ("nccl-ras", "critical", ("node1",))
    assert "rank 7 (GPU 3, pid 3748990 on node1)" in f.title and "#0-0 (8 ranks)" in f.title
    [missing] = f.evidence["missing_ranks"]
    assert (missing["rank"], missing["node"], missing["pid"], missing["gpu"], missing["comm"], missing["hash"]) == (
        7, "node1", 3748990, 3, "#0-0", "1bdb83b038775869")
    assert f.evidence["verdict"] == "incomplete" and f.evidence["missing_processes"][0]["pid"] == 3748990
    assert f.ranks == ()  # no job summary, no rank headers: rank 7 of #0-0 is not known to be the global rank 7
    assert f.hints[0] == nccl_ras.HINT_LOST


def test_a_rank_of_the_communicator_of_every_gpu_is_the_global_rank():
    [f] = _findings(RAS / "issue_1911_mismatch.txt")  # #0-0 has 32 ranks; the job 32 GPUs
    assert (f.severity, f.ranks, f.hosts) == ("warning", (12, 13), ("10.137.190.124",))
    assert f.evidence["mismatch"]["what"] == "AllGather operation counts"
    assert "has launched up to operation 641" in f.title and f.hints == (nccl_ras.HINT_MISMATCH,)


def test_the_rank_header_with_the_missing_processs_pid_gives_the_global_rank(tmp_path):
    run = tmp_path / "run"
    for rank in range(8):  # rank 7's process is the one RAS lost
        pid = 3748990 if rank == 7 else 1000 + rank
        fields = {**common(rank, host=f"node{rank // 4}"), "pid": pid}
        write_rank(run, rank, [Header(**fields, local_rank=rank % 4, world_size=8, node_rank=rank // 4,
                                      local_world_size=4, gpu_uuid=None, versions={}, launch={}, argv=["t.py"])])
    [f] = _findings(run, RAS / "example_incomplete.txt")
    assert f.ranks == (7,) and f.evidence["missing_ranks"][0]["global_rank"] == 7


def test_a_dead_process_and_the_2_24_rank_list_name_both():
    [f] = _findings(RAS / "guide_dead.txt")
    assert f.severity == "critical" and f.hosts == ("172.16.64.213",)
    assert "process 3487984 on 172.16.64.213 GPU 5" in f.title and "rank 21" in f.title
    assert f.evidence["dead_processes"] == [{"node": "172.16.64.213", "pid": 3487984, "gpus": [5]}]
    assert nccl_ras.HINT_DEAD in f.hints
    [g] = _findings(RAS / "guide_incomplete.txt")  # the rank without its process: the process is named too
    assert "rank 21" in g.title and "process 3487984 on 172.16.64.213" in g.title and g.evidence["timeouts"] == 2


def test_repeated_queries_combine_into_one_finding_the_worst_verdict_first(tmp_path):
    log = tmp_path / "ras.log"
    log.write_text("\n".join((RAS / n).read_text() for n in ("example_mismatch.txt", "example_incomplete.txt",
                                                             "example_dead.txt")))
    [f] = _findings(log)
    assert f.evidence["verdict"] == "dead" and f.evidence["num_reports"] == 3
    assert f.evidence["missing_ranks"][0]["rank"] == 7 and f.evidence["missing_processes"] == []  # it is the dead one
    assert f.evidence["mismatch"] is None


def test_a_healthy_report_gives_no_finding_but_counts_as_read():
    assert _findings(RAS / "example_healthy.txt") == []
    assert _findings(RAS / "issue_1730_healthy_then_timeout.log") == []


def test_report_on_a_pasted_ras_report_exits_1_and_findings_json_names_rank_and_node(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a raw log's report.html and findings.json go to the working directory
    log = tmp_path / "job.log"
    log.write_text("[rank0]: step 40 loss 0.37\n" + (RAS / "issue_1762_incomplete.log").read_text())
    assert main(["report", str(log), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    [f] = [f for f in data["findings"] if f["id"] == "nccl-ras"]
    assert f["hosts"] == ["10.4.109.13"] and f["evidence"]["missing_ranks"][0]["pid"] == 60004
    assert "hangs" not in data["not_checked"]
    assert any("nccl-ras" in r for i in data["inputs"] for r in i["recognised"])


def test_every_evidence_key_is_documented_in_the_module_and_in_docs():
    docs = DOCS.read_text()
    section = docs[docs.index("## `nccl-ras`"):]
    section = section[:section.index("\n## ", 1)]
    names = [p.name for p in sorted(RAS.iterdir()) if p.suffix != ".md"]
    for f in [f for name in names for f in _findings(RAS / name)]:
        for key in f.evidence:
            assert f"`{key}`" in nccl_ras.__doc__ and f"`{key}`" in section, key


def test_headers_are_not_needed_and_pids_shared_by_two_hosts_give_no_rank(tmp_path):
    run = tmp_path / "run"
    for rank in range(2):  # both hosts ran a process with the lost pid: which one is unknown
        fields = {**common(rank, host=f"node{rank}"), "pid": 3748990}
        write_rank(run, rank, [Header(**fields, local_rank=0, world_size=2, node_rank=rank, local_world_size=1,
                                      gpu_uuid=None, versions={}, launch={}, argv=["t.py"])])
    [f] = _findings(run, RAS / "example_incomplete.txt")
    assert f.ranks == ()
