"""What a rollout engine (vLLM, SGLang) holds on each GPU it runs on, awake and asleep.

vLLM (0.7 and later) gives one engine instance `gpu_memory_utilization x total GPU memory`; inside it
come the weights (one tensor-parallel shard), the activation peak of its profiling run, non-torch
memory, and the KV cache takes the rest. CUDA graphs come on top (unless enforce_eager). The KV
cache per token is `2 x layers x kv_heads x head_dim x dtype bytes` over the shard's heads; vLLM
stores it in blocks of 16 tokens and refuses to start when the cache is negative ("No available
memory for the cache blocks") or cannot hold one sequence of max_model_len. Asleep (sleep mode,
level 1 or 2) it keeps only its CUDA graph pool on the GPU.

Typical use:
    engine = engine_memory(shape, job)
    engine.awake_bytes, engine.kv_cache_bytes, engine.kv_tokens, engine.problem
"""
from __future__ import annotations

from dataclasses import dataclass

from grpo_doctor.plan.job import GIB, Job
from grpo_doctor.plan.model_shape import ModelShape

BLOCK_TOKENS = 16
CUDA_GRAPH_BYTES = GIB // 2  # captured graphs' private pool; vLLM logs 0.3-1.5 GiB by batch sizes captured
NON_TORCH_BYTES = GIB // 4  # NCCL and cuBLAS workspaces inside the engine's budget
MAX_BATCHED_TOKENS = 8192  # vLLM V1's default chunked-prefill budget: the profiling run's token count


@dataclass(frozen=True)
class EngineMemory:
    budget_bytes: int  # gpu_memory_utilization x total
    weights_bytes: int
    activation_bytes: int
    kv_cache_bytes: int  # negative when the budget cannot even hold the weights
    graphs_bytes: int
    kv_tokens: int
    problem: str | None  # why vLLM would refuse to start, or None

    @property
    def awake_bytes(self) -> int:
        return max(self.budget_bytes, self.weights_bytes + self.activation_bytes + NON_TORCH_BYTES) + self.graphs_bytes

    @property
    def asleep_bytes(self) -> int:
        return self.graphs_bytes


def kv_bytes_per_token(shape: ModelShape, job: Job) -> int:
    """Per GPU: the shard holds kv_heads / tp heads (at least one: vLLM replicates KV heads beyond that)."""
    heads = max(1, shape.kv_heads // job.engine_tp) if job.engine_tp <= shape.kv_heads else 1
    return 2 * shape.layers * heads * shape.head_dim * job.dtype_bytes


def kv_tokens(kv_cache_bytes: int, per_token_bytes: int) -> int:
    """Tokens the cache holds, in whole 16-token blocks, as vLLM counts them."""
    if kv_cache_bytes <= 0:
        return 0
    return kv_cache_bytes // (per_token_bytes * BLOCK_TOKENS) * BLOCK_TOKENS


def engine_memory(shape: ModelShape, job: Job) -> EngineMemory:
    budget = int(job.engine_memory_fraction * job.gpu_memory_bytes)
    weights = int(shape.total_params * job.dtype_bytes / job.engine_tp)
    # Profiling: one forward over the batched-token budget (one layer's temporaries at a time) and
    # the sampler's fp32 logits for max_num_seqs rows.
    per_token = (4 * shape.hidden + 3 * shape.intermediate // job.engine_tp) * job.dtype_bytes
    activation = MAX_BATCHED_TOKENS * per_token + job.engine_max_num_seqs * shape.vocab * 4
    kv_cache = budget - weights - activation - NON_TORCH_BYTES
    tokens = kv_tokens(kv_cache, kv_bytes_per_token(shape, job))
    graphs = 0 if job.engine_enforce_eager else CUDA_GRAPH_BYTES
    problem = None
    if kv_cache <= 0:
        problem = (f"vLLM cannot start: its share ({job.engine_memory_fraction:g} x {job.gpu_memory_bytes / GIB:.1f} GiB "
                   f"= {budget / GIB:.1f} GiB) does not hold the weights ({weights / GIB:.1f} GiB per shard) and its "
                   "profiling peak: 'No available memory for the cache blocks'")
    elif tokens < job.max_model_len:
        problem = (f"vLLM cannot start: its KV cache holds {tokens:,} tokens, fewer than max_model_len "
                   f"{job.max_model_len:,}")
    return EngineMemory(budget, weights, int(activation), int(kv_cache), graphs, tokens, problem)


def fraction_needed(shape: ModelShape, job: Job, kv_tokens_wanted: int) -> float:
    """The smallest gpu_memory_utilization whose KV cache holds `kv_tokens_wanted` tokens."""
    probe = engine_memory(shape, job.with_changes(engine_memory_fraction=0.0))
    need = -probe.kv_cache_bytes + kv_tokens_wanted * kv_bytes_per_token(shape, job)
    return need / job.gpu_memory_bytes
