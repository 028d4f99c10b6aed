"""Who this process is in the job: rank numbers from torch.distributed or the launcher's environment.

torchrun, accelerate and deepspeed set RANK / LOCAL_RANK / WORLD_SIZE / GROUP_RANK /
LOCAL_WORLD_SIZE; an initialised process group is authoritative where there is one.

Typical use:
    ident = RankIdentity.detect()
    print(ident.rank, ident.world_size, ident.host)
"""
from __future__ import annotations

import os
import socket
import sys
from dataclasses import dataclass


def process_group():
    """torch.distributed when the job has initialised it, else None; never imports torch itself."""
    dist = sys.modules.get("torch.distributed")
    return dist if dist is not None and dist.is_available() and dist.is_initialized() else None


@dataclass(frozen=True)
class RankIdentity:
    rank: int
    local_rank: int
    world_size: int
    node_rank: int | None
    local_world_size: int | None
    host: str
    pid: int
    attempt: int

    @classmethod
    def detect(cls, environ: dict[str, str] | None = None) -> RankIdentity:
        env = os.environ if environ is None else environ
        rank, world_size = _int(env, "RANK", 0), _int(env, "WORLD_SIZE", 1)
        dist = process_group()
        if dist is not None:
            rank, world_size = dist.get_rank(), dist.get_world_size()
        node_rank = env.get("GROUP_RANK", env.get("NODE_RANK"))
        local_world_size = env.get("LOCAL_WORLD_SIZE")
        return cls(
            rank=rank,
            local_rank=_int(env, "LOCAL_RANK", 0),
            world_size=world_size,
            node_rank=int(node_rank) if node_rank and node_rank.isdigit() else None,
            local_world_size=int(local_world_size) if local_world_size and local_world_size.isdigit() else None,
            host=socket.gethostname(),
            pid=os.getpid(),
            attempt=_int(env, "TORCHELASTIC_RESTART_COUNT", 0),
        )


def _int(env, name: str, default: int) -> int:
    value = env.get(name, "")
    return int(value) if value.strip().lstrip("-").isdigit() else default
