"""One memory snapshot of this rank: CUDA allocator, the whole GPU as NVML sees it, host RSS and
virtual size; and, once at start, the host memory this process may use (`memory_capacities`).

Cheap enough for every step (under a millisecond without NVML): one allocator stats call,
one cudaMemGetInfo, one NVML process query, one read of /proc.

Typical use:
    fields = take_memory_snapshot(nvml, gpu_uuid)
    Memory(..., tag="step", **fields)
    Header(..., **memory_capacities())  # ram_bytes, cgroup_memory_max_bytes, rlimit_as_bytes
"""
from __future__ import annotations

import os
import resource
import sys
from pathlib import Path
from typing import Any

import psutil

from grpo_doctor.host.nvml import Nvml

_process: psutil.Process | None = None


# A cgroup limit at or above this is "no limit" (cgroup v1 writes PAGE_COUNTER_MAX, about 2**63).
_NO_LIMIT_BYTES = 2**60
CGROUP_ROOT = Path("/sys/fs/cgroup")


def host_rss_bytes() -> int | None:
    return host_memory_bytes()[0]


def host_memory_bytes() -> tuple[int | None, int | None]:
    """This process's resident set and virtual size, in bytes (None, None when /proc cannot say)."""
    global _process
    try:
        if _process is None:
            _process = psutil.Process()
        info = _process.memory_info()
        return info.rss, info.vms
    except psutil.Error:
        return None, None


def memory_capacities(cgroup_root: Path = CGROUP_ROOT, proc_cgroup: Path = Path("/proc/self/cgroup")) -> dict[str, int | None]:
    """The host memory this process may use, as it stands now: physical RAM, the memory cgroup's limit
    (the tightest memory.max, or cgroup v1 memory.limit_in_bytes, from its cgroup up to the root) and
    RLIMIT_AS. None where unknown or unlimited. Never raises."""
    return {"ram_bytes": _ram_bytes(), "cgroup_memory_max_bytes": cgroup_memory_max_bytes(cgroup_root, proc_cgroup),
            "rlimit_as_bytes": _rlimit_as_bytes()}


def _ram_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _rlimit_as_bytes() -> int | None:
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    except (ValueError, OSError):
        return None
    return None if soft == resource.RLIM_INFINITY or soft < 0 else int(soft)


def cgroup_memory_max_bytes(cgroup_root: Path = CGROUP_ROOT,
                            proc_cgroup: Path = Path("/proc/self/cgroup")) -> int | None:
    """The tightest memory limit on this process's cgroup and its ancestors (v2 `memory.max`, v1
    `memory.limit_in_bytes`); None without a cgroup filesystem or a limit."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    limits: list[int] = []
    for line in lines:
        _, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if controllers == "":  # cgroup v2: "0::/user.slice/..."
            base, name = cgroup_root, "memory.max"
        elif "memory" in controllers.split(","):  # cgroup v1: "9:memory:/docker/..."
            base, name = cgroup_root / "memory", "memory.limit_in_bytes"
        else:
            continue
        directory = base / path.lstrip("/")
        while True:
            value = _read_limit(directory / name)
            if value is not None:
                limits.append(value)
            if directory == base or base not in directory.parents:
                break
            directory = directory.parent
    return min(limits) if limits else None


def _read_limit(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if not text.isdigit():  # "max"
        return None
    value = int(text)
    return value if 0 < value < _NO_LIMIT_BYTES else None


def take_memory_snapshot(nvml: Nvml, gpu_uuid: str | None) -> dict[str, Any]:
    rss, vms = host_memory_bytes()
    fields: dict[str, Any] = {"host_rss_bytes": rss, "host_vms_bytes": vms}
    torch = sys.modules.get("torch")
    # A rank that has not touched CUDA has no allocator to read; initialising CUDA here would
    # change the process we are observing.
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        fields.update(cuda_allocator_fields(torch))
    if gpu_uuid is not None and nvml.available:
        fields["gpu_processes"] = [{"pid": p.pid, "used_bytes": p.used_bytes} for p in nvml.processes(gpu_uuid)]
    return fields


def cuda_allocator_fields(torch) -> dict[str, Any]:
    device = torch.cuda.current_device()
    stats = torch.cuda.memory_stats(device)
    free_bytes, total_bytes = torch.cuda.mem_get_info(device)
    return {
        "device": device,
        "allocated_bytes": stats.get("allocated_bytes.all.current", 0),
        "reserved_bytes": stats.get("reserved_bytes.all.current", 0),
        "peak_allocated_bytes": stats.get("allocated_bytes.all.peak", 0),
        "inactive_split_bytes": stats.get("inactive_split_bytes.all.current", 0),
        "num_alloc_retries": stats.get("num_alloc_retries", 0),
        "num_ooms": stats.get("num_ooms", 0),
        "free_bytes": free_bytes,
        "total_bytes": total_bytes,
    }
