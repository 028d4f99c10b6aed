"""A scripted NVIDIA driver behind the real pynvml module's face, for tests on machines without a GPU.

`FakeDriver.module()` is a stand-in for `import pynvml`: every constant, error class and ctypes result
structure is the installed pynvml's own (nvidia-ml-py), only the functions that would call
libnvidia-ml answer from the scripted GPUs, with the shapes the real ones return (c_nvmlMemory_t,
nvmlPciInfo_t with a bytes busId, an array of c_nvmlFieldValue_t whose nvmlReturn says per field
whether it is supported, NVMLError_Timeout from an empty event set, NVMLError_GPUIsLost from a GPU
that fell off the bus). grpo_doctor.host.nvml.Nvml runs over it unchanged.

Typical use:
    driver = FakeDriver([FakeGpu(uuid="GPU-a", bus_id="00000000:3B:00.0", pids=((4101, 2**30),))])
    monkeypatch.setitem(sys.modules, "pynvml", driver.module())
    driver.xid(0, 79, lose=True)        # the next nvmlEventSetWait_v2 reports it; the GPU is gone after
"""
from __future__ import annotations

import types
from dataclasses import dataclass, field

import pynvml as real

FIELD_MEMBERS = {real.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal", real.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal"}


@dataclass
class FakeGpu:
    uuid: str
    bus_id: str  # as NVML spells it: "00000000:3B:00.0"
    pids: tuple[tuple[int, int], ...] = ()  # (pid, used bytes) of the compute processes on it
    util_pct: int = 90
    mem_bytes: tuple[int, int] = (60 * 2**30, 80 * 2**30)  # used, total
    power_mw: int = 650_000
    temp_c: int = 65
    sm_clock_mhz: int = 1980
    ecc_uncorrected: int = 0
    clocks_event_reasons: int = 0  # a mask of pynvml's nvmlClocksEventReason* bits
    # NVML field id -> value; a field not here answers NVML_ERROR_NOT_SUPPORTED (NVLink on a PCIe card)
    fields: dict[int, int] = field(default_factory=dict)
    lost: bool = False  # fell off the bus: every query answers NVML_ERROR_GPU_IS_LOST


@dataclass
class _Handle:
    index: int


class FakeDriver:
    def __init__(self, gpus: list[FakeGpu], driver_version: str = "570.124.06") -> None:
        self.gpus = gpus
        self.driver_version = driver_version
        self.pending: list[tuple[int, int]] = []  # (index, xid) not yet read by nvmlEventSetWait_v2
        self.registered: set[int] = set()

    def xid(self, index: int, xid: int, lose: bool = False) -> None:
        """GPU `index` reports Xid `xid` (and, with lose, is gone from then on, as after Xid 79)."""
        self.pending.append((index, xid))
        if lose:
            self.gpus[index].lost = True

    def module(self) -> types.ModuleType:
        m = types.ModuleType("pynvml")
        for name in dir(real):
            value = getattr(real, name)
            if name.startswith(("NVMLError", "c_nvml", "nvmlPciInfo")) or (
                    name.startswith(("NVML_", "nvml")) and not callable(value)):
                setattr(m, name, value)
        for name in dir(self):
            if name.startswith("nvml"):
                setattr(m, name, getattr(self, name))
        return m

    # --- the functions Nvml calls

    def nvmlInit(self) -> None:
        pass

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver_version

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        if not 0 <= index < len(self.gpus):
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
        return _Handle(index)

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> _Handle:
        for index, gpu in enumerate(self.gpus):
            if gpu.uuid == uuid:
                return _Handle(index)
        raise real.NVMLError(real.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetIndex(self, handle: _Handle) -> int:
        return handle.index

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:
        return self._gpu(handle).uuid

    def nvmlDeviceGetUtilizationRates(self, handle: _Handle):
        return real.c_nvmlUtilization_t(gpu=self._gpu(handle).util_pct, memory=0)

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle):
        used, total = self._gpu(handle).mem_bytes
        return real.c_nvmlMemory_t(total=total, free=total - used, used=used)

    def nvmlDeviceGetPowerUsage(self, handle: _Handle) -> int:
        return self._gpu(handle).power_mw

    def nvmlDeviceGetTemperature(self, handle: _Handle, sensor: int) -> int:
        assert sensor == real.NVML_TEMPERATURE_GPU
        return self._gpu(handle).temp_c

    def nvmlDeviceGetClockInfo(self, handle: _Handle, clock: int) -> int:
        assert clock == real.NVML_CLOCK_SM
        return self._gpu(handle).sm_clock_mhz

    def nvmlDeviceGetComputeRunningProcesses(self, handle: _Handle) -> list:
        return [real.nvmlStructToFriendlyObject(real.c_nvmlProcessInfo_v2_t(pid=pid, usedGpuMemory=used))
                for pid, used in self._gpu(handle).pids]

    def nvmlDeviceGetTotalEccErrors(self, handle: _Handle, error_type: int, counter_type: int) -> int:
        assert (error_type, counter_type) == (real.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, real.NVML_VOLATILE_ECC)
        return self._gpu(handle).ecc_uncorrected

    def nvmlDeviceGetPciInfo(self, handle: _Handle):
        return real.nvmlPciInfo_t(busId=self._gpu(handle).bus_id.encode())

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: _Handle) -> int:
        return self._gpu(handle).clocks_event_reasons

    def nvmlDeviceGetFieldValues(self, handle: _Handle, field_ids: list[int]):
        gpu = self._gpu(handle)
        values = (real.c_nvmlFieldValue_t * len(field_ids))()
        for value, field_id in zip(values, field_ids, strict=True):
            value.fieldId = field_id
            if field_id not in gpu.fields:
                value.nvmlReturn = real.NVML_ERROR_NOT_SUPPORTED
                continue
            value.nvmlReturn = real.NVML_SUCCESS
            value.valueType = real.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
            value.value.ullVal = gpu.fields[field_id]
        return values

    def nvmlEventSetCreate(self) -> object:
        return object()

    def nvmlDeviceRegisterEvents(self, handle: _Handle, event_types: int, event_set: object) -> None:
        assert event_types & real.nvmlEventTypeXidCriticalError
        self.registered.add(handle.index)

    def nvmlEventSetWait_v2(self, event_set: object, timeout_ms: int):
        if not self.pending:
            raise real.NVMLError(real.NVML_ERROR_TIMEOUT)
        index, xid = self.pending.pop(0)
        # c_nvmlEventData_t's fields; `device` is a handle, which ctypes cannot hold for a fake one
        return types.SimpleNamespace(device=_Handle(index), eventType=real.nvmlEventTypeXidCriticalError,
                                     eventData=xid, gpuInstanceId=0, computeInstanceId=0)

    def _gpu(self, handle: _Handle) -> FakeGpu:
        gpu = self.gpus[handle.index]
        if gpu.lost:
            raise real.NVMLError(real.NVML_ERROR_GPU_IS_LOST)
        return gpu
