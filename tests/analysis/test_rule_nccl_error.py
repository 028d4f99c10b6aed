import dataclasses

from rundata import LOGS, header, write_rank

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import nccl_error


def _by_kind(*paths):
    findings = list(nccl_error.check(load_evidence(list(paths)), nccl_error.Config()))
    assert all(f.id == "nccl-error" for f in findings)
    return {f.evidence["error_kind"]: f for f in findings}


def test_connects_to_loopback_and_link_local_point_at_the_socket_interface():
    f = _by_kind(LOGS / "nccl_errors.log")["wrong-interface"]
    assert f.severity == "critical" and f.ranks == (3,) and f.hosts == ("node-2",)
    assert f.evidence["addresses"] == ["127.0.1.1<43561>", "fe80::a00:27ff:fe4e:66a1%eth1<43562>"]
    assert f.evidence["bad_interface"] and f.evidence["error_codes"] == ["ncclSystemError"]
    assert f.evidence["num_reports"] == 3  # two WARN lines and rank 3's exception
    assert "NCCL_SOCKET_IFNAME" in f.hints[0] and "GLOO_SOCKET_IFNAME" in f.hints[0]
    assert any("NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET" in h for h in f.hints)
    assert not any("other host's log" in h for h in f.hints)


def test_a_remote_error_names_the_peer_and_sends_the_user_to_its_log():
    by_kind = _by_kind(LOGS / "nccl_errors.log")
    f = by_kind["remote-peer"]
    assert (f.severity, f.ranks, f.hosts) == ("critical", (0,), ("node-3",))
    assert f.evidence["peers"] == ["node-4"] and "node-4" in f.title
    assert f.evidence["error_codes"] == ["ncclRemoteError"] and f.evidence["nccl_versions"] == ["2.21.5"]
    assert "other host's log" in f.hints[0]
    assert not any("NCCL_SOCKET_IFNAME=eth0" in h for h in f.hints)
    # A plain connect timeout to a real address is a network problem, not a wrong interface.
    network = by_kind["network"]
    assert network.evidence["addresses"] == ["10.0.0.4<50123>"] and not network.evidence["bad_interface"]
    assert "allow all TCP" in network.hints[0]


def test_cuda_shared_memory_and_vague_warnings_are_told_apart():
    by_kind = _by_kind(LOGS / "nccl_errors.log")
    cuda = by_kind["cuda"]
    assert cuda.ranks == (1,) and cuda.evidence["cuda_errors"] == ["invalid argument"]
    assert cuda.evidence["error_codes"] == ["ncclUnhandledCudaError"] and "invalid argument" in cuda.title
    shm = by_kind["shared-memory"]
    assert shm.evidence["error_codes"] == ["ncclInternalError"] and "--shm-size" in shm.hints[0]
    assert by_kind["invalid-usage"].evidence["details"] == ["invalid usage"]
    other = by_kind["other"]  # the proxy's WARN alone says nothing recognisable: not critical
    assert other.severity == "warning" and other.hosts == ("node-3",)


def test_infiniband_failures_suggest_disabling_ib_to_test(tmp_path):
    log = tmp_path / "node-1.log"
    log.write_text(
        "node-1:1234:1300 [0] transport/net_ib.cc:1150 NCCL WARN NET/IB : Got completion from peer 10.0.0.5<33311> "
        "with status=12 opcode=0 len=0 vendor err 129 (Recv)\n"
        "[rank2]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, "
        "remote process exited or there was a network error, NCCL version 2.21.5\n"
        "[rank2]: ncclRemoteError: A call failed possibly due to a network error or a remote process exiting "
        "prematurely.\n"
        "[rank2]: Last error:\n"
        "[rank2]: NET/IB : Got completion from peer 10.0.0.5<33311> with status=12 opcode=0 len=0 vendor err 129 "
        "(Recv)\n")
    [f] = _by_kind(log).values()
    assert (f.evidence["error_kind"], f.severity, f.ranks, f.hosts) == ("infiniband", "critical", (2,), ("node-1",))
    assert "NCCL_IB_DISABLE=1" in f.hints[0] and "NCCL_IB_HCA" in f.hints[0]
    assert f.evidence["num_reports"] == 2


def test_a_warn_line_is_tied_to_a_rank_by_host_and_pid_from_the_rank_headers(tmp_path):
    run_dir = tmp_path / "run"
    write_rank(run_dir, 3, [dataclasses.replace(header(3, 4, host="node-2.cluster.local"), pid=40417)])
    log = tmp_path / "nccl.log"
    log.write_text(
        "node-2:40417:40502 [1] NCCL WARN socketStartConnect: Connect to 127.0.1.1<43561> failed : "
        "Connection refused\n"
        # Same pid on another host: a different process, no rank to name.
        "node-3:40417:40502 [1] NCCL WARN socketStartConnect: Connect to 127.0.1.1<43561> failed : Connection refused\n")
    [f] = _by_kind(run_dir, log).values()
    assert f.ranks == (3,) and f.hosts == ("node-2", "node-3")


def test_a_log_with_only_nccl_info_lines_gives_no_nccl_error(tmp_path):
    log = tmp_path / "ok.log"
    log.write_text("node-2:40417:40502 [7] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>\n"
                   "node-2:40417:40502 [7] NCCL INFO NET/IB : No device found.\n")
    assert list(nccl_error.check(load_evidence([log]), nccl_error.Config())) == []
    assert list(nccl_error.check(load_evidence([LOGS / "vllm_memory.log"]), nccl_error.Config())) == []
