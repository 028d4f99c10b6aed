"""A slow link named by its host: three network-namespace "nodes" (tests/netns.py) of one rank each, gloo
between them, one `grpo-doctor watch` per node sharing a run directory, the reference trainer without
records, node 2's link throttled (tc htb, both ways) from the start.

Every rank waits in DDP's gradient all-reduce for the slow link, so no stack stands out (the two-node test,
test_fail_slow_netns.py, shows the stacks alone cannot tell which end is slow). What tells the host is the
job's own TCP traffic: each watch's stack rounds also sample its ranks' busy connections' round trips
(host/tcp_links.py); node0-node2 and node1-node2 are 100x node0-node1, so node 2 is the host common to the
slow pairs while node 0 and node 1 each carry a fast one (checks/slow_links.py). The test asserts that the
report's `fail-slow` finding names node2 alone, and that node 0's watch said it live (from its own links).
"""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from helpers import clean_env
from netns import NetnsCluster, netns_unavailable_reason

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import fail_slow

pytestmark = [pytest.mark.distributed, pytest.mark.slow]
MASTER_PORT = 29500
NODES = 3
SLOW_NODE = 2
ROUNDS = 5


@pytest.fixture(scope="module", autouse=True)
def _namespaces_allowed():
    reason = netns_unavailable_reason()
    if reason:
        pytest.skip(f"network namespaces unavailable: {reason}")


def _surveys(path):
    try:
        return json.loads(path.read_text())["surveys"]
    except (OSError, ValueError, KeyError):
        return []


def test_a_throttled_node_among_three_is_named_by_the_round_trips_of_the_jobs_own_links(tmp_path):
    shared = tmp_path / "shared"
    supervisor = shared / "supervisor"
    started = time.monotonic()
    with NetnsCluster(NODES) as cluster:
        cluster.throttle(SLOW_NODE, rate="8mbit")
        procs = []
        for node in range(NODES):
            env = clean_env(OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="eth0", MASTER_ADDR=cluster.addr(0),
                            MASTER_PORT=str(MASTER_PORT), NNODES=str(NODES), NODE_RANK=str(node),
                            GRPO_DOCTOR_DISABLE="1")
            cmd = [sys.executable, "-m", "grpo_doctor.cli.main", "watch", "--run-dir", str(shared), "--no-report",
                   "--fail-slow-every", "1", "--fail-slow-rounds", str(ROUNDS), "--",
                   sys.executable, "-m", "torch.distributed.run", "--nnodes", str(NODES), "--node-rank", str(node),
                   "--master-addr", cluster.addr(0), "--master-port", str(MASTER_PORT), "--nproc-per-node", "1",
                   "-m", "grpo_doctor_trainer.train", "--model", "tiny", "--steps", "100000", "--no-record"]
            with (tmp_path / f"watch{node}.err").open("w") as err:
                procs.append(cluster.popen(node, cmd, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=err))
        deadline = time.monotonic() + 100
        judged = False
        while not judged and time.monotonic() < deadline and all(p.poll() is None for p in procs):
            time.sleep(0.5)
            # Every node's survey of the job's start has ended with a verdict.
            judged = all(any(s["verdict"] for s in _surveys(supervisor / f"node{n}" / "fail-slow.json"))
                         for n in range(NODES))
        judged_after_s = time.monotonic() - started
        slow_addr = cluster.addr(SLOW_NODE)
    errs = [(tmp_path / f"watch{n}.err").read_text() for n in range(NODES)]
    assert judged, errs[0][-3000:]
    print(f"every node's survey judged {judged_after_s:.1f} s after the cluster was built")

    found = [f for f in fail_slow.check(load_evidence([shared]), fail_slow.Config()) if f.evidence["links"]["slow"]]
    assert [(f.hosts, f.ranks, f.evidence["links"]["which_end"]) for f in found] == [((f"node{SLOW_NODE}",), (), True)], \
        [(f.title, f.evidence["links"]) for f in found]
    pairs = found[0].evidence["links"]["pairs"]
    assert sorted(found[0].evidence["links"]["slow"]) == ["node0-node2", "node1-node2"], pairs
    assert pairs["node0-node1"] * 10 <= min(pairs["node0-node2"], pairs["node1-node2"]), pairs
    assert found[0].title.startswith(f"host node{SLOW_NODE}: its links slow the job"), found[0].title
    # Node 0's watch sees node0-node1 fast and node0-node2 slow: it names node 2's address live.
    assert f"the job's TCP round trips name {slow_addr}: slow to every other host" in errs[0], errs[0][-3000:]
