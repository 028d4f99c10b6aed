"""Per GPU, per phase, what lives at once: the plan's picture of a GRPO job's memory.

Four moments, each with its own resident set:
- start: the rollout engine starts (profiles, takes its share) while the policy and the reference
  model are already on the GPU and the optimizer does not exist yet (ms-swift, TRL and verl build
  the engine in the trainer's constructor: CASES.md case 4 ran out of memory here);
- generation: the rollout engine awake (weights, KV cache, CUDA graphs) beside the trainer's
  resident states (unless the framework offloads them while generating);
- logprob: the reference / old-policy log-probabilities (no gradients kept) with the engine asleep
  or not;
- backward: forward and backward of the policy (16-bit gradients, activations, the logits peak);
- step: the optimizer step (activations freed; the fp32 gradients the step works on).
GPUs of a node with the same role (training, engine, both) share one row; every node is alike.
The peak is the phase where the most lives at once; the plan fits when no GPU's peak exceeds it.

Typical use:
    plan = estimate(job, shape)
    plan.fits, plan.worst.peak_bytes, plan.worst.peak_phase
"""
from __future__ import annotations

from dataclasses import dataclass

from grpo_doctor.plan.engine_memory import NON_TORCH_BYTES, EngineMemory, engine_memory
from grpo_doctor.plan.job import (
    COLOCATE,
    FUSED,
    GIB,
    KEPT_ROWWISE,
    LAST_GPUS,
    MAX_COUNT,
    NO_ENGINE,
    SEPARATE,
    SLICED_FP32,
    Job,
)
from grpo_doctor.plan.model_shape import ModelShape
from grpo_doctor.plan.trainer_memory import (
    activation_bytes,
    inference_activation_bytes,
    logits_bytes,
    model_states,
)
from grpo_doctor.schema.errors import DoctorError

PHASES = ("start", "generation", "logprob", "backward", "step")
CUDA_CONTEXT_BYTES = GIB // 2  # CUDA context + cuBLAS / cuDNN workspaces of one process
NCCL_BYTES = 2 * GIB // 5  # NCCL's channel buffers for the data-parallel group
# Caching-allocator memory reserved but not usable at the peak: in the real OOM messages under tests/data
# (7 with more than 1 GiB allocated) PyTorch held 0.9-7.2 % of its allocation reserved but unallocated,
# median 3.0 %, 75th percentile 4.8 %.
FRAGMENTATION = 0.05
FRAGMENTATION_EXPANDABLE = 0.02


class PlanSettingError(DoctorError):
    hint = "change the setting named; grpo-doctor plan --help lists how the command is read"


@dataclass(frozen=True)
class GpuPlan:
    gpus: tuple[int, ...]  # local indices on every node
    role: str  # "trainer + vLLM", "trainer", "vLLM"
    phases: dict[str, dict[str, int]]  # phase -> part -> bytes
    capacity_bytes: int

    def phase_bytes(self, phase: str) -> int:
        return sum(self.phases[phase].values())

    @property
    def peak_phase(self) -> str:
        return max(PHASES, key=self.phase_bytes)

    @property
    def peak_bytes(self) -> int:
        return self.phase_bytes(self.peak_phase)

    @property
    def free_bytes(self) -> int:
        return self.capacity_bytes - self.peak_bytes


@dataclass(frozen=True)
class Plan:
    job: Job
    shape: ModelShape
    gpus: tuple[GpuPlan, ...]
    engine: EngineMemory | None
    problems: tuple[str, ...]  # why the job cannot start even before memory runs short

    @property
    def worst(self) -> GpuPlan:
        return min(self.gpus, key=lambda g: g.free_bytes)

    @property
    def fits(self) -> bool:
        return not self.problems and self.worst.free_bytes >= 0


def estimate(job: Job, shape: ModelShape) -> Plan:
    check_settings(job)
    engine = engine_memory(shape, job) if job.placement != NO_ENGINE else None
    rows: dict[tuple[bool, bool], list[int]] = {}
    for gpu in range(job.gpus_per_node):
        role = (_trains(job, gpu), _hosts_engine(job, gpu))
        if any(role):
            rows.setdefault(role, []).append(gpu)
    plans = tuple(GpuPlan(tuple(gpus), _role_name(job, *role), _phases(job, shape, engine, *role), job.gpu_memory_bytes)
                  for role, gpus in rows.items())
    problems = (engine.problem,) if engine and engine.problem else ()
    return Plan(job, shape, plans, engine, problems)


MAX_GPUS_PER_NODE = 1024  # beyond any real node: a typo (or bytes given as a count), not a plan


def check_settings(job: Job) -> None:
    """Settings no GPU can satisfy, or that no framework takes: one line naming the setting."""
    _check_ranges(job)
    if job.trainers_per_node > job.gpus_per_node:
        raise PlanSettingError(f"{job.trainers_per_node} training processes per node but only {job.gpus_per_node} GPUs")
    if job.placement == NO_ENGINE:
        return
    engine_gpus = job.trainers_per_node if job.placement == COLOCATE else job.engine_gpus_per_node
    if job.placement != COLOCATE and engine_gpus == 0:
        return  # the engines run on GPUs (or nodes) this plan does not count
    if job.engine_tp > job.gpus_per_node or job.engine_tp > max(engine_gpus, 1):
        raise PlanSettingError(f"vLLM tensor parallel size {job.engine_tp} is larger than the {engine_gpus} GPUs per "
                               "node its engines run on")
    if engine_gpus % job.engine_tp:
        raise PlanSettingError(f"vLLM tensor parallel size {job.engine_tp} does not divide the {engine_gpus} GPUs per "
                               "node its engines run on")
    if job.placement == SEPARATE and job.trainers_per_node + job.engine_gpus_per_node > job.gpus_per_node:
        raise PlanSettingError(f"{job.trainers_per_node} training GPUs + {job.engine_gpus_per_node} vLLM GPUs per node "
                               f"exceed the node's {job.gpus_per_node}")


def _check_ranges(job: Job) -> None:
    counts = {"gpus_per_node": job.gpus_per_node, "nodes": job.nodes, "train_gpus_per_node": job.trainers_per_node,
              "micro_batch": job.micro_batch, "logprob_micro_batch": job.logprob_micro_batch or 1,
              "max_prompt_len": job.max_prompt_len, "max_completion_len": job.max_completion_len,
              "engine_max_model_len": job.engine_max_model_len or 1, "engine_max_num_seqs": job.engine_max_num_seqs,
              "engine_tp": job.engine_tp, "lora_rank": job.lora_rank, "zero_sub_group_size": job.zero_sub_group_size}
    for setting, value in counts.items():
        if not isinstance(value, int) or value < 1:
            raise PlanSettingError(f"{_named(job, setting)} {value!r}: must be a whole number, at least 1")
        if value > MAX_COUNT:  # 1e308 would overflow the float arithmetic of the estimate
            shown = str(value) if len(str(value)) <= 20 else f"{str(value)[:6]}... ({len(str(value))} digits)"
            raise PlanSettingError(f"{_named(job, setting)} {shown}: beyond any job (at most {MAX_COUNT:.0e})")
    if job.gpus_per_node > MAX_GPUS_PER_NODE:
        raise PlanSettingError(f"{job.gpus_per_node} GPUs per node: more than any node has ({MAX_GPUS_PER_NODE})")
    if not 0 < job.gpu_memory_bytes < 2**44:
        raise PlanSettingError(f"GPU memory of {job.gpu_memory_bytes} bytes: not a GPU's size (pass e.g. 80GiB)")
    if not 0 < job.engine_memory_fraction <= 1:
        raise PlanSettingError(f"{_named(job, 'engine_memory_fraction')} {job.engine_memory_fraction:g} is not in (0, 1]")
    choices = {"zero_stage": (0, 1, 2, 3), "sleep_level": (0, 1, 2), "dtype_bytes": (1, 2, 4),
               "placement": (COLOCATE, SEPARATE, LAST_GPUS, NO_ENGINE), "train_type": ("full", "lora", "qlora"),
               "logprob_style": (SLICED_FP32, KEPT_ROWWISE, FUSED)}
    for setting, allowed in choices.items():
        if getattr(job, setting) not in allowed:
            raise PlanSettingError(f"{_named(job, setting)} {getattr(job, setting)!r}: must be one of "
                                   + ", ".join(map(str, allowed)))


def _named(job: Job, setting: str) -> str:
    """The user's own flag for a setting where the framework has one."""
    flag = job.spelling.names.get(setting)
    if flag is None:
        return setting
    return flag[1:] if flag.startswith("$") else (flag if job.spelling.style.startswith("{name}") else f"--{flag}")


def _trains(job: Job, gpu: int) -> bool:
    return gpu < job.trainers_per_node


def _hosts_engine(job: Job, gpu: int) -> bool:
    if job.placement == COLOCATE:
        return gpu < job.trainers_per_node
    if job.placement == LAST_GPUS:
        return gpu >= job.gpus_per_node - job.engine_gpus_per_node
    if job.placement == SEPARATE:
        return job.trainers_per_node <= gpu < job.trainers_per_node + job.engine_gpus_per_node
    return False


def _role_name(job: Job, trains: bool, engine: bool) -> str:
    name = "vLLM" if job.engine == "vllm" else job.engine
    return " + ".join(([] if not trains else ["trainer"]) + ([] if not engine else [name]))


def _phases(job: Job, shape: ModelShape, engine: EngineMemory | None, trains: bool,
            hosts_engine: bool) -> dict[str, dict[str, int]]:
    phases = {phase: {} for phase in PHASES}
    if trains:
        for phase in PHASES:
            phases[phase].update(_trainer_parts(job, shape, phase))
    if hosts_engine and engine is not None:
        own_process = job.placement != COLOCATE or not trains
        for phase in PHASES:
            asleep = phase in ("logprob", "backward", "step") and job.sleep_level > 0 and trains
            phases[phase].update(_engine_parts(engine, asleep, own_process))
    return phases


def _trainer_parts(job: Job, shape: ModelShape, phase: str) -> dict[str, int]:
    states = model_states(shape, job)
    if phase == "start":  # the models are loaded; no optimizer, no gradients, no communicator yet
        parts = {"policy weights": states.weights_bytes, "reference model": states.reference_bytes,
                 "CUDA context": CUDA_CONTEXT_BYTES}
        return {name: value for name, value in parts.items() if value}
    # Offloading while generating makes room for an engine; the policy that generates itself stays.
    in_rollout = phase == "generation" and job.placement != NO_ENGINE
    offloaded = in_rollout and job.trainer_offload_in_rollout
    parts = {
        "policy weights": 0 if offloaded else states.weights_bytes,
        "reference model": 0 if offloaded else states.reference_bytes,
        "optimizer states": 0 if in_rollout and job.optimizer_offload_in_rollout else states.optimizer_bytes,
    }
    if phase in ("backward", "step"):
        parts["gradients"] = states.gradients_bytes
    if phase == "backward":
        parts["activations"] = activation_bytes(shape, job)
        parts["logits (log-prob peak)"] = logits_bytes(shape, job, training=True)
    if phase == "step":
        parts["fp32 gradients (step)"] = states.step_gradients_bytes
    if phase == "logprob":
        parts["activations"] = inference_activation_bytes(shape, job)
        parts["logits (log-prob peak)"] = logits_bytes(shape, job, training=False)
    if phase != "generation":
        parts["ZeRO-3 gathered layers"] = states.gathered_bytes
    if phase == "generation" and job.placement == NO_ENGINE:
        batch = job.micro_batch
        full_heads = 2 * shape.layers * shape.kv_heads * shape.head_dim * job.dtype_bytes
        parts["generation KV cache"] = batch * job.tokens_per_sequence * full_heads
        if job.zero_stage == 3 and not job.fsdp and job.gather_for_generate:
            # TRL and ms-swift gather every ZeRO-3 shard before HF generate (ds3_gather_for_generation,
            # true by default): the whole 16-bit policy sits on each GPU while it generates.
            parts["ZeRO-3 gathered for generate"] = max(0, int(shape.total_params * job.dtype_bytes)
                                                        - parts["policy weights"])
    fragmentation = FRAGMENTATION_EXPANDABLE if job.expandable_segments else FRAGMENTATION
    parts["fragmentation headroom"] = int(fragmentation * sum(parts.values()))
    parts["CUDA context"] = CUDA_CONTEXT_BYTES
    if job.world_size > 1:
        parts["NCCL buffers"] = NCCL_BYTES
    return {name: value for name, value in parts.items() if value}


def _engine_parts(engine: EngineMemory, asleep: bool, own_process: bool) -> dict[str, int]:
    parts: dict[str, int] = {}
    if asleep:
        parts["vLLM asleep (CUDA graphs)"] = engine.asleep_bytes
    else:
        parts["vLLM weights"] = engine.weights_bytes
        parts["vLLM KV cache"] = max(0, engine.kv_cache_bytes)
        parts["vLLM activations + non-torch"] = engine.activation_bytes + NON_TORCH_BYTES
        parts["vLLM CUDA graphs"] = engine.graphs_bytes
    if own_process:
        parts["vLLM CUDA context"] = CUDA_CONTEXT_BYTES
    return {name: value for name, value in parts.items() if value}
