"""`gpu-fault`: machine faults as evidence. The watch samples here are written by the real sampler
(supervisor/sampler.py) reading the real host/nvml.py over a scripted driver with pynvml's own constants
and structures (tests/fake_pynvml.py); the kernel lines are verbatim from public issues
(tests/data/logs/real_wordings.sources.md)."""
from __future__ import annotations

import json
import sys

import pynvml
import pytest
from fake_pynvml import FakeDriver, FakeGpu
from rundata import common, header, write_rank

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import gpu_fault, run_rules
from grpo_doctor.cli.main import main
from grpo_doctor.host.nvml import Nvml
from grpo_doctor.schema import End, EndReason, Error, RunPaths, Step
from grpo_doctor.supervisor.sampler import Sampler

HOST = "node-a"
PEER_LOST = ("torch.distributed.DistBackendError", "NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, "
             "remote process exited or there was a network error, NCCL version 2.21.5")
# Verbatim (tests/data/logs/real_wordings.log): NVIDIA/nvidia-docker#1648, NVIDIA/open-gpu-kernel-modules#1151.
XID_119 = ("[Mon Mar  6 21:37:31 2023] NVRM: Xid (PCI:0000:61:00): 119, pid=905052, name=python, Timeout waiting for "
           "RPC from GSP! Expected function 76 (GSP_RM_CONTROL) (0x20801702 0x4).\n")
XID_79 = ("May 18 19:02:39 kernel: NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.\n"
          "May 18 19:02:39 kernel: NVRM: GPU 0000:2b:00.0: GPU has fallen off the bus.\n")


def _gpus(**gpu1):
    return [FakeGpu("GPU-a0", "00000000:3B:00.0", pids=((1000, 30 * 2**30),)),
            FakeGpu("GPU-a1", "00000000:4C:00.0", pids=((1001, 30 * 2**30),), **gpu1)]


def _sample(run, monkeypatch, driver, rounds, between=None):
    """watch's sampler on HOST, `rounds` rounds one second apart; `between(round)` changes the driver."""
    monkeypatch.setitem(sys.modules, "pynvml", driver.module())
    sampler = Sampler(RunPaths(run).watch_files(HOST).samples, nvml=Nvml())
    sampler.set_targets({0: 1000, 1: 1001})
    for i in range(rounds):
        if between:
            between(i)
        sampler.sample_once(now=100.0 + i)
    sampler.stop()


def _ranks_where_1_died(run):
    """Rank 1 (pid 1001, on GPU 1) stops without an End record; rank 0 loses its peer in the next collective."""
    write_rank(run, 0, [header(0, 2, host=HOST), Step(**common(0, step=0, t=100.5, host=HOST), metrics={"loss": 1.0}),
                        Error(**common(0, step=1, t=160.0, host=HOST), exc_type=PEER_LOST[0], message=PEER_LOST[1],
                              traceback="", phase="train", path="train"),
                        End(**common(0, step=1, t=160.5, host=HOST), reason=EndReason.EXCEPTION)])
    write_rank(run, 1, [header(1, 2, host=HOST), Step(**common(1, step=0, t=100.5, host=HOST), metrics={"loss": 1.0})])


def test_report_of_a_watched_run_leads_with_the_xid_79_of_the_dead_ranks_gpu(tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    driver = FakeDriver(_gpus())
    _sample(run, monkeypatch, driver, 3, between=lambda i: i == 1 and driver.xid(1, 79, lose=True))
    _ranks_where_1_died(run)
    status = main(["report", str(run)])
    out = capsys.readouterr().out
    assert status == 1
    first = out.splitlines()[0]
    assert first.startswith("CRITICAL gpu-fault:") and "GPU 1 (0000:4c:00) on node-a" in first, out
    assert "reported Xid 79 (GPU has fallen off the bus)" in first and "rank(s) 1 ran on it" in first
    findings = json.loads((run / "findings.json").read_text())["findings"]
    root = findings[0]
    assert (root["id"], root["role"], root["ranks"], root["hosts"]) == ("gpu-fault", "root-cause", [1], [HOST])
    assert root["evidence"]["xids"] == [79] and root["evidence"]["first_t"] == 101.0
    assert root["evidence"]["xid_details"][0]["action"] == "RESTART_BM" and root["evidence"]["hardware"]
    assert "drain the node" in root["hints"][0]
    effects = {(f["id"], tuple(f["ranks"])): f for f in findings[1:]}
    dead = effects[("rank-crash", (1,))]
    assert dead["role"] == "consequence" and dead["caused_by"] == "gpu-fault@1"
    assert "GPU 1 on node-a failed (Xid 79)" in dead["title"]
    assert effects[("rank-crash", (0,))]["caused_by"] == "gpu-fault@1"  # its peer left: the same incident


def test_without_the_xid_the_dead_rank_is_its_own_root_cause(tmp_path, monkeypatch):
    run = tmp_path / "run"
    _sample(run, monkeypatch, FakeDriver(_gpus()), 3)
    _ranks_where_1_died(run)
    findings, _ = run_rules(load_evidence([run]))
    assert "gpu-fault" not in {f.id for f in findings}
    assert (findings[0].id, findings[0].ranks, findings[0].role) == ("rank-crash", (1,), "root-cause")


def test_sampled_ecc_nvlink_recovery_action_and_throttling(tmp_path, monkeypatch):
    run = tmp_path / "run"
    fields = {pynvml.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL: 4,
              pynvml.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL: 0,
              pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: pynvml.NVML_GPU_RECOVERY_ACTION_NONE}
    driver = FakeDriver(_gpus(fields=fields, clocks_event_reasons=pynvml.nvmlClocksEventReasonHwThermalSlowdown))

    def later(i):
        gpu = driver.gpus[1]
        if i == 2:  # the driver found uncorrectable errors: ECC up, NVLink replays up, a reset asked for
            gpu.ecc_uncorrected = 2
            gpu.fields[pynvml.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL] = 9
            gpu.fields[pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION] = pynvml.NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET
            driver.xid(1, 48)

    _sample(run, monkeypatch, driver, 4, between=later)
    _ranks_where_1_died(run)
    [f] = gpu_fault.check(load_evidence([run]), gpu_fault.Config())
    ev = f.evidence
    assert (f.severity, f.ranks, ev["gpu"], ev["pci_bus_id"], ev["uuid"]) == ("critical", (1,), 1, "0000:4c:00",
                                                                               "GPU-a1")
    assert ev["xids"] == [48] and ev["ecc_errors_delta"] == 2 and ev["recovery_action"] == "drain-and-reset"
    assert ev["nvlink_errors_delta"] == {"replay": 5, "recovery": 0, "crc": 0}
    assert ev["throttle_reasons"] == {"hw-thermal-slowdown": 1.0}
    assert any("nvidia-smi -q -d ECC,ROW_REMAPPER" in h for h in f.hints)
    assert any("drain-and-reset" in h for h in f.hints) and any("cooling" in h for h in f.hints)
    quiet = gpu_fault.check(load_evidence([run]), gpu_fault.Config(min_nvlink_errors=10, min_throttle_samples=5))
    assert "NVLink" not in next(quiet).title


def test_throttling_alone_is_a_warning_that_explains_its_ranks_straggling(tmp_path, monkeypatch):
    from grpo_doctor.analysis.findings import Finding
    from grpo_doctor.analysis.incidents import link_incidents

    run = tmp_path / "run"
    _sample(run, monkeypatch, FakeDriver(_gpus(clocks_event_reasons=pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown)),
            4)
    write_rank(run, 1, [header(1, 2, host=HOST)])
    [f] = gpu_fault.check(load_evidence([run]), gpu_fault.Config())
    assert (f.severity, f.ranks, f.evidence["hardware"]) == ("warning", (1,), False)
    slow = Finding(id="straggler", severity="warning", title="rank 1 slow", ranks=(1,))
    crash = Finding(id="rank-crash", severity="critical", title="rank 1 crashed", ranks=(1,))
    out = {x.id: x for x in link_incidents([slow, crash, f])}
    assert out["straggler"].caused_by == "gpu-fault@1" and out["rank-crash"].role is None  # throttling kills nothing


def test_kernel_log_and_torchrun_log_the_xid_names_the_failed_workers_pid(tmp_path, capsys):
    dmesg = tmp_path / "dmesg.log"
    dmesg.write_text(XID_119)
    torchrun = tmp_path / "torchrun.log"
    torchrun.write_text(
        "[2023-03-06 21:38:02,118] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: 1) "
        "local_rank: 3 (pid: 905052) of binary: /usr/bin/python\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
        "============================================================\n"
        "train.py FAILED\n"
        "------------------------------------------------------------\n"
        "Failures:\n"
        "  <NO_OTHER_FAILURES>\n"
        "------------------------------------------------------------\n"
        "Root Cause (first observed failure):\n"
        "[0]:\n"
        "  time      : 2023-03-06_21:38:02\n"
        "  host      : gpu-node-7\n"
        "  rank      : 3 (local_rank: 3)\n"
        "  exitcode  : 1 (pid: 905052)\n"
        "  error_file: <N/A>\n"
        "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n"
        "============================================================\n")
    status = main(["report", str(dmesg), str(torchrun), "--out", str(tmp_path / "r.html")])
    out = capsys.readouterr().out
    assert status == 1
    first = out.splitlines()[0]
    assert first.startswith("CRITICAL gpu-fault:") and "A GPU (0000:61:00)" in first and "Xid 119" in first, out
    findings = json.loads((tmp_path / "findings.json").read_text())["findings"]
    root = findings[0]
    assert root["ranks"] == [3] and root["evidence"]["pids"] == [905052]
    assert root["evidence"]["xid_details"][0]["mnemonic"] == "GSP_RPC_TIMEOUT"
    crash = next(f for f in findings if f["id"] == "rank-crash")
    assert crash["ranks"] == [3] and crash["caused_by"] == "gpu-fault@3"


def test_a_fallen_off_gpu_reported_twice_by_the_driver_is_one_finding_and_names_no_rank(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text(XID_79)
    [f] = gpu_fault.check(load_evidence([log]), gpu_fault.Config())
    assert (f.severity, f.ranks, f.evidence["xids"], f.evidence["pci_bus_id"]) == ("critical", (), [79], "0000:2b:00")
    assert f.evidence["sources"] == ["kernel-log"]


@pytest.mark.parametrize(("line", "severity", "hardware"), [
    # the application's own fault (leptonai/gpud#46): the GPU is fine, the crash itself is the news
    ("[Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp "
     "Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter\n", "info", False),
    ("kernel: NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by previous Xid 149\n",
     "info", False),
])
def test_application_and_follow_up_xids_are_no_machine_fault(tmp_path, line, severity, hardware):
    from grpo_doctor.analysis.findings import Finding
    from grpo_doctor.analysis.incidents import link_incidents

    log = tmp_path / "kern.log"
    log.write_text(line)
    [f] = gpu_fault.check(load_evidence([log]), gpu_fault.Config())
    assert (f.severity, f.evidence["hardware"]) == (severity, hardware)
    crash = Finding(id="rank-crash", severity="critical", title="crash", ranks=f.ranks or (0,), hosts=f.hosts)
    assert all(x.role is None for x in link_incidents([f, crash]))


def test_a_cuda_error_naming_uncorrectable_ecc_is_a_gpu_fault_of_that_rank(tmp_path):
    # verbatim from kohya-ss/sd-scripts#1434, behind torchrun's rank prefix
    log = tmp_path / "train.log"
    log.write_text("[rank1]: RuntimeError: CUDA error: uncorrectable ECC error encountered\n")
    findings, _ = run_rules(load_evidence([log]))
    root = findings[0]
    assert (root.id, root.ranks, root.role, root.evidence["cuda_errors"]) == (
        "gpu-fault", (1,), "root-cause", ["uncorrectable ECC error encountered"])
    assert next(f for f in findings if f.id == "rank-crash").caused_by == "gpu-fault@1"
