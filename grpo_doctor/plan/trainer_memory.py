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

from grpo_doctor.plan.job import FUSED, SLICED_FP32, Job
from grpo_doctor.plan.model_shape import ModelShape

MASTER_AND_ADAM_BYTES = 12  # fp32 master weight + Adam m + v, per trainable parameter (mixed precision)
FP32_GRAD_BYTES = 4  # the fp32 gradients DeepSpeed's optimizer steps on (ZeRO 1-3), during the step
QLORA_BYTES_PER_PARAM = 0.5625  # 4-bit NF4 + double-quantised constants; embeddings stay in bf16

# Activations saved for backward, per token, in units of the activation dtype (docs/plan.md: fitted to
# the reference trainer's measured peaks, tests/plan/test_measured_peaks.py). Each decoder layer keeps
# ~HIDDEN_COEFF x hidden + INTERMEDIATE_COEFF x intermediate (its inputs, fp32 norm statistics, q/k/v
# and attention output, the gated MLP's four intermediate-width tensors); the model's ends (embedding
# output, final norm, the lm_head's input) add ENDS_COEFF x hidden. With gradient checkpointing a layer
# keeps CHECKPOINT_COEFF x hidden (its input and rotary tables), and backward recomputes one layer at a
# time, after the logits' backward is done.
HIDDEN_COEFF = 12.0
INTERMEDIATE_COEFF = 4.0
ENDS_COEFF = 3.0
CHECKPOINT_COEFF = 1.5
FP32_BYTES = 4


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
    """Activations saved for backward by one training micro-batch (prompt + completion tokens), and
    with gradient checkpointing the layer being recomputed where it outgrows the logits' backward."""
    tokens = job.micro_batch * job.tokens_per_sequence
    layer = (HIDDEN_COEFF * shape.hidden + INTERMEDIATE_COEFF * _mlp_width(shape)) * job.dtype_bytes
    ends = ENDS_COEFF * shape.hidden * job.dtype_bytes
    # Eager attention keeps each layer's attention probabilities and makes an fp32 softmax on the way.
    scores = _attention_probabilities_bytes(shape, job, job.micro_batch)
    scores_temp = scores * FP32_BYTES // job.dtype_bytes
    if not job.gradient_checkpointing:
        return int(tokens * (shape.layers * layer + ends) + shape.layers * scores + scores_temp)
    kept = tokens * (shape.layers * CHECKPOINT_COEFF * shape.hidden * job.dtype_bytes + ends)
    # The logits' backward (logits_bytes) comes first; the recomputed layer only adds what exceeds it.
    recompute = tokens * layer + scores + scores_temp - logits_bytes(shape, job, training=True)
    return int(kept + max(0, recompute))


def _attention_probabilities_bytes(shape: ModelShape, job: Job, batch: int) -> int:
    if not job.eager_attention:
        return 0  # FlashAttention / SDPA never hold the S x S matrix
    return batch * shape.heads * job.tokens_per_sequence ** 2 * job.dtype_bytes


def logits_bytes(shape: ModelShape, job: Job, training: bool) -> int:
    """GRPO's log-prob peak: the [batch, positions, vocab] logits and what the log-softmax makes of them.

    sliced-fp32 (the reference trainer, measured to the byte): while dividing by the temperature the
    whole sequence's logits and the completion's scaled copy live together; then the copy, its fp32
    upcast and the fp32 log_softmax. Training keeps that log_softmax output (fp32) and its backward
    makes two more fp32 tensors of the same size.
    kept-rowwise (TRL, ms-swift): the completion's logits, their scaled copy, the row-by-row log_softmax
    outputs in bf16; backward adds two tensors of that size.
    fused (verl, OpenRLHF): the whole sequence's logits go into flash-attn's chunked cross-entropy, whose
    backward writes the gradient in place of the logits.
    Then, in every style, the lm_head's backward holds the gradient of all the logits it returned and
    its weight's new gradient (measured: the peak of the fp32 large-vocabulary settings).
    """
    batch = job.micro_batch if training else (job.logprob_micro_batch or job.micro_batch)
    completion = batch * job.max_completion_len * shape.vocab
    sequence = batch * job.tokens_per_sequence * shape.vocab
    w = job.dtype_bytes
    if job.logprob_style == SLICED_FP32:
        upcast = FP32_BYTES if w < FP32_BYTES else 0
        forward = max(sequence * w + completion * w, completion * (w + upcast + FP32_BYTES))
        backward = 3 * completion * FP32_BYTES
        returned = sequence
    elif job.logprob_style == FUSED:  # flash-attn's cross-entropy writes its gradient in place of the logits
        forward, backward, returned = sequence * w, sequence * w, sequence
    else:
        forward, backward, returned = 2 * completion * w, 3 * completion * w, completion
    if not training:
        return int(forward)
    # The lm_head's backward: the gradient of every logit it returned, beside the new gradient of its
    # weight (vocab x hidden; under accumulation a temporary added into the existing one; LoRA leaves
    # the lm_head frozen).
    weight_grad = shape.vocab * shape.hidden * w if job.train_type == "full" else 0
    lm_head = returned * w + weight_grad
    return int(max(forward, backward, lm_head))


def inference_activation_bytes(shape: ModelShape, job: Job) -> int:
    """A no-grad forward keeps one layer's temporaries at a time."""
    batch = job.logprob_micro_batch or job.micro_batch
    per_layer = (4 * shape.hidden + 3 * _mlp_width(shape)) * job.dtype_bytes
    scores = _attention_probabilities_bytes(shape, job, batch)
    return int(batch * job.tokens_per_sequence * per_layer + scores * (1 + FP32_BYTES // job.dtype_bytes))


def _mlp_width(shape: ModelShape) -> int:
    if shape.experts:  # the tokens routed to each of top-k experts: k expert widths per token
        return shape.expert_intermediate * max(1, shape.experts_per_token) + shape.shared_expert_intermediate
    return shape.intermediate
