"""NVML, the only way to see GPU memory held by *other* processes (a colocated vLLM engine).

The rank-side queries degrade to "unknown" (None / []) where there is no NVIDIA driver, so
callers need no special cases. The per-device metrics the supervisor samples (`utilization_pct`,
`power_w`, ... by NVML index) instead raise `NvmlError`, one metric at a time, because a GPU
commonly supports some queries and not others and the caller keeps the rest. NVML is
initialised once, on first use.

Typical use:
    nvml = Nvml()
    for proc in nvml.processes("GPU-5f2c..."):
        print(proc.pid, proc.used_bytes)
    if nvml.available:
        nvml.watch_xid_events()
        watts = nvml.power_w(0)          # NvmlError if this GPU cannot say
        events = nvml.xid_events()       # [XidEvent(index=0, xid=79)] since the last call
"""
from __future__ import annotations

import threading
from dataclasses import dataclass


class NvmlError(Exception):
    """One NVML query failed: not supported on this GPU, GPU lost, no permission, or no NVML."""


@dataclass(frozen=True)
class XidEvent:
    index: int | None  # NVML device index; None when NVML cannot say which GPU
    xid: int  # the Xid number, as in the kernel log's "NVRM: Xid (...): 79, ..."


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_bytes: int | None  # None when NVML cannot attribute memory (common in containers)


class Nvml:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state: str = "new"  # new | ready | unavailable
        self._pynvml = None
        self._handles: dict[str, object] = {}
        self._index_handles: dict[int, object] = {}
        self._xid_set = None

    @property
    def available(self) -> bool:
        return self._ensure()

    def _ensure(self) -> bool:
        if self._state == "new":
            with self._lock:
                if self._state == "new":
                    try:
                        import pynvml

                        pynvml.nvmlInit()
                        self._pynvml, self._state = pynvml, "ready"
                    except Exception:  # no driver, no library, no permission: all mean "no NVML"
                        self._state = "unavailable"
        return self._state == "ready"

    def driver_version(self) -> str | None:
        if not self._ensure():
            return None
        version = self._pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else version

    def uuid_of_visible_device(self, cuda_index: int, visible: str | None) -> str | None:
        """NVML UUID of cuda:<cuda_index> given CUDA_VISIBLE_DEVICES (indices or UUIDs)."""
        if not self._ensure():
            return None
        entries = [e.strip() for e in visible.split(",")] if visible else None
        entry = entries[cuda_index] if entries and cuda_index < len(entries) else str(cuda_index)
        try:
            if entry.isdigit():
                handle = self._pynvml.nvmlDeviceGetHandleByIndex(int(entry))
            else:
                handle = self._pynvml.nvmlDeviceGetHandleByUUID(entry)
            uuid = self._pynvml.nvmlDeviceGetUUID(handle)
        except self._pynvml.NVMLError:
            return None
        return uuid.decode() if isinstance(uuid, bytes) else uuid

    def processes(self, gpu_uuid: str) -> list[GpuProcess]:
        if not self._ensure():
            return []
        try:
            handle = self._handles.get(gpu_uuid)
            if handle is None:
                handle = self._handles[gpu_uuid] = self._pynvml.nvmlDeviceGetHandleByUUID(gpu_uuid)
            procs = self._pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        except self._pynvml.NVMLError:
            return []
        return [GpuProcess(pid=p.pid, used_bytes=p.usedGpuMemory) for p in procs]

    # --- per-device metrics by NVML index, for the supervisor's sampler; each raises NvmlError

    def device_count(self) -> int:
        return self._call("nvmlDeviceGetCount")

    def device_uuid(self, index: int) -> str:
        uuid = self._query("nvmlDeviceGetUUID", index)
        return uuid.decode() if isinstance(uuid, bytes) else uuid

    def utilization_pct(self, index: int) -> int:
        return self._query("nvmlDeviceGetUtilizationRates", index).gpu

    def memory_bytes(self, index: int) -> tuple[int, int]:
        """(used, total) device memory."""
        info = self._query("nvmlDeviceGetMemoryInfo", index)
        return info.used, info.total

    def power_w(self, index: int) -> float:
        return self._query("nvmlDeviceGetPowerUsage", index) / 1000.0  # NVML reports milliwatts

    def temperature_c(self, index: int) -> int:
        return self._query("nvmlDeviceGetTemperature", index, self._pynvml.NVML_TEMPERATURE_GPU)

    def sm_clock_mhz(self, index: int) -> int:
        return self._query("nvmlDeviceGetClockInfo", index, self._pynvml.NVML_CLOCK_SM)

    def device_processes(self, index: int) -> list[GpuProcess]:
        procs = self._query("nvmlDeviceGetComputeRunningProcesses", index)
        return [GpuProcess(pid=p.pid, used_bytes=p.usedGpuMemory) for p in procs]

    def ecc_errors(self, index: int) -> int:
        """Uncorrected ECC errors since the driver loaded (NvmlError where ECC is off or absent)."""
        nv = self._pynvml
        return self._query("nvmlDeviceGetTotalEccErrors", index, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                           nv.NVML_VOLATILE_ECC)

    def watch_xid_events(self) -> int:
        """Start collecting critical Xid events of every GPU; how many GPUs can report them."""
        if self._xid_set is None:
            self._xid_set = self._call("nvmlEventSetCreate")
        watched = 0
        for index in range(self.device_count()):
            try:
                self._query("nvmlDeviceRegisterEvents", index, self._pynvml.nvmlEventTypeXidCriticalError,
                            self._xid_set)
                watched += 1
            except NvmlError:  # not supported on this GPU (or in this container); the others still are
                pass
        return watched

    def xid_events(self, max_events: int = 64) -> list[XidEvent]:
        """Xid events since the last call, without waiting (watch_xid_events first)."""
        if self._xid_set is None:
            return []
        nv, events = self._pynvml, []
        for _ in range(max_events):  # bounded: a GPU in an Xid storm must not stall the caller
            try:
                data = nv.nvmlEventSetWait_v2(self._xid_set, 0)
            except nv.NVMLError_Timeout:
                break
            except nv.NVMLError as exc:
                raise NvmlError(f"nvmlEventSetWait: {exc}") from exc
            if data.eventType & nv.nvmlEventTypeXidCriticalError:
                try:
                    index = nv.nvmlDeviceGetIndex(data.device)
                except nv.NVMLError:
                    index = None
                events.append(XidEvent(index=index, xid=int(data.eventData)))
        return events

    def _query(self, name: str, index: int, *args):
        handle = self._index_handles.get(index)
        if handle is None:
            handle = self._index_handles[index] = self._call("nvmlDeviceGetHandleByIndex", index)
        return self._call(name, handle, *args)

    def _call(self, name: str, *args):
        if not self._ensure():
            raise NvmlError("NVML unavailable")
        try:
            return getattr(self._pynvml, name)(*args)
        except self._pynvml.NVMLError as exc:
            raise NvmlError(f"{name}: {exc}") from exc
