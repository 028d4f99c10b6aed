"""The TCPStore's heir: three network-namespace "nodes" (tests/netns.py) with one run directory each, so the
TCPStore node 0's watch hosts is the fleet's only channel; torchrun with gloo across them, the reference
trainer with rank 2 (node 2) hung in its reward function late in the run.

Node 0's watch is SIGKILLed as soon as the job steps. Node 1's watch, the heir node 0's beat named, hosts a
new store at the same port on its own address once node 0 has been silent for 10 s; node 2's watch
reconnects there (each says so in one line). Then rank 2 hangs: node 1's and node 2's watches judge it
together, both print the verdict of node 1's watch naming rank 2 on node2, and name node 0 as silent.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest
from helpers import clean_env
from netns import NetnsCluster, netns_unavailable_reason

pytestmark = [pytest.mark.distributed, pytest.mark.slow]
MASTER_PORT = 29500
HANG_TIMEOUT_S = 8
HANG_STEP = 150  # late enough for the heir to take over first (a few steps a second here)


@pytest.fixture(scope="module", autouse=True)
def _namespaces_allowed():
    reason = netns_unavailable_reason()
    if reason:
        pytest.skip(f"network namespaces unavailable: {reason}")


def _steps(path) -> int:
    try:
        return len(re.findall(r"(?m)^step \d+", path.read_text(errors="replace")))
    except OSError:
        return 0


def test_node1s_watch_hosts_the_store_after_node0s_watch_dies_and_the_two_left_judge_a_hang_together(tmp_path):
    dirs = [tmp_path / f"node{n}-run" for n in range(3)]
    with NetnsCluster(3) as cluster:
        procs = []
        for node in range(3):
            env = clean_env(OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="eth0", MASTER_ADDR=cluster.addr(0),
                            MASTER_PORT=str(MASTER_PORT), NNODES="3", NODE_RANK=str(node))
            cmd = [sys.executable, "-m", "grpo_doctor.cli.main", "watch", "--run-dir", str(dirs[node]), "--no-report",
                   "--hang-timeout", str(HANG_TIMEOUT_S), "--second-look", "1", "--on-hang", "kill",
                   "--fail-slow-every", "0", "--",
                   sys.executable, "-m", "torch.distributed.run", "--nnodes", "3", "--node-rank", str(node),
                   "--master-addr", cluster.addr(0), "--master-port", str(MASTER_PORT), "--nproc-per-node", "1",
                   "-m", "grpo_doctor_trainer.train", "--model", "tiny", "--steps", "100000",
                   "--dist-timeout-s", "600", "--inject", f"hang:rank=2,phase=reward,step={HANG_STEP}"]
            with (tmp_path / f"watch{node}.err").open("w") as err:
                procs.append(cluster.popen(node, cmd, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=err))
        node0_out = dirs[0] / "supervisor" / "node0" / "stdout.log"
        deadline = time.monotonic() + 90
        while _steps(node0_out) < 2 and time.monotonic() < deadline and all(p.poll() is None for p in procs):
            time.sleep(0.25)
        assert _steps(node0_out) >= 2, (tmp_path / "watch0.err").read_text()[-3000:]
        os.kill(procs[0].pid, signal.SIGKILL)  # ip netns exec, unshare and sh exec: the pid is the watch's
        killed = time.monotonic()
        steps_at_kill = _steps(node0_out)
        for proc in procs[1:]:
            proc.wait(timeout=150)  # --on-hang kill: each ends its own node's job
        ended_after_s = time.monotonic() - killed
        steps_at_hang = _steps(node0_out)
    errs = {n: (tmp_path / f"watch{n}.err").read_text() for n in (1, 2)}
    print(f"killed at step {steps_at_kill}; node 1 and 2's watches ended {ended_after_s:.1f} s later "
          f"(the hang at step {HANG_STEP}, {steps_at_hang} step lines on node 0)")
    for n in (1, 2):
        print("\n".join(line for line in errs[n].splitlines() if "fleet:" in line or "hang on" in line or "wait for" in line))
    assert "fleet: node 0's watch, which hosted the TCPStore, is silent" in errs[1] and \
        "this watch, its heir, hosts it now at" in errs[1], errs[1][-3000:]
    assert f"reconnecting to its heir, node 1's watch, which hosts it now at {cluster.addr(1)}:" in errs[2], \
        errs[2][-3000:]
    verdicts = {n: re.findall(r"hang on \d of \d nodes \(verdict (\S+) of node1's watch\)", errs[n]) for n in (1, 2)}
    assert verdicts[1] and verdicts[1] == verdicts[2], (verdicts, errs[1][-3000:], errs[2][-3000:])
    for n in (1, 2):
        assert "the others wait for: rank 2 on node2" in errs[n], errs[n][-3000:]
        assert "node 0: no report for" in errs[n], errs[n][-3000:]
        assert "judged on this node alone" not in errs[n], errs[n][-3000:]
