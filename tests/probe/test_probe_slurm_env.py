"""`grpo-doctor probe` on two network-namespace "nodes" (tests/netns.py) with only Slurm's variables, as
`srun --nodes=2 --ntasks-per-node=1` sets them: no --nnodes, --node-rank or --master-addr. The node
count and id come from SLURM_NNODES / SLURM_NODEID, the master is the first host of
SLURM_JOB_NODELIST (`node0`, which each node's /etc/hosts resolves), and the probe says so."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import clean_env
from netns import NetnsCluster, netns_unavailable_reason

SMALL = ["--sizes", "1K", "--iters", "2", "--warmup", "1", "--repeats", "1", "--p2p-size", "64K"]


def srun_env(node: int, nnodes: int, job_id: str = "4242") -> dict[str, str]:
    """The variables srun gives task 0 of `node` in a one-task-per-node step over every node."""
    nodelist = f"node[0-{nnodes - 1}]"
    return {"SLURM_JOB_ID": job_id, "SLURM_JOBID": job_id, "SLURM_JOB_NUM_NODES": str(nnodes),
            "SLURM_NNODES": str(nnodes), "SLURM_STEP_NUM_NODES": str(nnodes), "SLURM_JOB_NODELIST": nodelist,
            "SLURM_NODELIST": nodelist, "SLURM_STEP_NODELIST": nodelist, "SLURM_NODEID": str(node),
            "SLURM_PROCID": str(node), "SLURM_LOCALID": "0", "SLURM_NTASKS": str(nnodes),
            "SLURM_NTASKS_PER_NODE": "1", "SLURMD_NODENAME": f"node{node}"}


@pytest.mark.distributed
@pytest.mark.slow  # two probes: about 30 s here
def test_two_nodes_probed_with_only_slurm_variables_meet_and_pass(tmp_path: Path):
    reason = netns_unavailable_reason()
    if reason:
        pytest.skip(f"network namespaces unavailable: {reason}")
    with NetnsCluster(2) as cluster:
        procs = [cluster.popen(n, [sys.executable, "-m", "grpo_doctor.cli.main", "probe", "--nproc-per-node", "1",
                                   "--rdzv-timeout", "40", "--slow-ratio", "0.1", "--run-dir", str(tmp_path / f"run{n}"),
                                   *SMALL],
                               env=clean_env(OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="eth0", **srun_env(n, 2)),
                               cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for n in (0, 1)]
        results = [(p.wait(timeout=240), *p.communicate()) for p in procs]
    assert [r[0] for r in results] == [0, 0], results
    for node, (_, stdout, _) in enumerate(results):
        assert f"grpo-doctor probe: node {node} of 2, 1 rank(s), master node0:29500" in stdout
        assert ("from the environment: node count SLURM_STEP_NUM_NODES, node rank SLURM_NODEID, "
                "master address first host of SLURM_STEP_NODELIST") in stdout
    collectives = json.loads((tmp_path / "run0/probe/collectives.json").read_text())
    assert collectives["world_size"] == 2 and set(collectives["hosts"].values()) == {"node0", "node1"}


@pytest.mark.parametrize("variables, message", [
    ({"SLURM_STEP_NUM_NODES": "two"}, "grpo-doctor: error: SLURM_STEP_NUM_NODES='two' is not a whole number 1 or more"),
    ({"SLURM_NODEID": "2"}, "grpo-doctor: error: SLURM_NODEID=2 with SLURM_STEP_NUM_NODES=2: a node id is 0 .. 1"),
    ({"SLURM_JOB_NODELIST": "node[0-1", "SLURM_NODELIST": "", "SLURM_STEP_NODELIST": ""},
     "grpo-doctor: error: SLURM_JOB_NODELIST='node[0-1' is not a Slurm node list (a '[' never closed in 'node[0-1')"),
    ({"SLURM_LOCALID": "1", "SLURM_NTASKS": "4", "SLURM_PROCID": "3"},
     "grpo-doctor: error: this is Slurm task 3 (SLURM_LOCALID=1): the probe runs once per node"),
])
def test_a_bad_slurm_variable_stops_the_probe_with_one_line(tmp_path: Path, variables, message):
    env = clean_env(**{**srun_env(1, 2), **variables})
    out = subprocess.run([sys.executable, "-m", "grpo_doctor.cli.main", "probe", "--nproc-per-node", "1"], env=env,
                         cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.startswith(message), out.stderr
