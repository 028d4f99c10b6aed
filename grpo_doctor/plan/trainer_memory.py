"""What the training process keeps on one GPU: model states, activations, GRPO's logits, buffers.

Model states follow DeepSpeed's own code: bf16 weights; 16-bit gradients (partitioned from ZeRO-2 on)
kept from backward to the step; fp32 master weights and Adam moments (12 bytes per trainable
parameter, partitioned); and, during the optimizer step only, the fp32 copy of the gradients the
step works on. ZeRO-3 makes that copy one sub-group at a time (`sub_group_size`, 1e9 by default),
releasing the sub-group's 16-bit gradients as it goes, so for partitions larger than a sub-group the
plan is below DeepSpeed's estimator, which counts the whole partition (`18P/N`): by 2 bytes x
(P/N - sub_group_size). Everywhere else the plan equals `estimate_zero2/3_model_states_mem_needs`
(tests/plan/test_model_states.py).
Activations and the logits peak are per-token costs fitted to the reference trainer's measured peaks on
CPU (tests/plan/test_measured_peaks.py; docs/plan.md gives the fit and its ratios).

Typical use:
    states = model_states(shape, job)          # bytes per GPU: weights, gradients, optimizer, ...
    activation_bytes(shape, job), logits_bytes(shape, job, training=True)
"""
from __future__ import annotations

from dataclasses import dataclass

from grpo_doctor.plan.job import COMPLETION_ONLY, Job
from grpo_doctor.plan.model_shape import ModelShape

MASTER_AND_ADAM_BYTES = 12  # fp32 master weight + Adam m + v, per trainable parameter (mixed precision)
FP32_GRAD_BYTES = 4  # the fp32 gradients DeepSpeed's optimizer steps on (ZeRO 1-3), during the step
QLORA_BYTES_PER_PARAM = 0.5625  # 4-bit NF4 + double-quantised constants; embeddings stay in bf16

# Saved for backward per token per decoder layer, in units of the activation dtype, fitted to the
# measured peaks (docs/plan.md): ~ the layer's inputs, norms (fp32), q/k/v/attention output, and the
# gated MLP's four intermediate-width tensors.
HIDDEN_COEFF = 14.0
INTERMEDIATE_COEFF = 4.0
# With gradient checkpointing each layer keeps only its input; one layer is recomputed at a time.
CHECKPOINT_COEFF = 1.0
# Copies of the logits the log-prob computation makes, bytes per element beyond the model's own
# logits (dtype): by how the framework computes log-probs.
COPY_BYTES_FP32_UPCAST = 8  # fp32 copy + fp32 log_softmax (plus a temperature-scaled copy in dtype)
COPY_BYTES_ROWWISE = 0  # TRL's selective_log_softmax on bf16: per-row log_softmax outputs (in dtype)
COPY_BYTES_FUSED = 0  # a fused / chunked cross-entropy: only its gradient buffer (in dtype)

@dataclass(frozen=True)
class ModelStates:
    weights_bytes: int
    gradients_bytes: int  # kept from backward to the optimizer step (16-bit; FSDP: fp32)
    optimizer_bytes: int
    reference_bytes: int
    gathered_bytes: int  # ZeRO-3 / FSDP: whole layers gathered for the forward and backward
    step_gradients_bytes: int = 0  # the fp32 gradients of the optimizer step, only during the step

    @property
    def at_step_bytes(self) -> int:
        """The policy's model states at the optimizer step: what DeepSpeed's estimators count."""
        return (self.weights_bytes + self.gradients_bytes + self.step_gradients_bytes + self.optimizer_bytes
                + self.gathered_bytes)


def trainable_params(shape: ModelShape, job: Job) -> int:
    return shape.total_params if job.train_type == "full" else shape.lora_params(job.lora_rank)


def frozen_weight_bytes(shape: ModelShape, job: Job) -> float:
    """The base weights of a LoRA / QLoRA policy (bf16, or 4-bit outside the embeddings)."""
    if job.train_type == "qlora":
        embeddings = shape.embedding_params * (1 if shape.tied_embeddings else 2)
        return (shape.total_params - embeddings) * QLORA_BYTES_PER_PARAM + embeddings * job.dtype_bytes
    return shape.total_params * job.dtype_bytes


def model_states(shape: ModelShape, job: Job) -> ModelStates:
    """Per-GPU bytes of weights, gradients and optimizer states while training."""
    n = job.sharding_degree
    trainable = trainable_params(shape, job)
    if job.train_type == "full":
        weight_bytes = float(shape.total_params * job.dtype_bytes)
        if job.fsdp:  # verl's FSDP keeps sharded fp32 parameters; bf16 only inside the gathered unit
            weight_bytes = float(shape.total_params * 4)
    else:
        weight_bytes = frozen_weight_bytes(shape, job) + trainable * job.dtype_bytes
    step = 0.0
    if job.zero_stage == 0 and not job.fsdp:
        # Plain DDP (no DeepSpeed): the optimizer steps on the bf16 parameters; Adam's moments in bf16.
        grads = trainable * job.dtype_bytes
        optimizer = 2 * trainable * job.dtype_bytes
        weights = weight_bytes
    elif job.fsdp:  # fp32 shards: the gradients are fp32 shards too, and the shards are the master weights
        weights = 0.0 if job.offload_params else weight_bytes / n
        grads = 0.0 if job.offload_optimizer else FP32_GRAD_BYTES * trainable / n
        optimizer = 0.0 if job.offload_optimizer else (MASTER_AND_ADAM_BYTES - 4) * trainable / n
    else:
        sharded = job.zero_stage == 3
        weights = (0.0 if job.offload_params else weight_bytes / n) if sharded else weight_bytes
        if job.offload_optimizer:  # gradients go to the CPU as they are reduced; the step runs there
            grads = optimizer = 0.0
        else:
            # ZeRO-1 keeps whole 16-bit gradients; ZeRO-2 and 3 their partition (DeepSpeed 0.19).
            grads = trainable * job.dtype_bytes / (1 if job.zero_stage == 1 else n)
            optimizer = MASTER_AND_ADAM_BYTES * trainable / n
            partition = trainable / n
            if sharded:  # ZeRO-3 copies one sub-group to fp32 and releases its 16-bit gradients
                step = (FP32_GRAD_BYTES - job.dtype_bytes) * min(partition, job.zero_sub_group_size)
            else:
                step = FP32_GRAD_BYTES * partition
    gathered = 0
    if job.full_sharding:
        gathered = 4 * shape.largest_module_params  # DeepSpeed's estimator: 4 bytes x the largest layer
    reference = 0.0
    if job.reference_model and not job.reference_offload:
        reference = shape.total_params * job.dtype_bytes / (n if job.full_sharding else 1)
    return ModelStates(int(weights), int(grads), int(optimizer), int(reference), int(gathered), int(step))


def host_bytes_per_node(shape: ModelShape, job: Job) -> int:
    """CPU memory one node needs for what its ranks offload: DeepSpeed's optimizer / parameter offload
    (master weights, moments, fp32 gradients, 16-bit parameters) and the framework's offload while
    generating. DeepSpeed's own estimator adds 1.5x for pinned buffers on top."""
    n, ranks = job.sharding_degree, job.trainers_per_node
    trainable = trainable_params(shape, job)
    states = model_states(shape, job)
    per_rank = 0.0
    if job.offload_optimizer:
        per_rank += (MASTER_AND_ADAM_BYTES + FP32_GRAD_BYTES) * trainable / n
    if job.offload_params:
        per_rank += shape.total_params * job.dtype_bytes / n
    if job.trainer_offload_in_rollout:
        per_rank += states.weights_bytes + states.reference_bytes
    if job.optimizer_offload_in_rollout:
        per_rank += states.optimizer_bytes
    return int(per_rank * ranks)


def activation_bytes(shape: ModelShape, job: Job) -> int:
    """Activations saved for backward by one training micro-batch (prompt + completion tokens)."""
    tokens = job.micro_batch * job.tokens_per_sequence
    per_layer_full = (HIDDEN_COEFF * shape.hidden + INTERMEDIATE_COEFF * _mlp_width(shape)) * job.dtype_bytes
    if job.gradient_checkpointing:
        kept = shape.layers * CHECKPOINT_COEFF * shape.hidden * job.dtype_bytes
        return int(tokens * (kept + per_layer_full))  # every layer's input + the layer being recomputed
    return int(tokens * shape.layers * per_layer_full)


def logits_bytes(shape: ModelShape, job: Job, training: bool) -> int:
    """GRPO's log-prob peak: [batch, positions, vocab] logits and the copies the framework makes."""
    batch = job.micro_batch if training else (job.logprob_micro_batch or job.micro_batch)
    returned = _positions(job, job.logits_positions) * shape.vocab * job.dtype_bytes
    if job.logits_chunked:
        copy_bytes = job.dtype_bytes + COPY_BYTES_FUSED
    elif job.logits_fp32:
        copy_bytes = job.dtype_bytes + COPY_BYTES_FP32_UPCAST
    else:
        copy_bytes = 2 * job.dtype_bytes + COPY_BYTES_ROWWISE
    copies = _positions(job, job.logprob_positions) * shape.vocab * copy_bytes
    return int(batch * (returned + copies))


def _positions(job: Job, which: str) -> int:
    return job.max_completion_len if which == COMPLETION_ONLY else job.tokens_per_sequence


def inference_activation_bytes(shape: ModelShape, job: Job) -> int:
    """A no-grad forward keeps one layer's temporaries at a time."""
    batch = job.logprob_micro_batch or job.micro_batch
    per_layer = (4 * shape.hidden + 3 * _mlp_width(shape)) * job.dtype_bytes
    return int(batch * job.tokens_per_sequence * per_layer)


def _mlp_width(shape: ModelShape) -> int:
    if shape.experts:  # the tokens routed to each of top-k experts: k expert widths per token
        return shape.expert_intermediate * max(1, shape.experts_per_token) + shape.shared_expert_intermediate
    return shape.intermediate
