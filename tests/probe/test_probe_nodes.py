"""`grpo-doctor probe` across "nodes" made of network namespaces on one bridge (tests/netns.py):
each node has its own address, interface eth0 and host name; gloo ranks on CPU, one per node
unless said otherwise."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import clean_env
from netns import NetnsCluster, netns_unavailable_reason

pytestmark = pytest.mark.distributed

PORT = 29500
SMALL = ["--sizes", "1K,64K", "--iters", "2", "--warmup", "1", "--repeats", "1"]


@pytest.fixture(scope="module", autouse=True)
def _namespaces_allowed():
    reason = netns_unavailable_reason()
    if reason:
        pytest.skip(f"network namespaces unavailable: {reason}")


def start_node(cluster: NetnsCluster, node: int, tmp_path: Path, *extra: str, nnodes: int = 3, nproc: int = 1,
               master_addr: str | None = None, rdzv_timeout_s: float = 40) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "grpo_doctor.cli.main", "probe", "--nnodes", str(nnodes), "--node-rank", str(node),
           "--nproc-per-node", str(nproc), "--master-addr", master_addr or cluster.addr(0), "--master-port", str(PORT),
           "--rdzv-timeout", str(rdzv_timeout_s), "--run-dir", str(tmp_path / f"run{node}"), *SMALL, *extra]
    return cluster.popen(node, cmd, env=clean_env(OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="eth0"),
                         cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(procs: list[subprocess.Popen], timeout_s: float = 240) -> list[tuple[int, str, str]]:
    outs = [p.communicate(timeout=timeout_s) for p in procs]
    return [(p.returncode, *out) for p, out in zip(procs, outs, strict=True)]


def report_findings(tmp_path: Path, *nodes: int) -> list[dict]:
    """`grpo-doctor report` over the nodes' run directories (one per node, as on separate disks)."""
    cmd = [sys.executable, "-m", "grpo_doctor.cli.main", "report", "--json", *(str(tmp_path / f"run{n}") for n in nodes)]
    out = subprocess.run(cmd, env=clean_env(), capture_output=True, text=True, timeout=120)
    assert out.returncode in (0, 1), out.stderr
    return json.loads(out.stdout)["findings"]


def node_report(tmp_path: Path, node: int) -> dict:
    (path,) = (tmp_path / f"run{node}" / "probe").glob(f"node-{node:03d}-node{node}.json")
    return json.loads(path.read_text())


def test_a_node_with_other_nproc_per_node_or_use_vllm_is_named_in_config_mismatch(tmp_path):
    with NetnsCluster(3) as cluster:
        # Four ranks on this 2-core VM time their links with millisecond jitter: only a link 10x
        # slower counts here, so that the findings are about the settings alone.
        extra = ("--slow-ratio", "0.1")
        procs = [start_node(cluster, 0, tmp_path, "--expect", "use_vllm=true", *extra),
                 start_node(cluster, 1, tmp_path, "--expect", "use_vllm=true", *extra, nproc=2),
                 start_node(cluster, 2, tmp_path, "--expect", "use_vllm=false", *extra)]
        results = finish(procs)
    assert [r[0] for r in results] == [1, 1, 1], results
    stdout = results[0][1]
    assert "CRITICAL config-mismatch: NPROC_PER_NODE differs between nodes" in stdout
    assert "CRITICAL config-mismatch: expect:use_vllm differs between nodes" in stdout
    problems = {p["message"].split(" differs")[0]: p for p in node_report(tmp_path, 0)["problems"]}
    assert problems["NPROC_PER_NODE"]["hosts"] == ["node1"] and problems["NPROC_PER_NODE"]["nodes"] == [1]
    assert problems["expect:use_vllm"]["hosts"] == ["node2"]
    # Unequal nodes still form a job; its collectives ran across all 4 ranks.
    collectives = json.loads((tmp_path / "run0/probe/collectives.json").read_text())
    assert collectives["world_size"] == 4 and set(collectives["hosts"].values()) == {"node0", "node1", "node2"}
    findings = report_findings(tmp_path, 0, 1, 2)
    assert {(f["id"], f["hosts"][0], f["evidence"]["source"]) for f in findings} == {
        ("config-mismatch", "node1", "probe"), ("config-mismatch", "node2", "probe")}


def test_a_blocked_master_port_is_named_as_timed_out_within_the_rendezvous_timeout(tmp_path):
    with NetnsCluster(2) as cluster:
        cluster.block_port(0, PORT)
        procs = [start_node(cluster, n, tmp_path, nnodes=2, rdzv_timeout_s=8) for n in (0, 1)]
        results = finish(procs)  # both give up by themselves (finish waits far longer than 8 s)
    assert [r[0] for r in results] == [1, 1], results
    assert f"MASTER_ADDR:MASTER_PORT={cluster.addr(0)}:{PORT}: timed-out" in results[1][1]
    assert "a firewall or security group drops port 29500" in results[1][1]
    assert "node(s) 1 never joined within 8 s: rank(s) 1 missing" in results[0][1]


def test_a_wrong_master_addr_is_named_from_the_node_that_uses_it(tmp_path):
    with NetnsCluster(2) as cluster:
        wrong = cluster.addr(0).rsplit(".", 1)[0] + ".200"  # on the subnet, but nobody has it
        procs = [start_node(cluster, 0, tmp_path, nnodes=2, rdzv_timeout_s=6),
                 start_node(cluster, 1, tmp_path, nnodes=2, rdzv_timeout_s=6, master_addr=wrong)]
        results = finish(procs)
    assert [r[0] for r in results] == [1, 1], results
    verdict = node_report(tmp_path, 1)["preflight"]["connect"]
    assert verdict in ("unreachable", "timed-out") and f"MASTER_ADDR:MASTER_PORT={wrong}:{PORT}: {verdict}" in results[1][1]
    assert "node(s) 1 never joined" in results[0][1]


def test_a_node_that_never_starts_is_named_with_its_ranks(tmp_path):
    with NetnsCluster(3) as cluster:
        procs = [start_node(cluster, n, tmp_path, nproc=2, rdzv_timeout_s=15) for n in (0, 1)]  # node 2 never starts
        results = finish(procs)
    assert [r[0] for r in results] == [1, 1], results
    for _, stdout, _ in results:
        assert "CRITICAL rendezvous-failure: node(s) 2 never joined within 15 s: rank(s) 4-5 missing" in stdout
        assert "collectives not run" in stdout
    assert node_report(tmp_path, 0)["missing_ranks"] == [4, 5]
    (finding,) = report_findings(tmp_path, 0, 1)  # both nodes said it; the report says it once
    assert finding["id"] == "rendezvous-failure" and finding["ranks"] == [4, 5] and finding["evidence"]["nodes"] == [2]


def test_a_throttled_node_is_named_as_slow(tmp_path):
    with NetnsCluster(3) as cluster:
        cluster.throttle(2, rate="20mbit")
        procs = [start_node(cluster, n, tmp_path, "--p2p-size", "1M") for n in range(3)]
        results = finish(procs)
    assert [r[0] for r in results] == [0, 0, 0], results  # slow is a warning: the job would run
    stdout = results[0][1]
    assert "WARNING straggler: slow network at node(s) node2" in stdout
    collectives = json.loads((tmp_path / "run0/probe/collectives.json").read_text())
    slow = [p for p in collectives["problems"] if p["id"] == "straggler"]
    assert slow and slow[0]["hosts"] == ["node2"]
    (finding,) = report_findings(tmp_path, 0)
    assert finding["id"] == "straggler" and finding["hosts"] == ["node2"] and finding["severity"] == "warning"
