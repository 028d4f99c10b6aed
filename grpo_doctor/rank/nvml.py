"""NVML, the only way to see GPU memory held by *other* processes (a colocated vLLM engine).

Everything here degrades to "unknown" (None / []) where there is no NVIDIA driver, so callers
need no special cases. NVML is initialised once, on first use.

Typical use:
    nvml = Nvml()
    for proc in nvml.processes("GPU-5f2c..."):
        print(proc.pid, proc.used_bytes)
"""
from __future__ import annotations

import threading
from dataclasses import dataclass


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
