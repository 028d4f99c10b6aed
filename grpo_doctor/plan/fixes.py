"""The changes that free memory on the GPU that runs out, cheapest first, as the user's exact flags.

Each candidate is a changed Job, planned again: what it frees is the drop of the worst GPU's peak.
Candidates are ordered by what they cost in speed (none, small, medium, large, changes the
experiment), then by what they free. When no single change fits, the cheapest changes are
combined in that order until the job fits.

Typical use:
    fixes = rank_fixes(plan)          # [Fix(flag="--vllm_gpu_memory_utilization 0.5", frees_bytes=..., fits=True), ...]
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from grpo_doctor.plan.engine_memory import fraction_needed
from grpo_doctor.plan.estimate import Plan, PlanSettingError, estimate
from grpo_doctor.plan.job import COLOCATE, LAST_GPUS, NO_ENGINE, Job

COSTS = ("none", "small", "medium", "large", "changes the experiment")
MARGIN = 0.03  # aim this fraction of the GPU below full, so that a fix is not a knife-edge
MIN_CONCURRENT_SEQUENCES = 4  # a smaller vLLM share must still hold this many max-length sequences


@dataclass(frozen=True)
class Fix:
    flag: str  # the exact flag / key / environment variable in the user's framework
    setting: str
    value: object
    cost: str  # one of COSTS
    why: str
    frees_bytes: int  # drop of the worst GPU's peak
    fits: bool  # the job fits with this change alone (or, for a combination, with all of them)
    job: Job

    def to_dict(self) -> dict:
        return {"flag": self.flag, "setting": self.setting, "value": self.value, "frees_bytes": self.frees_bytes,
                "fits": self.fits, "speed_cost": self.cost, "why": self.why}


@dataclass(frozen=True)
class _Candidate:
    setting: str
    value: object
    changes: dict
    cost: str
    why: str


def rank_fixes(plan: Plan) -> list[Fix]:
    """Single changes that free memory on the worst GPU, cheapest first; then a combination if none fits alone."""
    fixes = []
    for candidate in _candidates(plan):
        job = plan.job.with_changes(**candidate.changes)
        try:
            after = estimate(job, plan.shape)
        except PlanSettingError:  # e.g. a tensor-parallel size the GPUs cannot take
            continue
        freed = _excess(plan) - _excess(after)
        if freed <= 0 and not (plan.problems and not after.problems):
            continue
        note = plan.job.spelling.notes.get(candidate.setting)
        why = f"{candidate.why} ({note})" if note else candidate.why
        fixes.append(Fix(_flag(plan.job, candidate), candidate.setting, candidate.value, candidate.cost,
                         why, int(freed), after.fits, job))
    fixes.sort(key=lambda f: (COSTS.index(f.cost), not f.fits, -f.frees_bytes))
    if plan.fits or any(f.fits for f in fixes):
        return fixes
    combined = _combine(plan, fixes)
    return fixes + ([combined] if combined else [])


def _excess(plan: Plan) -> int:
    return max(g.peak_bytes - g.capacity_bytes for g in plan.gpus)


def _combine(plan: Plan, fixes: list[Fix]) -> Fix | None:
    job, used = plan.job, []
    sleeps = any(f.setting == "sleep_level" for f in fixes if f.cost != COSTS[-1])
    for fix in fixes:
        if fix.cost == COSTS[-1] or (sleeps and fix.setting == "expandable_segments"):
            continue  # the experiment stays as asked; sleep mode and expandable segments do not mix
        job = job.with_changes(**{k: getattr(fix.job, k) for k in _changed(plan.job, fix.job)})
        used.append(fix)
        after = estimate(job, plan.shape)
        if after.fits:
            return Fix(" ".join(f.flag for f in used), "combined", None, max((f.cost for f in used), key=COSTS.index),
                       "no single change is enough: these together", _excess(plan) - _excess(after), True, job)
    return None


def _changed(before: Job, after: Job) -> list[str]:
    return [name for name in before.__dataclass_fields__ if getattr(before, name) != getattr(after, name)
            and name not in ("assumptions", "spelling", "command")]


def _flag(job: Job, candidate: _Candidate) -> str:
    text = job.spelling.flag(candidate.setting, candidate.value)
    return f"{candidate.setting}={candidate.value}" if text is None else text


def _candidates(plan: Plan) -> Iterator[_Candidate]:
    job = plan.job
    shares_gpu = job.placement in (COLOCATE, LAST_GPUS) and any("trainer" in g.role and "+" in g.role for g in plan.gpus)
    for make in _MAKERS:
        candidate = make(plan, job, shares_gpu)
        if candidate is not None:
            yield candidate


def _expandable(plan: Plan, job: Job, shares: bool) -> _Candidate | None:
    # vLLM's sleep mode allocates through its own CuMem pool, which expandable segments break.
    if job.expandable_segments or job.sleep_level > 0:
        return None
    return _Candidate("expandable_segments", True, {"expandable_segments": True}, "none",
                      "the caching allocator grows segments in place: less memory lost to fragmentation")


def _engine_share(plan: Plan, job: Job, shares: bool) -> _Candidate | None:
    if not shares:
        return None
    excess = _excess(plan) + MARGIN * job.gpu_memory_bytes
    target = job.engine_memory_fraction - excess / job.gpu_memory_bytes if excess > 0 else job.engine_memory_fraction
    floor = fraction_needed(plan.shape, job, MIN_CONCURRENT_SEQUENCES * job.max_model_len)
    if plan.problems:  # vLLM cannot start: its share is too small, not too large
        target = math.ceil(max(floor, 0.05) * 20) / 20
        if target <= job.engine_memory_fraction or target > 0.95:
            return None
        return _Candidate("engine_memory_fraction", target, {"engine_memory_fraction": target}, "none",
                          f"vLLM needs about {target:g} of the GPU for its weights and {MIN_CONCURRENT_SEQUENCES} "
                          "max-length sequences of KV cache")
    target = math.floor(target * 20) / 20
    if target >= job.engine_memory_fraction or target < max(floor, 0.05):
        return None
    return _Candidate("engine_memory_fraction", target, {"engine_memory_fraction": target}, "small",
                      f"a smaller KV cache for vLLM (still room for {MIN_CONCURRENT_SEQUENCES}+ max-length "
                      "sequences at once); fewer sequences decode in parallel")


def _sleep(plan: Plan, job: Job, shares: bool) -> _Candidate | None:
    if not shares or job.sleep_level > 0 or not job.spelling.names.get("sleep_level"):
        return None
    return _Candidate("sleep_level", 1, {"sleep_level": 1}, "small",
                      "vLLM releases its weights and KV cache while the policy trains (a few seconds per step to "
                      "sleep and wake)")


def _offload_in_rollout(plan: Plan, job: Job, shares: bool) -> _Candidate | None:
    if not shares or job.trainer_offload_in_rollout or not job.spelling.names.get("trainer_offload_in_rollout"):
        return None
    changes = {"trainer_offload_in_rollout": True}
    if job.spelling.names.get("optimizer_offload_in_rollout"):
        changes["optimizer_offload_in_rollout"] = True
    return _Candidate("trainer_offload_in_rollout", True, changes, "medium",
                      "the trainer's weights (and optimizer states) go to the CPU while vLLM generates")


def _checkpointing(plan: Plan, job: Job, shares: bool) -> _Candidate | None:
    if job.gradient_checkpointing:
        return None
    return _Candidate("gradient_checkpointing", True, {"gradient_checkpointing": True}, "small",
                      "activations recomputed in backward (about a third more compute per step)")


def _micro_batch(plan: Plan, job: Job, shares: bool) -> _Candidate | None:
    if job.micro_batch <= 1:
        return None
    half = job.micro_batch // 2
    return _Candidate("micro_batch", half, {"micro_batch": half}, "medium",
                      "half the activations and logits per forward; double the gradient accumulation steps to "
                      "keep the batch per optimizer step")


def _zero3(plan: Plan, job: Job, shares: bool) -> _Candidate | None:
    if job.full_sharding or job.world_size < 2 or not job.spelling.names.get("zero_stage"):
        return None
    return _Candidate("zero_stage", 3, {"zero_stage": 3}, "medium",
                      "weights, gradients and optimizer states sharded over all ranks (more communication)")


def _optimizer_offload(plan: Plan, job: Job, shares: bool) -> _Candidate | None:
    if job.offload_optimizer or job.zero_stage == 0 and not job.fsdp or not job.spelling.names.get("offload_optimizer"):
        return None
    changes = {"offload_optimizer": True}
    if job.spelling.values.get("offload_optimizer", {}).get("true", "").startswith("zero3"):
        changes["zero_stage"] = 3
    return _Candidate("offload_optimizer", True, changes, "large",
                      "optimizer states and their step on the CPU (slower optimizer step, more host memory)")


def _engine_tp(plan: Plan, job: Job, shares: bool) -> _Candidate | None:
    if job.placement == NO_ENGINE or not job.spelling.names.get("engine_tp"):
        return None
    gpus = job.trainers_per_node if job.placement == COLOCATE else job.engine_gpus_per_node
    tp = job.engine_tp * 2
    if tp > gpus or gpus % tp:
        return None
    return _Candidate("engine_tp", tp, {"engine_tp": tp}, "small",
                      "each GPU holds a smaller shard of vLLM's weights (tensor-parallel communication in decode)")


def _own_gpu_for_engine(plan: Plan, job: Job, shares: bool) -> _Candidate | None:
    if job.placement != LAST_GPUS or job.trainers_per_node + job.engine_gpus_per_node <= job.gpus_per_node:
        return None
    procs = job.gpus_per_node - job.engine_gpus_per_node
    return _Candidate("train_gpus_per_node", procs, {"train_gpus_per_node": procs}, "medium",
                      "vLLM gets its GPU to itself; one training process fewer per node")


def _shorter(plan: Plan, job: Job, shares: bool) -> _Candidate | None:
    if job.max_completion_len < 256:
        return None
    half = job.max_completion_len // 2
    return _Candidate("max_completion_len", half, {"max_completion_len": half}, "changes the experiment",
                      "shorter completions: less KV cache, activations and logits (truncates long answers)")


_MAKERS: tuple[Callable[[Plan, Job, bool], _Candidate | None], ...] = (
    _expandable, _engine_share, _sleep, _offload_in_rollout, _checkpointing, _micro_batch, _zero3,
    _optimizer_offload, _engine_tp, _own_gpu_for_engine, _shorter,
)
