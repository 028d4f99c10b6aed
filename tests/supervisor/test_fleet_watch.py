"""One `grpo-doctor watch` per node around `torchrun --nnodes N`, as docs/clusters.md tells Slurm users,
on "nodes" made of network namespaces (tests/netns.py), gloo across them, the reference trainer with a
rank of node 1 hung in its reward function: the watches judge the hang together (supervisor/fleet.py).

Each test checks what issue 24 asks of the fleet: every watch prints the same verdict naming the hung
rank and its host within --hang-timeout + 10 s of the job's last progress; each watch ends its own node's
processes once; one alert reaches the webhook; no report is written twice into one file; and
`grpo-doctor report` leads with the hang on that rank as the root cause, the other hosts' waiting ranks
its consequences. One test shares a run directory between the nodes (the store's port is blocked, so
the watches meet through the directory alone), the other gives each node its own directory (the
watches meet through the TCPStore node 0's watch hosts) and merges them in the report.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import clean_env
from netns import NetnsCluster, netns_unavailable_reason

from grpo_doctor.supervisor.fleet_channel import STORE_PORT_OFFSET
from grpo_doctor.supervisor.watch import HANG_EXIT

pytestmark = pytest.mark.distributed

MASTER_PORT = 29500
HANG_TIMEOUT_S = 10
VERDICT_WITHIN_S = 10  # after the hang timeout, for every watch
WEBHOOK_PORT = 8765
# A webhook receiver inside node 0's namespace (the watches run in the nodes: the test's own loopback is
# not theirs): one line per POST body.
WEBHOOK = """
import sys, http.server
class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        with open(sys.argv[1], "ab") as f:
            f.write(body.replace(b"\\n", b" ") + b"\\n")
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("0.0.0.0", int(sys.argv[2])), Handler).serve_forever()
"""


@pytest.fixture(scope="module", autouse=True)
def _namespaces_allowed():
    reason = netns_unavailable_reason()
    if reason:
        pytest.skip(f"network namespaces unavailable: {reason}")


def run_job(cluster: NetnsCluster, tmp_path: Path, run_dirs: list[Path], *, nproc: int, hung_rank: int,
            timeout_s: float = 300) -> list[tuple[int, str]]:
    """One watch per node around torchrun; returns each watch's (exit status, stderr)."""
    hooks = tmp_path / "webhook.jsonl"
    cluster.popen(0, [sys.executable, "-c", WEBHOOK, str(hooks), str(WEBHOOK_PORT)], env=clean_env())
    url = f"http://{cluster.addr(0)}:{WEBHOOK_PORT}/services/T000/B000/x"
    procs = []
    for node, run_dir in enumerate(run_dirs):
        env = clean_env(OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="eth0", MASTER_ADDR=cluster.addr(0),
                        MASTER_PORT=str(MASTER_PORT), NNODES=str(cluster.num_nodes), NODE_RANK=str(node))
        cmd = [sys.executable, "-m", "grpo_doctor.cli.main", "watch", "--run-dir", str(run_dir),
               "--hang-timeout", str(HANG_TIMEOUT_S), "--second-look", "1", "--on-hang", "kill", "--notify", url, "--",
               sys.executable, "-m", "torch.distributed.run", "--nnodes", str(cluster.num_nodes),
               "--node-rank", str(node), "--master-addr", cluster.addr(0), "--master-port", str(MASTER_PORT),
               "--nproc-per-node", str(nproc), "-m", "grpo_doctor_trainer.train", "--model", "tiny", "--steps", "8",
               "--dist-timeout-s", "600", "--inject", f"hang:rank={hung_rank},phase=reward,step=3"]
        with (tmp_path / f"watch{node}.err").open("w") as err:  # files: a full pipe would stall a watch
            procs.append(cluster.popen(node, cmd, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=err))
    deadline = time.monotonic() + timeout_s
    for proc in procs:
        proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    return [(p.returncode, (tmp_path / f"watch{n}.err").read_text()) for n, p in enumerate(procs)]


def verdict_lines(stderr: str) -> list[str]:
    """The fleet's verdict as one watch printed it, without its node prefix (the job's own lines, which
    may come in between, left out)."""
    prefix = re.compile(r"^grpo-doctor \[node \d+/\d+\]: ")
    lines = [prefix.sub("", ln) for ln in stderr.splitlines() if prefix.match(ln)]
    start = next(i for i, ln in enumerate(lines) if ln.startswith("hang on "))
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith("  "))
    return lines[start:end]


def last_progress_t(rank_files: list[Path], before_t: float) -> float:
    """The wall time of the job's last record before the verdict: when its last rank stopped progressing."""
    times = [json.loads(line)["t"] for path in rank_files for line in path.read_text().splitlines()]
    return max(t for t in times if t < before_t)


def check_fleet(results, run_dirs: list[Path], hosts: list[str], *, hung_rank: int, tmp_path: Path) -> None:
    errs = [err for _, err in results]
    assert [status for status, _ in results] == [HANG_EXIT] * len(hosts), [e[-3000:] for e in errs]
    # The same verdict on every node, naming the hung rank and its host.
    verdicts = [verdict_lines(err) for err in errs]
    assert all(v == verdicts[0] for v in verdicts), verdicts
    assert f"  the others wait for: rank {hung_rank} on node1 in reward at step 3" in verdicts[0], verdicts[0]
    assert verdicts[0][0].startswith(f"hang on {len(hosts)} of {len(hosts)} nodes (verdict node0-1 of node0's watch)")
    # Each watch ended its own node's processes, once; none judged alone.
    for err in errs:
        assert len(re.findall(r"ending the job \(--on-hang kill", err)) == 1, err[-3000:]
        assert "judged on this node alone" not in err and "no report (" not in err, err[-3000:]
    # Every watch printed it within the hang timeout + 10 s of the job's last progress.
    hang_files = [d / "supervisor" / h / "hang-1.json" for d, h in zip(run_dirs, hosts, strict=True)]
    printed_t = [p.stat().st_mtime for p in hang_files]
    rank_files = sorted({p for d in set(run_dirs) for p in (d / "ranks").glob("rank-*.jsonl")})
    latency_s = [t - last_progress_t(rank_files, min(printed_t)) - HANG_TIMEOUT_S for t in printed_t]
    print(f"verdict after the hang timeout, per node: {[round(s, 1) for s in latency_s]} s")
    assert max(latency_s) <= VERDICT_WITHIN_S, latency_s
    for path in hang_files:
        kept = json.loads(path.read_text())
        assert kept["culprits"] == [hung_rank] and kept["fleet"]["id"] == "node0-1", kept
        assert kept["ranks"][str(hung_rank)]["host"] == "node1"
    # One alert, from the deciding watch.
    hooks = [json.loads(line) for line in (tmp_path / "webhook.jsonl").read_text().splitlines()]
    assert [(h["grpo_doctor"]["event"], h["grpo_doctor"]["host"]) for h in hooks] == [("hang", "node0")], hooks


def check_report(findings: list[dict], *, hung_rank: int, waiting: dict[str, list[int]]) -> None:
    """The hang on the hung rank leads as the root cause; each host's waiting ranks are its consequences."""
    root = findings[0]
    assert (root["id"], root["role"], root["ranks"], root["hosts"]) == ("hang", "root-cause", [hung_rank], ["node1"])
    consequences = {f["hosts"][0]: f["ranks"] for f in findings
                    if f["id"] == "hang" and f["role"] == "consequence" and f["caused_by"] == f"hang@{hung_rank}"}
    assert consequences == waiting, [(f["id"], f["role"], f["title"]) for f in findings]
    assert sum(f["id"] == "hang" for f in findings) == 1 + len(waiting)


def report_json(*run_dirs: Path) -> list[dict]:
    out = subprocess.run([sys.executable, "-m", "grpo_doctor.cli.main", "report", "--json", *map(str, run_dirs)],
                         env=clean_env(), capture_output=True, text=True, timeout=180)
    assert out.returncode in (0, 1), out.stderr
    return json.loads(out.stdout)["findings"]


def test_two_nodes_sharing_a_run_directory_give_one_verdict_one_kill_one_alert_one_report(tmp_path):
    shared = tmp_path / "shared"
    with NetnsCluster(2) as cluster:
        # The fleet's TCPStore cannot be reached: the watches meet through the shared directory alone.
        cluster.block_port(0, MASTER_PORT + STORE_PORT_OFFSET)
        results = run_job(cluster, tmp_path, [shared, shared], nproc=2, hung_rank=3)
    check_fleet(results, [shared, shared], ["node0", "node1"], hung_rank=3, tmp_path=tmp_path)
    # Only the deciding watch wrote the shared report, after the other watch was done.
    assert "the report of every node is written by node0's watch (node 0)" in results[1][1]
    assert "report: " in results[0][1] and "grpo-doctor: report: " not in results[1][1]
    waiting = {"node0": [0, 1], "node1": [2]}
    check_report(json.loads((shared / "findings.json").read_text())["findings"], hung_rank=3, waiting=waiting)
    check_report(report_json(shared), hung_rank=3, waiting=waiting)


def test_three_nodes_with_their_own_run_directories_meet_through_the_store_and_report_together(tmp_path):
    run_dirs = [tmp_path / f"node{n}" / "run" for n in range(3)]
    with NetnsCluster(3) as cluster:
        results = run_job(cluster, tmp_path, run_dirs, nproc=1, hung_rank=1)
    check_fleet(results, run_dirs, ["node0", "node1", "node2"], hung_rank=1, tmp_path=tmp_path)
    waiting = {"node0": [0], "node2": [2]}
    for run_dir in run_dirs:  # each node's own report already holds the verdict of all three
        check_report(json.loads((run_dir / "findings.json").read_text())["findings"], hung_rank=1, waiting=waiting)
    check_report(report_json(*run_dirs), hung_rank=1, waiting=waiting)
