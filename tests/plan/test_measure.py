"""The measurement harness the planner is checked against is itself right where the answer is known
exactly: bytes of parameters and gradients, DeepSpeed's formulas, the fp32 log_softmax output, and
checkpointing keeping less than not checkpointing.

Typical use:
    .venv/bin/python -m pytest -q tests/plan/test_measure.py
"""
from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, Qwen2Config

from tests.plan.measure import (
    deepspeed_model_states,
    measure_logprob_no_grad,
    measure_train_step,
    param_counts,
)

TINY = dict(vocab_size=1000, hidden_size=128, intermediate_size=352, num_hidden_layers=2,
            num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=False)


def tiny_numel() -> int:
    v, h, i, layers = 1000, 128, 352, 2
    kv = 64  # one KV head of 64
    per_layer = h * h + 2 * h * kv + h * h + 3 * h * i + 2 * h  # q, k, v, o, gate/up/down, two norms
    return 2 * v * h + layers * per_layer + h  # embedding, lm_head, final norm


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_params_and_grads_are_numel_times_element_size(dtype):
    step = measure_train_step(TINY, micro_batch=1, prompt_len=8, completion_len=16,
                              gradient_checkpointing=False, dtype=dtype)
    size = torch.tensor([], dtype=dtype).element_size()
    assert step.params_bytes == tiny_numel() * size
    assert step.grads_bytes == step.params_bytes  # every parameter trains
    assert step.peak_by_category_bytes["Parameter"] == step.params_bytes  # the tracker saw every weight
    assert step.peak_total_bytes == step.params_bytes + step.grads_at_peak_bytes + step.peak_activations_bytes


def test_deepspeed_figures_are_its_formulas_on_the_meta_built_model(tmp_path):
    config = Qwen2Config(vocab_size=1000, hidden_size=128, intermediate_size=352, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)
    config.to_json_file(tmp_path / "config.json")
    total, largest = param_counts(tmp_path / "config.json")
    qkv_bias = 128 + 2 * 64
    assert total == tiny_numel() - 1000 * 128 + 2 * qkv_bias  # tied lm_head counted once
    assert largest == 1000 * 128  # the embedding, the largest single module

    gpus, nodes = 8, 2
    world = gpus * nodes
    zero2 = deepspeed_model_states(tmp_path, stage=2, gpus_per_node=gpus, nodes=nodes,
                                   offload_optimizer=False, offload_params=False)
    # DeepSpeed 0.19's stage_1_and_2: 2 bytes of 16-bit weights whole + 18 partitioned
    # (16-bit and fp32 gradients, fp32 master weights, Adam's two moments).
    assert tuple(zero2) == (2 * total + int(18 * total / world), int(total * 4 * gpus * 1.5))
    offloaded = deepspeed_model_states(tmp_path, stage=2, gpus_per_node=gpus, nodes=nodes,
                                       offload_optimizer=True, offload_params=False)
    assert offloaded.gpu_bytes == 2 * total
    zero3 = deepspeed_model_states(tmp_path, stage=3, gpus_per_node=gpus, nodes=nodes,
                                   offload_optimizer=False, offload_params=False)
    assert zero3.gpu_bytes == 4 * largest + int(18 * total / world)
    assert (zero3.total_params, zero3.largest_layer_params) == (total, largest)
    with pytest.raises(ValueError, match="stage 3"):
        deepspeed_model_states(tmp_path, 2, gpus, nodes, offload_optimizer=True, offload_params=True)


def test_a_72b_config_costs_nothing_on_the_meta_device(tmp_path):
    Qwen2Config(vocab_size=152064, hidden_size=8192, intermediate_size=29568, num_hidden_layers=80,
                num_attention_heads=64, num_key_value_heads=8,
                tie_word_embeddings=False).to_json_file(tmp_path / "config.json")
    total, largest = param_counts(tmp_path / "config.json")
    assert total == 72_706_203_648  # Qwen2.5-72B's published count
    assert largest == 152064 * 8192


def test_checkpointing_keeps_fewer_activations():
    deep = dict(TINY, num_hidden_layers=6)
    args = dict(micro_batch=2, prompt_len=32, completion_len=96, dtype=torch.float32)
    plain = measure_train_step(deep, gradient_checkpointing=False, **args)
    checkpointed = measure_train_step(deep, gradient_checkpointing=True, **args)
    assert checkpointed.saved_after_forward_bytes < plain.saved_after_forward_bytes / 2
    assert checkpointed.peak_activations_bytes < plain.peak_activations_bytes


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_logits_peak_holds_at_least_the_fp32_log_softmax(dtype):
    batch, prompt, completion, vocab = 2, 16, 64, 4096
    config = dict(TINY, vocab_size=vocab)
    step = measure_train_step(config, micro_batch=batch, prompt_len=prompt, completion_len=completion,
                              gradient_checkpointing=False, dtype=dtype)
    log_softmax = batch * completion * vocab * 4
    assert step.logits_peak_bytes >= log_softmax
    assert step.logits_peak_no_grad_bytes >= log_softmax
    # and no more than every [B, T, V] tensor token_logprobs makes, alive at once
    size = torch.tensor([], dtype=dtype).element_size()
    everything = batch * vocab * ((prompt + completion) * size + completion * size + 2 * completion * 4)
    assert step.logits_peak_bytes <= everything
    reference = measure_logprob_no_grad(config, batch, prompt, completion, dtype)
    assert reference.logits_peak_bytes == step.logits_peak_no_grad_bytes
    assert reference.peak_activations_bytes >= reference.logits_peak_bytes


def test_llama_config_round_trips_through_a_directory(tmp_path):
    LlamaConfig(**TINY).save_pretrained(tmp_path)
    assert param_counts(tmp_path) == (tiny_numel(), 1000 * 128)
