"""`cuda-oom`: a CUDA allocation failed (PyTorch's OutOfMemoryError message or "CUDA error: out of memory").

From cuda-oom signatures in logs and from Error records whose exception is an OutOfMemoryError
(the message is parsed the same way). The remedy depends on who holds the GPU (CASES.md case 4).

Evidence keys: `gpu`, `requested_bytes`, `total_bytes`, `free_bytes`, `processes` ([{"pid",
"used_bytes"}], pid "this" for the failing process), `allocated_bytes`,
`reserved_unallocated_bytes`, `allowed_bytes` (memory-fraction cap, None when none),
`others_bytes` (GPU memory held outside this process's PyTorch allocator), `wording`, `source`.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from grpo_doctor.analysis.findings import Finding
from grpo_doctor.analysis.load import Evidence
from grpo_doctor.logs.kinds import CUDA_OOM
from grpo_doctor.logs.signatures import scan_text

ID = "cuda-oom"

HINT_OTHERS = ("Other processes (usually vLLM's KV cache) hold most of this GPU: reserve a GPU per node for vLLM "
               "(torchrun NPROC_PER_NODE=N-1, e.g. 7 on an 8-GPU node) or lower vllm_gpu_memory_utilization "
               "(e.g. 0.5) and vllm_max_model_len.")
HINT_FRAGMENTED = ("PyTorch holds at least the requested size reserved but unallocated (fragmentation): set "
                   "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.")
HINT_NOT_CAPACITY = ("Free memory far exceeds the request: this is not a capacity problem; a memory-fraction cap "
                     "(torch.cuda.set_per_process_memory_fraction, vLLM gpu_memory_utilization) or a stale "
                     "reading is the limit; raise or remove the cap.")
HINT_GENERIC = ("Reduce the training footprint: smaller per_device_train_batch_size or max_completion_length, "
                "gradient_checkpointing true, DeepSpeed ZeRO-3 (offload_optimizer to cpu); plan each GPU's memory "
                "(weights + optimizer + activations + vLLM) before launch.")
HINTS = (HINT_OTHERS, HINT_FRAGMENTED, HINT_NOT_CAPACITY, HINT_GENERIC)


@dataclass(frozen=True)
class Config:
    others_fraction: float = 0.3  # others holding more than this fraction of the GPU -> "reserve a GPU for vLLM"
    free_factor: float = 4.0  # free >= this x requested -> "not a capacity problem"


def check(run: Evidence, cfg: Config) -> Iterator[Finding]:
    seen: set[tuple] = set()
    for rank, source, fields, step, phase in _occurrences(run):
        key = (rank, fields.get("gpu"), fields.get("requested_bytes"), fields.get("free_bytes"))
        if key in seen:
            continue
        seen.add(key)
        others = _others_bytes(fields)
        hints = _hints(fields, others, cfg)
        gpu = fields.get("gpu")
        size = fields.get("requested_bytes")
        what = f"failed to allocate {_gib(size)}" if size else "ran out of memory"
        who = f"rank {rank}" if rank is not None else "a process"
        host = run.host_of(rank)
        yield Finding(
            id=ID, severity="critical", title=f"CUDA OOM: {who} {what}" + (f" on GPU {gpu}" if gpu is not None else ""),
            ranks=(rank,) if rank is not None else (), hosts=(host,) if host else (), step=step, phase=phase,
            evidence={k: fields.get(k) for k in ("gpu", "requested_bytes", "total_bytes", "free_bytes", "processes",
                                                 "allocated_bytes", "reserved_unallocated_bytes", "allowed_bytes",
                                                 "wording")} | {"others_bytes": others, "source": source},
            hints=hints,
        )


def _occurrences(run: Evidence) -> Iterator[tuple[int | None, str, dict[str, Any], int | None, str | None]]:
    for rank, log in sorted((run.run.ranks if run.run else {}).items()):
        for err in log.errors:
            if "OutOfMemoryError" in err.exc_type or "out of memory" in err.message:
                sigs = [s for s in scan_text(f"{err.exc_type}: {err.message}") if s.kind == CUDA_OOM]
                fields = sigs[0].fields if sigs else {"wording": None}
                yield rank, "event-log", fields, err.step, err.phase
    for row in run.signature_rows:
        if row["kind"] == CUDA_OOM:
            yield row["rank"], row["source"], row["fields"], None, None


def _others_bytes(fields: dict[str, Any]) -> int | None:
    processes = fields.get("processes") or []
    if not processes:
        return None
    if any(p.get("pid") == "this" for p in processes):
        return sum(p.get("used_bytes") or 0 for p in processes if p.get("pid") != "this")
    # No process is marked as this one: whatever PyTorch does not account for belongs to others.
    own = (fields.get("allocated_bytes") or 0) + (fields.get("reserved_unallocated_bytes") or 0)
    return max(0, sum(p.get("used_bytes") or 0 for p in processes) - own)


def _hints(fields: dict[str, Any], others: int | None, cfg: Config) -> tuple[str, ...]:
    total, requested = fields.get("total_bytes"), fields.get("requested_bytes")
    free, unallocated = fields.get("free_bytes"), fields.get("reserved_unallocated_bytes")
    hints = []
    if others is not None and total and others > cfg.others_fraction * total:
        hints.append(HINT_OTHERS)
    if unallocated is not None and requested and unallocated >= requested:
        hints.append(HINT_FRAGMENTED)
    if free is not None and requested and free >= cfg.free_factor * requested:
        hints.append(HINT_NOT_CAPACITY)
    hints.append(HINT_GENERIC)
    return tuple(hints)


def _gib(num_bytes: int) -> str:
    return f"{num_bytes / 2**30:.2f} GiB" if num_bytes >= 2**30 else f"{num_bytes / 2**20:.1f} MiB"
