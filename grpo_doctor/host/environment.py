"""What a rank's header records about its environment: versions, launch settings, GPU identity.

Versions come from package metadata, so nothing heavy is imported to learn them; CUDA facts
are read only where torch is already imported and CUDA is up.

Typical use:
    versions = collect_versions(nvml)
    launch = collect_launch_settings(os.environ)
"""
from __future__ import annotations

import os
import platform
import sys
from importlib import metadata

from grpo_doctor.host.nvml import Nvml

# Launch settings that must agree across nodes (case 1 in CASES.md), recorded where set.
LAUNCH_VARIABLES = (
    "NNODES", "NODE_RANK", "NPROC_PER_NODE", "WORLD_SIZE", "RANK", "LOCAL_RANK", "GROUP_RANK",
    "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER",
    "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "OMP_NUM_THREADS", "GRPO_DOCTOR_RUN_DIR",
)
LAUNCH_PREFIXES = ("NCCL_", "TORCH_", "PYTORCH_", "GLOO_", "VLLM_", "DS_", "ACCELERATE_")
PACKAGES = {
    "torch": "torch", "deepspeed": "deepspeed", "vllm": "vllm", "transformers": "transformers",
    "trl": "trl", "accelerate": "accelerate", "ms_swift": "ms-swift", "grpo_doctor": "grpo-doctor",
}


def collect_launch_settings(environ) -> dict[str, str]:
    out = {k: environ[k] for k in LAUNCH_VARIABLES if k in environ}
    out.update({k: v for k, v in environ.items() if k.startswith(LAUNCH_PREFIXES)})
    return dict(sorted(out.items()))


def collect_versions(nvml: Nvml) -> dict[str, str | None]:
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for key, dist in PACKAGES.items():
        try:
            versions[key] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[key] = None
    versions["cuda"] = versions["nccl"] = None
    torch = sys.modules.get("torch")
    if torch is not None:
        versions["cuda"] = getattr(torch.version, "cuda", None)
        if torch.cuda.is_available():
            try:
                versions["nccl"] = ".".join(str(p) for p in torch.cuda.nccl.version())
            except (AttributeError, RuntimeError):
                pass
    versions["cuda_driver"] = nvml.driver_version()
    return versions


def current_gpu_uuid(local_rank: int, nvml: Nvml) -> str | None:
    """UUID of the GPU this rank uses: torch's current device, else cuda:LOCAL_RANK by NVML."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        uuid = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "uuid", None)
        if uuid is not None:
            return f"GPU-{uuid}"
    return nvml.uuid_of_visible_device(local_rank, os.environ.get("CUDA_VISIBLE_DEVICES"))
