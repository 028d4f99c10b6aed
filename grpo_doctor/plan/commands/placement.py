"""How many GPUs a node has, from the plan's flags, NVML's count or CUDA_VISIBLE_DEVICES.

Typical use:
    gpus, note = gpus_of_node(hardware, env)    # note: the assumption made, or None
"""
from __future__ import annotations

from grpo_doctor.plan.commands.common import Hardware

DEFAULT_GPUS = 8


def gpus_of_node(hw: Hardware, env: dict[str, str]) -> tuple[int, str | None]:
    visible = env.get("CUDA_VISIBLE_DEVICES") or env.get("ASCEND_RT_VISIBLE_DEVICES")
    if visible and visible.strip() and visible.strip() != "-1":
        count = len([d for d in visible.split(",") if d.strip()])
        if hw.gpus_per_node is None or count < hw.gpus_per_node:
            return count, None
    if hw.gpus_per_node is not None:
        return hw.gpus_per_node, None
    return DEFAULT_GPUS, f"{DEFAULT_GPUS} GPUs per node (no --gpus, no NVML, no CUDA_VISIBLE_DEVICES)"
