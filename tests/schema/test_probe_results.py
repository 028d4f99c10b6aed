"""The probe's results as types: a node report and the collectives file round-trip, an older file
loads, and a damaged one is one warning in the report, never a crash."""
import json

import pytest

from grpo_doctor.analysis.probe_evidence import load_probe, probe_files, probe_findings
from grpo_doctor.probe.results import write_json
from grpo_doctor.schema import RunPaths
from grpo_doctor.schema.json_shapes import FormatError
from grpo_doctor.schema.probe_results import (
    PORT_FREE,
    CollectivesReport,
    NodeReport,
    Preflight,
    Problem,
)

PROBLEM = Problem(id="config-mismatch", severity="critical", message="NPROC_PER_NODE differs: 8 on node0, 4 on node1",
                  hint="Launch every node with the same NPROC_PER_NODE.", nodes=[1], hosts=["node1"])


def _node(host="node0", node_rank=0) -> NodeReport:
    pre = Preflight(master_addr="10.0.0.1", master_port=29500, resolved=["10.0.0.1"], connect=PORT_FREE,
                    connect_detail="bound in 0.1 ms", route_address="10.0.0.1", interfaces={"eth0": ["10.0.0.1"]},
                    gpus_visible=None, problems=[PROBLEM])
    return NodeReport(node_rank=node_rank, host=host, nnodes=2, nproc_per_node=8, preflight=pre,
                      settings={"NNODES": "2"}, versions={"torch": "2.5.1"}, t=1.0, arrived={"0": "node0"},
                      rdzv_timeout_s=60.0, waited_s=0.5, problems=[PROBLEM])


def test_a_node_report_and_the_collectives_file_round_trip_through_json():
    node = _node()
    assert NodeReport.from_dict(json.loads(json.dumps(node.to_dict()))) == node
    coll = CollectivesReport(backend="gloo", world_size=2, hosts={"0": "a", "1": "b"}, settings={"0": {}, "1": {}},
                             versions={"0": {"torch": "2.5.1"}}, checks=[{"rank": 0, "op": "all_reduce", "ok": True}],
                             missing_ranks=[1], problems=[PROBLEM], t=2.0)
    assert CollectivesReport.from_dict(json.loads(json.dumps(coll.to_dict()))) == coll
    assert node.preflight.problems[0].hosts == ["node1"]


def test_an_older_node_file_with_less_in_it_loads():
    node = NodeReport.from_dict({"node_rank": 1, "host": "n1", "preflight": {}, "problems": [
        {"id": "rendezvous-failure", "severity": "critical", "message": "node(s) 1 never joined"}]})
    assert node.preflight == Preflight() and node.problems[0].hint == "" and node.settings == {}


@pytest.mark.parametrize("data, message", [
    ({"node_rank": 0, "host": "n0", "problems": "none"}, "field problems is a string"),
    ({"node_rank": 0, "host": "n0", "problems": [{"id": 3}]}, "field problems is an array"),
    ({"node_rank": 0, "host": "n0", "preflight": {"interfaces": {"eth0": "10.0.0.1"}}}, "field preflight"),
    ({"node_rank": 0}, "field host is missing"),
    ([], "holds an array, not an object"),
])
def test_a_damaged_node_file_names_what_is_wrong(data, message):
    with pytest.raises(FormatError, match=message):
        NodeReport.from_dict(data)


def test_a_damaged_probe_file_is_one_warning_and_the_good_ones_count(tmp_path):
    paths = RunPaths(tmp_path / "run")
    write_json(paths.probe_node_file(0, "node0"), _node().to_dict())
    write_json(paths.probe_node_file(1, "node/1"), {**_node().to_dict(), "problems": [{"id": ["x"]}]})
    write_json(paths.probe_collectives, {"backend": "gloo", "world_size": "two"})
    assert [p.name for p in probe_files(paths.root)] == ["node-000-node0.json", "node-001-node_1.json",
                                                          "collectives.json"]
    warnings: list[str] = []
    loaded = load_probe([paths.root], warnings)
    assert len(loaded.nodes) == 1 and loaded.collectives == [] and len(warnings) == 2
    assert all("skipped: field" in w and "rerun `grpo-doctor probe`" in w for w in warnings)
    (finding,) = probe_findings(loaded, "config-mismatch")
    assert finding.hosts == ("node1",) and finding.evidence["nodes"] == [1]
