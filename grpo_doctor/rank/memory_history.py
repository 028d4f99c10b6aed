"""Opt-in CUDA allocator history, dumped into the run directory when CUDA runs out of memory.

`torch.cuda.memory._record_memory_history` keeps a stack trace per allocation; the dump opens
in PyTorch's memory_viz (https://pytorch.org/memory_viz) and shows what held the memory at the
moment of the OOM. It costs a few percent of step time, hence opt-in.

Typical use:
    if enable(max_entries=100_000): ...   # False without CUDA: the option has no effect
    dump_on_oom(paths, rank)              # -> "memory/rank-00003-oom.pickle"
"""
from __future__ import annotations

import sys

from grpo_doctor.schema import RunPaths

_enabled = False


def enable(max_entries: int = 100_000) -> bool:
    global _enabled
    torch = sys.modules.get("torch")
    if torch is None:
        import torch  # the caller asked for CUDA history, so torch is wanted here
    if not torch.cuda.is_available():
        return False
    torch.cuda.memory._record_memory_history(max_entries=max_entries)
    _enabled = True
    return True


def is_cuda_oom(exc: BaseException | None) -> bool:
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    # torch >= 2.5 exports torch.OutOfMemoryError; older releases only torch.cuda.OutOfMemoryError.
    oom_type = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", None)
    return oom_type is not None and isinstance(exc, oom_type)


def dump_on_oom(paths: RunPaths, rank: int) -> str | None:
    """Write the allocator history; returns its path relative to the run dir, or None."""
    if not _enabled:
        return None
    import torch

    target = paths.oom_memory_dump(rank)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        torch.cuda.memory._dump_snapshot(str(target))
    except (OSError, RuntimeError):
        return None
    return str(target.relative_to(paths.root))
