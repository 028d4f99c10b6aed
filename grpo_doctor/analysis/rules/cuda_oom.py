"""`cuda-oom`: a CUDA allocation failed (PyTorch's OutOfMemoryError message or "CUDA error: out of memory").

From cuda-oom signatures in logs and from Error records whose exception is an OutOfMemoryError
(the message is parsed the same way). The remedy depends on who holds the GPU (CASES.md case 4).

Evidence keys: `gpu`, `requested_bytes`, `total_bytes`, `free_bytes`, `processes` ([{"pid",
"used_bytes"}], pid "this" for the failing process), `allocated_bytes`,
`reserved_unallocated_bytes`, `allowed_bytes` (memory-fraction cap, None when none),
`others_bytes` (GPU memory held outside this process's PyTorch allocator), `wording`, `source`, `plan`
(the memory plan of the run's command, analysis/oom_plan.py: verdict and the cheapest fix; None without one).
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from grpo_doctor.analysis import remedies
from grpo_doctor.analysis.findings import Finding
from grpo_doctor.analysis.oom_plan import plan_for_oom, plan_hint
from grpo_doctor.analysis.views import RunView, View
from grpo_doctor.logs.kinds import CUDA_OOM
from grpo_doctor.logs.signatures import scan_text
from grpo_doctor.schema.human_text import format_bytes

ID = "cuda-oom"
READS = {View.LAUNCH_COMMAND, View.LOG_SIGNATURES, View.RANK_LOGS, View.RANKS, View.WATCH_ARTIFACTS}

# Who holds the GPU decides the remedy: colocated vLLM first sleeps / offloads, then gets a smaller
# share, then GPUs of its own (remedies.py keeps the framework flags and their defaults).
HINT_OTHERS = "Other processes (usually colocated vLLM engines) hold most of this GPU. " + remedies.SLEEP_AND_OFFLOAD
HINT_SHARE = remedies.VLLM_SHARE
HINT_RESERVE = remedies.VLLM_OWN_GPUS
HINT_CUMEM = ("vLLM's sleep-mode allocator ran out of memory mapping its weights / KV cache back in (wake_up): the "
              "trainer still held the GPU. Offload the trainer while vLLM generates ("
              + remedies.flags(remedies.SWIFT, "offload_model", "offload_optimizer") + "; "
              + remedies.flags(remedies.VERL, "actor_rollout_ref.actor.fsdp_config.param_offload",
                               "actor_rollout_ref.actor.fsdp_config.optimizer_offload")
              + "), free its cached blocks before the wake-up (torch.cuda.empty_cache()), and give vLLM a smaller "
              "share (below).")
HINT_FRAGMENTED = ("PyTorch holds at least the requested size reserved but unallocated (fragmentation). "
                   + remedies.EXPANDABLE_SEGMENTS)
HINT_NOT_CAPACITY = ("Free memory far exceeds the request: this is not a capacity problem; a memory-fraction cap "
                     "(torch.cuda.set_per_process_memory_fraction, vLLM gpu_memory_utilization) or a stale "
                     "reading is the limit; raise or remove the cap.")
HINT_GENERIC = ("Reduce the training footprint: smaller per_device_train_batch_size or max_completion_length, "
                "gradient_checkpointing true, DeepSpeed ZeRO-3 (offload_optimizer to cpu); plan each GPU's memory "
                "(weights + optimizer + activations + vLLM) before launch.")
HINTS = (HINT_OTHERS, HINT_SHARE, HINT_RESERVE, HINT_CUMEM, HINT_FRAGMENTED, HINT_NOT_CAPACITY, HINT_GENERIC)


@dataclass(frozen=True)
class Config:
    others_fraction: float = 0.3  # others holding more than this fraction of the GPU -> "reserve a GPU for vLLM"
    free_factor: float = 4.0  # free >= this x requested -> "not a capacity problem"


def check(run: RunView, cfg: Config) -> Iterator[Finding]:
    seen: set[tuple] = set()
    for rank, source, fields, step, phase in _occurrences(run):
        key = (rank, fields.get("gpu"), fields.get("requested_bytes"), fields.get("free_bytes"))
        if key in seen:
            continue
        seen.add(key)
        others = _others_bytes(fields)
        hints = _hints(fields, others, cfg)
        plan = plan_for_oom(run.memory_plans, run.command, fields.get("total_bytes"), run.launch_env)
        if plan is not None:  # the number for this job first, then the general remedies
            hints = (plan_hint(plan), *hints)
        gpu = fields.get("gpu")
        size = fields.get("requested_bytes")
        what = f"failed to allocate {format_bytes(size)}" if size else "ran out of memory"
        who = f"rank {rank}" if rank is not None else "a process"
        host = run.host_of(rank)
        yield Finding(
            id=ID, severity="critical", title=f"CUDA OOM: {who} {what}" + (f" on GPU {gpu}" if gpu is not None else ""),
            ranks=(rank,) if rank is not None else (), hosts=(host,) if host else (), step=step, phase=phase,
            evidence={k: fields.get(k) for k in ("gpu", "requested_bytes", "total_bytes", "free_bytes", "processes",
                                                 "allocated_bytes", "reserved_unallocated_bytes", "allowed_bytes",
                                                 "wording")} | {"others_bytes": others, "source": source,
                                                                "plan": plan},
            hints=hints,
        )


def _occurrences(run: RunView) -> Iterator[tuple[int | None, str, dict[str, Any], int | None, str | None]]:
    for rank, log in sorted(run.rank_logs.items()):
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
    if fields.get("wording") == "cumem":  # sleep mode is on: never expandable_segments here
        return (HINT_CUMEM, HINT_SHARE, HINT_RESERVE)
    if others is not None and total and others > cfg.others_fraction * total:
        hints += [HINT_OTHERS, HINT_SHARE, HINT_RESERVE]
    if unallocated is not None and requested and unallocated >= requested:
        hints.append(HINT_FRAGMENTED)
    if free is not None and requested and free >= cfg.free_factor * requested:
        hints.append(HINT_NOT_CAPACITY)
    hints.append(HINT_GENERIC)
    return tuple(hints)
