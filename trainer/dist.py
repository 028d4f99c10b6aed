"""The process group: who this process is, on which device, talking over which backend.

Under torchrun the launcher's environment (RANK, WORLD_SIZE, LOCAL_RANK, GROUP_RANK,
MASTER_ADDR/PORT) drives `init_process_group`; started by hand, the process forms a group
of one in memory, so the same code path (all_gather, DDP, DeepSpeed) runs everywhere.

Typical use:
    info = init_distributed(backend="auto", timeout_s=1800)
    print(info.rank, info.world_size, info.device, info.backend)
    gathered = all_gather_floats([0.1, 1.1], info)
"""
from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistInfo:
    rank: int
    local_rank: int
    world_size: int
    node_rank: int
    local_world_size: int
    backend: str
    device: torch.device


def init_distributed(backend: str, timeout_s: float) -> DistInfo:
    """Initialise torch.distributed; backend 'auto' is nccl with CUDA and gloo without."""
    launched = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    rank = int(os.environ.get("RANK", 0))
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    node_rank = int(os.environ.get("GROUP_RANK", os.environ.get("NODE_RANK", rank // local_world_size)))
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    timeout = datetime.timedelta(seconds=timeout_s)
    if launched:
        kwargs = {"device_id": device} if backend == "nccl" else {}
        dist.init_process_group(backend=backend, timeout=timeout, **kwargs)
    else:
        # DeepSpeed and vLLM read the launcher's variables even for a group of one.
        for name, value in (("RANK", 0), ("LOCAL_RANK", 0), ("WORLD_SIZE", 1), ("LOCAL_WORLD_SIZE", 1)):
            os.environ.setdefault(name, str(value))
        # A group of one needs no rendezvous; an in-process store avoids picking a free port.
        dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout)
    return DistInfo(
        rank=rank,
        local_rank=local_rank,
        world_size=world_size,
        node_rank=node_rank,
        local_world_size=local_world_size,
        backend=backend,
        device=device,
    )


def all_gather_floats(values: list[float], info: DistInfo) -> torch.Tensor:
    """Every rank's values concatenated in rank order (equal lengths on every rank)."""
    # NCCL gathers device tensors only; gloo host tensors only.
    where = info.device if info.backend == "nccl" else torch.device("cpu")
    local = torch.tensor(values, dtype=torch.float32, device=where)
    gathered = [torch.empty_like(local) for _ in range(info.world_size)]
    dist.all_gather(gathered, local)
    return torch.cat(gathered).cpu()


def all_gather_objects(obj, info: DistInfo) -> list:
    gathered = [None] * info.world_size
    dist.all_gather_object(gathered, obj)
    return gathered


def shutdown_distributed() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
