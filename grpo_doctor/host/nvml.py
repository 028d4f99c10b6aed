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
        nvml.fault_fields(0)             # {"nvlink_replay_errors": 0, ..., "recovery_action": "none"}
        nvml.throttle_reasons(0)         # ("hw-thermal-slowdown",) while the GPU protects itself

NVML's constants are looked up in pynvml by their names (`FAULT_FIELDS`, `RECOVERY_ACTIONS`,
`THROTTLE_REASONS`), so a binding or driver too old to know one leaves that value out.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

# nvmlDeviceGetFieldValues fields read per sample: (pynvml constant, key). The NVLink counters are
# totals over all links since the driver loaded; the remapped-rows flags say a row remapping waits for a
# GPU reset / could not be made; the recovery action is what the driver says the GPU needs now (r570+).
FAULT_FIELDS = (
    ("NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "nvlink_replay_errors"),
    ("NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "nvlink_recovery_errors"),
    ("NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "nvlink_crc_flit_errors"),
    ("NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "nvlink_crc_data_errors"),
    ("NVML_FI_DEV_REMAPPED_PENDING", "remapped_rows_pending"),
    ("NVML_FI_DEV_REMAPPED_FAILURE", "remapped_rows_failure"),
    ("NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", "recovery_action"),
)
FLAG_FIELDS = ("remapped_rows_pending", "remapped_rows_failure")
# The values of NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (nvmlDeviceGpuRecoveryAction_t), by constant name.
RECOVERY_ACTIONS = (
    ("NVML_GPU_RECOVERY_ACTION_NONE", "none"),
    ("NVML_GPU_RECOVERY_ACTION_GPU_RESET", "gpu-reset"),
    ("NVML_GPU_RECOVERY_ACTION_NODE_REBOOT", "node-reboot"),
    ("NVML_GPU_RECOVERY_ACTION_DRAIN_P2P", "drain-p2p"),
    ("NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET", "drain-and-reset"),
    ("NVML_GPU_RECOVERY_ACTION_RECOVER_IMEX_DOMAIN", "recover-imex-domain"),
    ("NVML_GPU_RECOVERY_ACTION_BUS_RESET", "bus-reset"),
    ("NVML_GPU_RECOVERY_ACTION_SYSTEM_REBOOT", "system-reboot"),
)
# Clock-event (throttle) reasons that say the GPU slowed itself down to protect the hardware, by the
# name after pynvml's "nvmlClocksEventReason" (older bindings: "nvmlClocksThrottleReason"). The power
# cap (SwPowerCap), idle, sync boost and application clocks are how a GPU normally runs: not read.
THROTTLE_REASONS = (
    ("SwThermalSlowdown", "sw-thermal-slowdown"),
    ("HwSlowdown", "hw-slowdown"),
    ("HwThermalSlowdown", "hw-thermal-slowdown"),
    ("HwPowerBrakeSlowdown", "hw-power-brake-slowdown"),
)
# nvmlValueType_t -> the member of c_nvmlValue_t that holds it.
_VALUE_MEMBERS = (("NVML_VALUE_TYPE_DOUBLE", "dVal"), ("NVML_VALUE_TYPE_UNSIGNED_INT", "uiVal"),
                  ("NVML_VALUE_TYPE_UNSIGNED_LONG", "ulVal"), ("NVML_VALUE_TYPE_UNSIGNED_LONG_LONG", "ullVal"),
                  ("NVML_VALUE_TYPE_SIGNED_LONG_LONG", "sllVal"), ("NVML_VALUE_TYPE_SIGNED_INT", "siVal"),
                  ("NVML_VALUE_TYPE_UNSIGNED_SHORT", "usVal"))


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

    def place_of(self, gpu_uuid: str | None) -> tuple[int | None, str | None]:
        """(NVML index, as nvidia-smi numbers the GPU; PCI bus id "00000000:3B:00.0") of the GPU with this
        UUID; (None, None) without NVML or where it cannot say."""
        if gpu_uuid is None or not self._ensure():
            return None, None
        nv = self._pynvml
        try:
            handle = nv.nvmlDeviceGetHandleByUUID(gpu_uuid)
        except nv.NVMLError:
            return None, None
        try:
            index = int(nv.nvmlDeviceGetIndex(handle))
        except nv.NVMLError:
            index = None
        try:
            bus_id = nv.nvmlDeviceGetPciInfo(handle).busId
            bus_id = bus_id.decode() if isinstance(bus_id, bytes) else str(bus_id)
        except nv.NVMLError:
            bus_id = None
        return index, bus_id

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

    def pci_bus_id(self, index: int) -> str:
        """The GPU's PCI bus id as NVML spells it ("00000000:3B:00.0"); the kernel's Xid lines name it."""
        bus_id = self._query("nvmlDeviceGetPciInfo", index).busId
        return bus_id.decode() if isinstance(bus_id, bytes) else bus_id

    def throttle_reasons(self, index: int) -> tuple[str, ...]:
        """The hardware-protection reasons (THROTTLE_REASONS) slowing the GPU's clocks now."""
        nv = self._module()
        name = "nvmlDeviceGetCurrentClocksEventReasons"
        if not hasattr(nv, name):
            name = "nvmlDeviceGetCurrentClocksThrottleReasons"  # bindings before r535
        mask = int(self._query(name, index))
        return tuple(label for reason, label in THROTTLE_REASONS
                     if mask & (getattr(nv, "nvmlClocksEventReason" + reason, None)
                                or getattr(nv, "nvmlClocksThrottleReason" + reason, 0)))

    def fault_fields(self, index: int) -> dict[str, int | bool | str]:
        """FAULT_FIELDS in one nvmlDeviceGetFieldValues call, by key; a field this GPU or driver does not
        support (NVLink on a PCIe card, the recovery action before r570) is left out."""
        nv = self._module()
        wanted = [(getattr(nv, const), key) for const, key in FAULT_FIELDS if hasattr(nv, const)]
        if not wanted:
            return {}
        values = self._query("nvmlDeviceGetFieldValues", index, [field_id for field_id, _ in wanted])
        members = {getattr(nv, const): member for const, member in _VALUE_MEMBERS if hasattr(nv, const)}
        actions = {getattr(nv, const): label for const, label in RECOVERY_ACTIONS if hasattr(nv, const)}
        out: dict[str, int | bool | str] = {}
        for (_, key), value in zip(wanted, values, strict=False):
            if value.nvmlReturn != nv.NVML_SUCCESS or value.valueType not in members:
                continue
            number = int(getattr(value.value, members[value.valueType]))
            if key == "recovery_action":
                out[key] = actions.get(number, f"action-{number}")
            else:
                out[key] = bool(number) if key in FLAG_FIELDS else number
        return out

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

    def _module(self):
        if not self._ensure():
            raise NvmlError("NVML unavailable")
        return self._pynvml

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
