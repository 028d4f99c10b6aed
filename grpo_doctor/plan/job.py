"""A GRPO job's memory-relevant settings, in one vocabulary for every framework.

The command readers (plan/commands/) turn `swift rlhf ...`, a TRL script's GRPOConfig flags, verl's
Hydra overrides or OpenRLHF's flags into a `Job`; the estimator (estimate.py) reads only this. Each
setting a reader did not find keeps its default here and adds a stated assumption, which the plan
prints. `Spelling` says how the user's framework writes each setting, so a fix is given as the
exact flag to change.

Typical use:
    job = Job(framework="ms-swift", model="Qwen/Qwen2.5-7B-Instruct", gpus_per_node=8, gpu_memory_bytes=80 * GIB)
    job.world_size, job.tokens_per_sequence
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

GIB = 2**30
MAX_COUNT = 2**40  # beyond every batch size, length and count of a real job: a typo or a stray exponent

# Where the rollout engine lives, relative to the training processes of a node.
COLOCATE = "colocate"  # one engine shard in (or beside) every training process, on its GPU
SEPARATE = "separate"  # the engine has GPUs of its own (TRL vllm_mode=server, OpenRLHF without colocation)
LAST_GPUS = "last-gpus"  # ms-swift 2.x/3.x "vllm_device auto": engines on the node's last GPUs, shared
# with whichever training rank lives there when NPROC_PER_NODE covers every GPU (CASES.md case 4)
NO_ENGINE = "none"  # generation by the policy itself (HF generate)

# How a framework computes per-token log-probabilities, which decides GRPO's logits peak.
SLICED_FP32 = "sliced-fp32"  # every position's logits; the completion's sliced, scaled, upcast to fp32 (the
# reference trainer)
KEPT_ROWWISE = "kept-rowwise"  # the completion's logits only (logits_to_keep), log_softmax row by row in bf16
# (TRL's selective_log_softmax; ms-swift)
FUSED = "fused"  # every position's logits into a fused, chunked cross-entropy (verl, OpenRLHF with flash-attn)


@dataclass(frozen=True)
class Spelling:
    """How the user's framework writes a setting: `flag(name, value)` gives the exact text to pass."""

    style: str = "--{name} {value}"  # verl: "{name}={value}"; a name "$VAR" is an environment variable
    names: dict[str, str] = field(default_factory=dict)  # setting -> the framework's flag / key
    values: dict[str, dict[str, str]] = field(default_factory=dict)  # setting -> {our value: their text}
    notes: dict[str, str] = field(default_factory=dict)  # setting -> what the flag needs besides itself

    def flag(self, setting: str, value: object) -> str | None:
        name = self.names.get(setting)
        if name is None:
            return None
        text = self.values.get(setting, {}).get(_plain(value), _plain(value))
        if name.startswith("$"):
            return f"{name[1:]}={text}"
        return self.style.format(name=name, value=text).rstrip()  # a bare switch: "--gradient_checkpointing"


def _plain(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


@dataclass(frozen=True)
class Job:
    framework: str  # "ms-swift", "trl", "verl", "openrlhf", "grpo-doctor-trainer", "flags"
    model: str
    gpu_memory_bytes: int
    gpus_per_node: int = 8
    nodes: int = 1
    train_gpus_per_node: int | None = None  # None: every GPU of the node trains
    # The trainer.
    train_type: str = "full"  # "full", "lora", "qlora"
    lora_rank: int = 8
    dtype_bytes: int = 2  # bf16 / fp16 weights and activations
    zero_stage: int = 0  # 0: every rank holds everything (DDP); 1, 2, 3: DeepSpeed ZeRO
    fsdp: bool = False  # FSDP's full sharding (verl): fp32 sharded parameters, like ZeRO-3
    offload_optimizer: bool = False  # optimizer states (and their fp32 master weights) on the CPU
    offload_params: bool = False  # ZeRO-3 / FSDP parameters on the CPU
    zero_sub_group_size: int = 1_000_000_000  # ZeRO-3 steps the optimizer this many parameters at a time
    gradient_checkpointing: bool = False
    eager_attention: bool = False  # attention probabilities materialised (B x heads x S x S per layer)
    gather_for_generate: bool = True  # ZeRO-3: every shard gathered before HF generate (ds3_gather_for_generation)
    micro_batch: int = 1  # sequences per forward/backward on one GPU
    logprob_micro_batch: int | None = None  # sequences per no-grad log-prob pass (None: micro_batch)
    max_prompt_len: int = 512
    max_completion_len: int = 512
    reference_model: bool = False  # a separate frozen reference copy (KL with beta > 0, full training)
    reference_offload: bool = False
    logprob_style: str = KEPT_ROWWISE
    # The rollout engine.
    engine: str = "vllm"  # "vllm", "sglang", "hf"
    placement: str = COLOCATE
    engine_gpus_per_node: int = 0  # LAST_GPUS / SEPARATE: how many of the node's GPUs host engines
    engine_tp: int = 1
    engine_memory_fraction: float = 0.9  # vLLM gpu_memory_utilization / SGLang mem_fraction_static
    engine_max_model_len: int | None = None  # None: max_prompt_len + max_completion_len
    engine_max_num_seqs: int = 256
    engine_enforce_eager: bool = False  # no CUDA graphs
    sleep_level: int = 0  # 0: engine stays resident while training; 1: weights to CPU, KV freed; 2: both freed
    trainer_offload_in_rollout: bool = False  # weights (and reference) to the CPU while generating (ms-swift
    # offload_model, verl param_offload, OpenRLHF deepspeed_enable_sleep)
    optimizer_offload_in_rollout: bool = False  # optimizer states to the CPU while generating
    expandable_segments: bool = False  # PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (less fragmentation)
    assumptions: tuple[str, ...] = ()
    spelling: Spelling = field(default_factory=Spelling)
    command: tuple[str, ...] = ()

    @property
    def trainers_per_node(self) -> int:
        return self.train_gpus_per_node if self.train_gpus_per_node is not None else self.gpus_per_node

    @property
    def world_size(self) -> int:
        return self.trainers_per_node * self.nodes

    @property
    def sharding_degree(self) -> int:
        """Ranks a ZeRO-3 / FSDP partition is split over (ZeRO 1-2 split only optimizer / gradients)."""
        return max(1, self.world_size)

    @property
    def tokens_per_sequence(self) -> int:
        return self.max_prompt_len + self.max_completion_len

    @property
    def max_model_len(self) -> int:
        return self.engine_max_model_len or self.tokens_per_sequence

    @property
    def full_sharding(self) -> bool:
        return self.zero_stage == 3 or self.fsdp

    def with_changes(self, **changes) -> Job:
        return replace(self, **changes)

    def assume(self, *texts: str) -> Job:
        return replace(self, assumptions=self.assumptions + tuple(t for t in texts if t not in self.assumptions))
