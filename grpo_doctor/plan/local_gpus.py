"""This machine's GPUs as the plan needs them: how many, and the memory of the first (NVML).

Both are None where NVML sees no GPU (no driver, no device): the plan then needs --gpus / --gpu-memory.

Typical use:
    count, total_bytes = local_gpus()
"""
from __future__ import annotations


def local_gpus() -> tuple[int | None, int | None]:
    from grpo_doctor.host.nvml import Nvml, NvmlError

    nvml = Nvml()
    try:
        if not nvml.available or nvml.device_count() < 1:
            return None, None
        return nvml.device_count(), nvml.memory_bytes(0)[1]
    except NvmlError:
        return None, None
