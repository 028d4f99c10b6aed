from rundata import header, write_rank

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import config_mismatch, version_mismatch

LAUNCH = {"NNODES": "2", "NPROC_PER_NODE": "8", "WORLD_SIZE": "16", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500",
          "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7", "NCCL_SOCKET_IFNAME": "eth0"}
VERSIONS = {"torch": "2.5.1", "vllm": "0.7.3", "nccl": "2.21.5"}


def _run(tmp_path, launch1, versions1):
    write_rank(tmp_path / "node0", 0, [header(0, 16, host="gpu-a", launch=LAUNCH, versions=VERSIONS)])
    write_rank(tmp_path / "node1", 8, [header(8, 16, host="gpu-b", launch=launch1, versions=versions1)])
    return load_evidence([tmp_path / "node0", tmp_path / "node1"])


def test_nproc_and_visible_devices_differing_between_hosts_is_critical(tmp_path):
    ev = _run(tmp_path, LAUNCH | {"NPROC_PER_NODE": "7", "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6",
                                  "NCCL_SOCKET_IFNAME": "ib0"}, VERSIONS)
    [f] = config_mismatch.check(ev, config_mismatch.Config())
    assert (f.id, f.severity, f.hosts, f.ranks) == ("config-mismatch", "critical", ("gpu-a", "gpu-b"), (0, 8))
    diff = f.evidence["differences"]
    assert diff["NPROC_PER_NODE"] == {"gpu-a": "8", "gpu-b": "7"}
    assert diff["CUDA_VISIBLE_DEVICES (count)"] == {"gpu-a": 8, "gpu-b": 7}
    assert diff["NCCL_SOCKET_IFNAME"] == {"gpu-a": "eth0", "gpu-b": "ib0"}
    assert "MASTER_PORT" not in diff
    assert not list(version_mismatch.check(ev, version_mismatch.Config()))


def test_only_nccl_variables_differing_is_a_warning(tmp_path):
    ev = _run(tmp_path, LAUNCH | {"NCCL_IB_DISABLE": "1"}, VERSIONS)
    [f] = config_mismatch.check(ev, config_mismatch.Config())
    assert f.severity == "warning" and f.evidence["differences"] == {"NCCL_IB_DISABLE": {"gpu-a": None, "gpu-b": "1"}}


def test_versions_differing_between_hosts_are_named_with_both_values(tmp_path):
    ev = _run(tmp_path, LAUNCH, VERSIONS | {"vllm": "0.8.0"})
    assert not list(config_mismatch.check(ev, config_mismatch.Config()))
    [f] = version_mismatch.check(ev, version_mismatch.Config())
    assert f.id == "version-mismatch" and f.evidence["differences"] == {"vllm": {"gpu-a": "0.7.3", "gpu-b": "0.8.0"}}
    assert "0.7.3 vs 0.8.0" in f.title
