"""Machine faults read through NVML: Xid events, NVLink error totals, throttle reasons, row remapping and the
GPU recovery action. The real host/nvml.py code runs over a scripted driver that has the installed pynvml's
constants and result structures (tests/fake_pynvml.py); the sampler writes what it read as watch does."""
from __future__ import annotations

import json
import sys

import pynvml
import pytest
from fake_pynvml import FakeDriver, FakeGpu
from sample_files import load_samples

from grpo_doctor.host.nvml import Nvml
from grpo_doctor.supervisor.sampler import GpuSample, Sampler

FAULTY = {pynvml.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL: 12,
          pynvml.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL: 2,
          pynvml.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL: 5,
          pynvml.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL: 1,
          pynvml.NVML_FI_DEV_REMAPPED_PENDING: 1,
          pynvml.NVML_FI_DEV_REMAPPED_FAILURE: 0,
          pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: pynvml.NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET}


@pytest.fixture
def driver(monkeypatch):
    hot = pynvml.nvmlClocksEventReasonHwThermalSlowdown | pynvml.nvmlClocksEventReasonSwPowerCap
    fake = FakeDriver([FakeGpu("GPU-aaaa", "00000000:3B:00.0", pids=((4101, 30 * 2**30),), fields=FAULTY,
                               clocks_event_reasons=hot),
                       FakeGpu("GPU-bbbb", "00000000:4C:00.0", pids=((4102, 30 * 2**30),))])
    monkeypatch.setitem(sys.modules, "pynvml", fake.module())
    return fake


def test_fault_fields_throttle_reasons_and_bus_id_by_nvmls_own_constants(driver):
    nvml = Nvml()
    assert nvml.pci_bus_id(0) == "00000000:3B:00.0"
    # the power cap is how a loaded GPU runs; a thermal slowdown is the hardware protecting itself
    assert nvml.throttle_reasons(0) == ("hw-thermal-slowdown",)
    assert nvml.fault_fields(0) == {"nvlink_replay_errors": 12, "nvlink_recovery_errors": 2,
                                    "nvlink_crc_flit_errors": 5, "nvlink_crc_data_errors": 1,
                                    "remapped_rows_pending": True, "remapped_rows_failure": False,
                                    "recovery_action": "drain-and-reset"}
    assert nvml.fault_fields(1) == {}  # a GPU without NVLink or remapping: every field NOT_SUPPORTED


def test_an_older_binding_without_a_constant_leaves_that_value_out(driver, monkeypatch):
    module = sys.modules["pynvml"]
    monkeypatch.delattr(module, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION")  # bindings before r570
    monkeypatch.delattr(module, "nvmlDeviceGetCurrentClocksEventReasons")  # before r535: "throttle reasons"
    monkeypatch.setattr(module, "nvmlDeviceGetCurrentClocksThrottleReasons",
                        lambda handle: pynvml.nvmlClocksThrottleReasonHwSlowdown, raising=False)
    nvml = Nvml()
    assert "recovery_action" not in nvml.fault_fields(0) and nvml.fault_fields(0)["nvlink_recovery_errors"] == 2
    assert nvml.throttle_reasons(0) == ("hw-slowdown",)


def test_the_sampler_writes_faults_and_a_gpu_that_fell_off_the_bus(driver, tmp_path):
    out = tmp_path / "samples.jsonl"
    sampler = Sampler(out, nvml=Nvml())
    first = sampler.sample_once(now=10.0)
    assert driver.registered == {0, 1}
    driver.xid(1, 79, lose=True)
    second = sampler.sample_once(now=11.0)
    gpu0, gpu1 = first
    assert (gpu0.pci_bus_id, gpu0.throttle_reasons, gpu0.recovery_action) == (
        "00000000:3B:00.0", ("hw-thermal-slowdown",), "drain-and-reset")
    assert (gpu0.nvlink_replay_errors, gpu0.nvlink_recovery_errors, gpu0.nvlink_crc_errors) == (12, 2, 6)
    assert gpu0.remapped_rows_pending is True and gpu1.nvlink_crc_errors is None and gpu1.recovery_action is None
    lost = second[1]
    assert lost.xid_events == (79,) and lost.pci_bus_id == "00000000:4C:00.0"  # the bus id asked before it went
    assert lost.util_pct is None and lost.processes == ()  # NVML_ERROR_GPU_IS_LOST for everything else
    assert second[0].xid_events == ()
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows[3]["xid_events"] == [79] and rows[0]["throttle_reasons"] == ["hw-thermal-slowdown"]
    assert load_samples(out) == [*first, *second]


def test_samples_written_before_these_fields_still_load():
    old = {"schema": 1, "kind": "gpu", "t": 1.0, "index": 0, "uuid": "GPU-x", "util_pct": 1, "mem_used_bytes": 1,
           "mem_total_bytes": 2, "power_w": 1.0, "temp_c": 30, "sm_clock_mhz": 1, "processes": [],
           "xid_events": [48], "ecc_errors": 3}
    sample = GpuSample.from_dict(old)
    assert sample.xid_events == (48,) and sample.pci_bus_id is None and sample.throttle_reasons == ()
