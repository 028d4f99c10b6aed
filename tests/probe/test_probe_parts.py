"""The probe's pure parts: which node is odd, interface lists, sizes, argument files, slow links,
and loading probe files (corrupt ones included) for the report."""
from __future__ import annotations

import json

import pytest

from grpo_doctor.analysis.probe_evidence import load_probe, probe_findings
from grpo_doctor.probe.consistency import compare_nodes, odd_ones
from grpo_doctor.probe.links import rounds, slow_hosts, slow_links, slow_ranks
from grpo_doctor.probe.options import parse_sizes
from grpo_doctor.probe.preflight import check_ifname
from grpo_doctor.probe.results import write_json
from grpo_doctor.probe.settings import SettingsError, parse_expect, read_args_file
from grpo_doctor.schema.probe_results import NodeReport, Preflight, Problem

IFACES = {"lo": ["127.0.0.1"], "eth0": ["10.0.0.2"], "ib0": ["192.168.1.2"], "docker0": []}


def test_the_odd_node_is_the_minority_and_on_a_tie_the_one_unlike_node_0():
    assert odd_ones({"a": 8, "b": 8, "c": 4}) == ["c"]
    assert odd_ones({"a": 8, "b": 4}) == ["b"]
    assert odd_ones({"a": 8, "b": 8}) == []


def test_settings_missing_on_one_node_count_as_different():
    (problem,) = compare_nodes([(0, "h0", {"NCCL_IB_DISABLE": "1"}, {}), (1, "h1", {}, {})])
    assert problem.id == "config-mismatch" and problem.severity == "warning" and problem.hosts == ["h1"]
    assert "node 1 (h1): None" in problem.message


@pytest.mark.parametrize("variable, value, ok", [
    ("NCCL_SOCKET_IFNAME", "eth", True),  # a prefix
    ("NCCL_SOCKET_IFNAME", "=eth0", True),
    ("NCCL_SOCKET_IFNAME", "=eth", False),  # exact, and no interface is called "eth"
    ("NCCL_SOCKET_IFNAME", "^lo,docker", True),  # all but these
    ("NCCL_SOCKET_IFNAME", "ens5", False),
    ("NCCL_SOCKET_IFNAME", "docker", False),  # matches, but has no address
    ("GLOO_SOCKET_IFNAME", "eth", False),  # gloo takes exact names
    ("GLOO_SOCKET_IFNAME", "eth0,ib0", True),
])
def test_socket_ifname_is_checked_against_this_nodes_interfaces(variable, value, ok):
    problems = check_ifname(variable, value, IFACES)
    assert (problems == []) == ok, problems
    if not ok:
        assert problems[0].severity == "critical" and "interfaces here: lo (127.0.0.1), eth0 (10.0.0.2)" in problems[0].message


def test_an_ifname_selecting_only_loopback_is_a_warning():
    (problem,) = check_ifname("NCCL_SOCKET_IFNAME", "lo", IFACES)
    assert problem.severity == "warning" and "only the loopback" in problem.message


def test_sizes_and_expectations_are_parsed_or_refused_with_the_bad_item():
    assert parse_sizes("1K, 64M,2G,512") == [1024, 64 * 2**20, 2 * 2**30, 512]
    with pytest.raises(SettingsError, match="'0' is not a size"):
        parse_sizes("1K,0")
    assert parse_expect(["use_vllm=true", " vllm_mode = colocate "]) == {"use_vllm": "true", "vllm_mode": "colocate"}


def test_argument_files_give_their_scalar_fields_without_the_per_node_ones(tmp_path):
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"use_vllm": True, "num_generations": 8, "output_dir": "/n1/out",
                                "target_modules": ["q", "v"], "nested": {"a": 1}}))
    assert read_args_file(args) == {"num_generations": 8, "target_modules": '["q", "v"]', "use_vllm": True}
    yaml_args = tmp_path / "trl.yaml"
    yaml_args.write_text("use_vllm: true\nvllm_mode: server\n")
    assert read_args_file(yaml_args) == {"use_vllm": True, "vllm_mode": "server"}
    bad = tmp_path / "bad.json"
    bad.write_text('{"use_vllm": tr')
    with pytest.raises(SettingsError, match=r"bad.json: not valid JSON"):
        read_args_file(bad)


def test_every_round_sends_once_and_receives_once_per_rank():
    for n in range(2, 10):
        for links in rounds(n):
            assert sorted(s for s, _ in links) == list(range(n)) == sorted(d for _, d in links)
    assert len(rounds(3)) == 1 and len(rounds(8)) == 2 and rounds(1) == []


def link(src, dst, gbps, host_of):
    return {"src": src, "dst": dst, "gbps": gbps, "src_host": host_of[src], "dst_host": host_of[dst]}


def test_a_slow_node_is_named_and_fast_nvlink_beside_the_network_is_not_slow():
    host_of = {0: "a", 1: "a", 2: "b", 3: "b", 4: "c", 5: "c"}
    # Within a node 100 GB/s, between nodes 10 GB/s, except every link touching node c: 1 GB/s.
    speeds = {("a", "a"): 100, ("b", "b"): 100, ("c", "c"): 100, ("a", "b"): 10, ("b", "a"): 10}
    links = [link(s, (s + k) % 6, speeds.get((host_of[s], host_of[(s + k) % 6]), 1), host_of)
             for k in (1, 3) for s in range(6)]
    slow = slow_links(links, ratio=0.5)
    assert slow and all("c" in (lk["src_host"], lk["dst_host"]) for lk in slow)
    assert slow_hosts(links, slow, host_of) == ["c"]
    even = [link(s, (s + 1) % 6, 10 if host_of[s] != host_of[(s + 1) % 6] else 100, host_of) for s in range(6)]
    assert slow_links(even, ratio=0.5) == []


def test_one_slow_rank_among_ranks_on_one_host_each_is_named():
    host_of = {r: f"h{r}" for r in range(4)}
    links = [link(s, (s + 1) % 4, 0.1 if 2 in (s, (s + 1) % 4) else 5.0, host_of) for s in range(4)]
    slow = slow_links(links, ratio=0.5)
    assert slow_ranks(links, slow) == [2] and slow_hosts(links, slow, host_of) == ["h2"]


def test_a_corrupt_probe_file_is_a_warning_and_the_others_still_count(tmp_path):
    probe = tmp_path / "run" / "probe"
    problem = Problem(id="config-mismatch", severity="critical", message="NNODES differs", hint="same NNODES",
                      nodes=[1], hosts=["n1"])
    node = NodeReport(node_rank=0, host="n0", nnodes=2, nproc_per_node=8, preflight=Preflight(), settings={},
                      versions={}, problems=[problem])
    write_json(probe / "node-000-n0.json", node.to_dict())
    write_json(probe / "node-001-n1.json", {**node.to_dict(), "node_rank": 1, "host": "n1"})  # the same problem
    (probe / "collectives.json").write_text('{"backend": "gloo", "world_')  # cut short
    warnings: list[str] = []
    loaded = load_probe([tmp_path / "run"], warnings)
    assert len(loaded.nodes) == 2 and loaded.collectives == []
    assert len(warnings) == 1 and "collectives.json skipped" in warnings[0] and "rerun `grpo-doctor probe`" in warnings[0]
    (finding,) = probe_findings(loaded, "config-mismatch")
    assert finding.severity == "critical" and finding.hosts == ("n1",) and finding.hints == ("same NNODES",)
    assert finding.evidence["source"] == "probe" and finding.evidence["nodes"] == [1]
