"""One memory snapshot of this rank: CUDA allocator, the whole GPU as NVML sees it, host RSS.

Cheap enough for every step (under a millisecond without NVML): one allocator stats call,
one cudaMemGetInfo, one NVML process query, one read of /proc.

Typical use:
    fields = take_memory_snapshot(nvml, gpu_uuid)
    Memory(..., tag="step", **fields)
"""
from __future__ import annotations

import sys
from typing import Any

import psutil

from grpo_doctor.host.nvml import Nvml

_process: psutil.Process | None = None


def host_rss_bytes() -> int | None:
    global _process
    try:
        if _process is None:
            _process = psutil.Process()
        return _process.memory_info().rss
    except psutil.Error:
        return None


def take_memory_snapshot(nvml: Nvml, gpu_uuid: str | None) -> dict[str, Any]:
    fields: dict[str, Any] = {"host_rss_bytes": host_rss_bytes()}
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
