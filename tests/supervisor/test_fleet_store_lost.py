"""Node 0's watch dies (SIGKILL) mid-run while the TCPStore it hosts is the fleet's only channel (one run
directory per node): two network-namespace "nodes" (tests/netns.py), torchrun with gloo across them, the
reference trainer, `--on-hang kill` on both watches.

What is promised (docs/clusters.md, "When node 0's watch dies"), and checked here: node 1's watch says once,
in one line, that it lost the fleet's channel and judges its own node alone until node 0 has been silent for
10 s; then, node 0's heir, it says once that it hosts a new store (nobody else is left to join it:
test_fleet_takeover.py has three nodes); it does not hang (it keeps following its rank and ends on
SIGTERM); and it never ends the healthy job, which runs on on both nodes (node 0's job under watch's
guardian), past the hang timeout and past the 10 s after which node 0 counts as silent.
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
AFTER_S = 20  # watched after the kill: past the hang timeout and the fleet's 10 s of silence


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


def _size(path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def test_node1s_watch_says_once_it_lost_the_store_and_takes_it_over_never_ending_the_healthy_job(tmp_path):
    dirs = [tmp_path / f"node{n}-run" for n in range(2)]
    with NetnsCluster(2) as cluster:
        procs = []
        for node in range(2):
            env = clean_env(OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="eth0", MASTER_ADDR=cluster.addr(0),
                            MASTER_PORT=str(MASTER_PORT), NNODES="2", NODE_RANK=str(node))
            cmd = [sys.executable, "-m", "grpo_doctor.cli.main", "watch", "--run-dir", str(dirs[node]), "--no-report",
                   "--hang-timeout", str(HANG_TIMEOUT_S), "--second-look", "1", "--on-hang", "kill",
                   "--fail-slow-every", "0", "--",
                   sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(node),
                   "--master-addr", cluster.addr(0), "--master-port", str(MASTER_PORT), "--nproc-per-node", "1",
                   "-m", "grpo_doctor_trainer.train", "--model", "tiny", "--steps", "100000"]
            with (tmp_path / f"watch{node}.err").open("w") as err:
                procs.append(cluster.popen(node, cmd, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=err))
        node0_out = dirs[0] / "supervisor" / "node0" / "stdout.log"
        rank1_file = dirs[1] / "ranks" / "rank-00001.jsonl"
        deadline = time.monotonic() + 90
        while _steps(node0_out) < 3 and time.monotonic() < deadline and all(p.poll() is None for p in procs):
            time.sleep(0.5)
        assert _steps(node0_out) >= 3, (tmp_path / "watch0.err").read_text()[-3000:]
        # ip netns exec, unshare and sh exec: the Popen pid is node 0's watch itself.
        os.kill(procs[0].pid, signal.SIGKILL)
        killed = time.monotonic()
        err1 = tmp_path / "watch1.err"
        said_after_s = None
        size_at_kill, steps_at_kill = _size(rank1_file), _steps(node0_out)
        while time.monotonic() - killed < AFTER_S and procs[1].poll() is None:
            time.sleep(0.5)
            if said_after_s is None and "fleet: lost the TCPStore" in err1.read_text():
                said_after_s = time.monotonic() - killed
        running = procs[1].poll() is None
        grew = _size(rank1_file) > size_at_kill
        steps_after = _steps(node0_out) - steps_at_kill  # node 0's job, output kept by watch's guardian
        procs[1].send_signal(signal.SIGTERM)
        procs[1].wait(timeout=60)  # never hangs: it ends with the job it ends
    text = err1.read_text()
    lost = [line for line in text.splitlines() if "lost the TCPStore" in line]
    heir = [line for line in text.splitlines() if "which hosted the TCPStore, is silent" in line]
    print(f"node 1's watch said it lost the store {said_after_s} s after node 0's watch was killed; "
          f"{steps_after} more steps on node 0 in the {AFTER_S} s after")
    assert running, text[-3000:]
    assert len(lost) == 1 and said_after_s is not None and said_after_s < 10, text[-3000:]
    assert ("this watch, its heir, hosts a new one once node 0 has been silent for 10 s; until then each watch "
            "judges hangs on its own node alone") in lost[0], lost[0]
    assert len(heir) == 1 and "this watch, its heir, hosts it now at" in heir[0], text[-3000:]
    assert grew and steps_after >= 2, (grew, steps_after, text[-3000:])  # the job ran on, on both nodes
    assert "hang on" not in text and "ending the job" not in text, text[-3000:]
