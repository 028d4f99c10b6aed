"""`grpo-doctor probe` on one machine: real torchrun, gloo ranks on CPU, real sockets."""
from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import clean_env, free_port, has_cuda

from grpo_doctor.probe.collectives import bus_factor

SMALL = ["--sizes", "1K,64K", "--iters", "2", "--warmup", "1", "--p2p-size", "256K", "--repeats", "1"]


def probe_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "grpo_doctor.cli.main", "probe", *args]


def run(cmd: list[str], tmp_path: Path, timeout_s: float = 180, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=clean_env(OMP_NUM_THREADS="1", **env), cwd=tmp_path, capture_output=True,
                          text=True, timeout=timeout_s)


@pytest.mark.distributed
def test_three_ranks_on_one_node_pass_every_check_and_report_nccl_tests_bandwidths(tmp_path):
    out = run(probe_cmd("--nproc-per-node", "3", "--master-port", str(free_port()), "--run-dir", "run", *SMALL),
              tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "correctness: all_reduce ok, all_gather ok, broadcast ok, reduce_scatter ok" in out.stdout
    assert "3 ranks on 1 node(s), backend gloo" in out.stdout and "grpo-doctor probe: OK" in out.stdout
    results = json.loads((tmp_path / "run/probe/collectives.json").read_text())
    assert {(c["rank"], c["op"]) for c in results["checks"] if c["ok"]} == {
        (r, op) for r in range(3) for op in ("all_reduce", "all_gather", "broadcast", "reduce_scatter")}
    assert {(row["op"], row["size_bytes"] // 1024) for row in results["sweep"]} >= {("all_reduce", 1), ("all_reduce", 64)}
    for row in results["sweep"]:
        assert row["algbw_gbps"] == pytest.approx(row["size_bytes"] / (row["time_us"] / 1e6) / 1e9, rel=1e-6)
        assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * bus_factor(row["op"], 3), rel=1e-6)
    assert bus_factor("all_reduce", 3) == pytest.approx(4 / 3) and bus_factor("broadcast", 3) == 1
    assert sorted((lk["src"], lk["dst"]) for lk in results["links"]) == [(0, 1), (1, 2), (2, 0)]
    assert all(lk["gbps"] > 0 for lk in results["links"])
    (node,) = (tmp_path / "run/probe").glob("node-000-*.json")
    assert json.loads(node.read_text())["preflight"]["connect"] == "port-free"


@pytest.mark.distributed
def test_plain_torchrun_of_the_probe_module_works_too(tmp_path):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
           f"--master-port={free_port()}", "-m", "grpo_doctor.probe", "--run-dir", "run", "--expect", "use_vllm=true",
           *SMALL]
    out = run(cmd, tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "grpo-doctor probe: OK" in out.stdout
    results = json.loads((tmp_path / "run/probe/collectives.json").read_text())
    assert results["settings"]["1"]["expect:use_vllm"] == "true" and results["settings"]["1"]["local_world_size"] == 2


@pytest.mark.distributed
def test_a_rank_that_never_starts_is_named_when_the_rendezvous_times_out(tmp_path):
    port = free_port()
    procs = [subprocess.Popen([sys.executable, "-m", "grpo_doctor.probe", "--run-dir", "run", "--rdzv-timeout", "15"],
                              env=clean_env(RANK=str(r), WORLD_SIZE="3", LOCAL_RANK=str(r), LOCAL_WORLD_SIZE="1",
                                            MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)),
                              cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in (0, 1)]  # rank 2 of 3 is never started
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [1, 1], outs
    assert "rank(s) 2 never joined within 15 s (node(s) 2 by NPROC_PER_NODE=1); 2 of 3 joined" in outs[0][0]
    results = json.loads((tmp_path / "run/probe/collectives.json").read_text())
    assert results["missing_ranks"] == [2] and results["problems"][0]["id"] == "rendezvous-failure"


@pytest.mark.distributed
def test_a_collective_that_never_completes_is_reported_in_one_line_after_the_op_timeout(tmp_path):
    # Rank 1 is stopped (SIGSTOP) once the ranks measure: rank 0's collective in flight never completes.
    # The sweep is long (1000 x 64 MB) so that the stop lands inside it on any machine.
    port = free_port()
    cmd = [sys.executable, "-m", "grpo_doctor.probe", "--run-dir", "run", "--op-timeout", "3", "--sizes", "64M",
           "--iters", "1000", "--warmup", "1", "--rdzv-timeout", "60"]
    procs = [subprocess.Popen(cmd, env=clean_env(OMP_NUM_THREADS="1", RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r),
                                                 LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)),
                              cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in (0, 1)]
    try:
        lines = []
        while not lines or "every rank joined" not in lines[-1]:
            line = procs[0].stdout.readline()
            assert line, "".join(lines) + procs[0].stderr.read()
            lines.append(line)
        time.sleep(2)  # into the collectives
        procs[1].send_signal(signal.SIGSTOP)
        stdout, stderr = procs[0].communicate(timeout=180)  # gives up by itself: nothing else ends it
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=30)
    assert procs[0].returncode == 1, stdout + stderr
    stuck = [line for line in stdout.splitlines() if "did not finish within 3 s" in line]
    assert len(stuck) == 1, stdout
    assert stuck[0].startswith("  CRITICAL nccl-error: the probe stopped on rank(s) 0: ") and "Traceback" not in stderr
    results = json.loads((tmp_path / "run/probe/collectives.json").read_text())
    assert {p["id"] for p in results["problems"]} == {"nccl-error"}
    assert any("did not finish within 3 s" in p["message"] for p in results["problems"])


@pytest.mark.distributed
def test_two_nodes_launched_with_different_settings_get_config_mismatch_naming_the_odd_node(tmp_path):
    port = str(free_port())
    common = ["--nnodes", "2", "--master-addr", "127.0.0.1", "--master-port", port, "--nproc-per-node", "1",
              "--rdzv-timeout", "30", "--run-dir", "run", *SMALL]
    nodes = [subprocess.Popen(probe_cmd(*common, "--node-rank", str(n), "--expect", f"use_vllm={v}"),
                              env=clean_env(OMP_NUM_THREADS="1"), cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
             for n, v in ((0, "true"), (1, "false"))]
    outs = [p.communicate(timeout=180) for p in nodes]
    assert [p.returncode for p in nodes] == [1, 1], outs
    for stdout, _ in outs:
        assert "CRITICAL config-mismatch: expect:use_vllm differs between nodes" in stdout
        assert "odd one(s) out: node 1" in stdout
    # The collectives still ran (the nodes could meet), and found nothing else.
    assert "correctness: all_reduce ok" in outs[0][0]


def test_an_unresolvable_master_is_named_at_once(tmp_path):
    # An hour's rendezvous timeout: had the probe waited it out for a name, `run` would time out.
    out = run(probe_cmd("--nnodes", "2", "--node-rank", "1", "--master-addr", "no-such-node.invalid",
                        "--nproc-per-node", "1", "--rdzv-timeout", "3600", "--run-dir", "run"), tmp_path)
    assert out.returncode == 1
    assert "CRITICAL rendezvous-failure: MASTER_ADDR:MASTER_PORT=no-such-node.invalid:29500: unresolvable" in out.stdout
    assert "collectives not run" in out.stdout
    (node,) = (tmp_path / "run/probe").glob("node-001-*.json")
    assert json.loads(node.read_text())["preflight"]["connect"] == "unresolvable"


def test_a_master_nobody_listens_on_is_refused_within_the_timeout(tmp_path):
    out = run(probe_cmd("--nnodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1", "--master-port",
                        str(free_port()), "--nproc-per-node", "1", "--rdzv-timeout", "3", "--run-dir", "run"), tmp_path)
    assert out.returncode == 1
    assert "refused (connection refused (nothing listens on the port yet); kept trying for" in out.stdout
    assert "start node 0 (NODE_RANK=0) within the rendezvous timeout" in out.stdout


def test_a_master_port_already_taken_is_named_on_node_0(tmp_path):
    with socket.socket() as holder:
        holder.bind(("", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        out = run(probe_cmd("--nproc-per-node", "1", "--master-port", str(port), "--run-dir", "run"), tmp_path)
    assert out.returncode == 1
    assert f"MASTER_ADDR:MASTER_PORT=127.0.0.1:{port}: port-in-use" in out.stdout


@pytest.mark.parametrize("args, message", [
    (["--expect", "use_vllm"], "--expect 'use_vllm': expected KEY=VALUE"),
    (["--sizes", "1K,12Q"], "--sizes '1K,12Q': '12Q' is not a size"),
    (["--op-timeout", "0"], "--op-timeout 0.0: must be above 0"),
    (["--args-file", "missing.json"], "--args-file missing.json: cannot read it"),
    (["--nnodes", "2", "--node-rank", "2"], "node rank 2 with 2 node(s)"),
    (["--backend", "nccl"], "--backend nccl: CUDA is not available here"),
])
def test_bad_options_are_one_line_errors_with_exit_2(tmp_path, args, message):
    if "nccl" in args and has_cuda():
        pytest.skip("NCCL is a valid backend where CUDA is available")
    out = run(probe_cmd("--nproc-per-node", "1", *args), tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.startswith(f"grpo-doctor: error: {message}"), out.stderr


def test_no_nproc_per_node_says_how_to_give_it(tmp_path):
    out = run(probe_cmd(), tmp_path)
    assert out.returncode == 2
    assert "hint: pass --nproc-per-node N (as for torchrun) or set NPROC_PER_NODE" in out.stderr


def test_the_rank_entry_point_outside_torchrun_says_how_to_start_it(tmp_path):
    out = run([sys.executable, "-m", "grpo_doctor.probe"], tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT not set" in out.stderr and "torchrun" in out.stderr
