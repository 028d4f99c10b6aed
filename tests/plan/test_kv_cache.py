"""The plan's vLLM KV cache against vLLM's own start-up lines in the real logs under tests/data.

vLLM V0 logs the memory left for the KV cache and the number of 16-token blocks it made of it; the
plan's per-token size (2 x layers x KV heads x head size x 2 bytes, from config.json) must turn the
one into the other exactly. The log (tests/data/logs/vllm_memory.log) is of a 28-layer model with 4
KV heads of 128 (the Qwen2 7B architecture: 57,344 bytes per token), the shape of
tests/data/plan/models/Qwen--Qwen2.5-7B-Instruct.

Typical use:
    .venv/bin/python -m pytest -q tests/plan/test_kv_cache.py
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from grpo_doctor.plan.engine_memory import BLOCK_TOKENS, engine_memory, kv_bytes_per_token, kv_tokens
from grpo_doctor.plan.job import GIB, Job
from grpo_doctor.plan.model_shape import load_model_shape

DATA = Path(__file__).resolve().parents[1] / "data"
QWEN_7B = DATA / "plan" / "models" / "Qwen--Qwen2.5-7B-Instruct" / "config.json"


@pytest.fixture(scope="module")
def shape():
    if not QWEN_7B.is_file():
        pytest.skip("the Qwen2.5-7B config.json fixture is missing")
    return load_model_shape("Qwen/Qwen2.5-7B-Instruct", QWEN_7B)


def test_kv_bytes_per_token_follow_the_models_layers_kv_heads_and_head_size(shape):
    job = Job(framework="flags", model="q", gpu_memory_bytes=80 * GIB)
    assert kv_bytes_per_token(shape, job) == 2 * 28 * 4 * 128 * 2 == 57_344
    # Tensor parallelism splits the KV heads; past their number each GPU keeps one (replicated).
    assert kv_bytes_per_token(shape, job.with_changes(engine_tp=2)) == 57_344 // 2
    assert kv_bytes_per_token(shape, job.with_changes(engine_tp=8)) == 2 * 28 * 1 * 128 * 2


def test_vllm_v0s_logged_kv_memory_and_block_count_agree_with_the_plans_arithmetic(shape):
    text = (DATA / "logs" / "vllm_memory.log").read_text()
    kv_gib = float(re.search(r"the rest of the memory reserved for KV Cache is ([\d.]+)GiB", text).group(1))
    blocks = int(re.search(r"# cuda blocks: (\d+)", text).group(1))
    job = Job(framework="flags", model="q", gpu_memory_bytes=80 * GIB)
    tokens = kv_tokens(int(kv_gib * GIB), kv_bytes_per_token(shape, job))
    assert tokens == blocks * BLOCK_TOKENS


def test_vllm_v0s_logged_budget_is_utilisation_times_total_as_the_plan_takes_it(shape):
    text = (DATA / "logs" / "vllm_memory.log").read_text()
    total, util, budget = map(float, re.search(
        r"total_gpu_memory \(([\d.]+)GiB\) x gpu_memory_utilization \(([\d.]+)\) = ([\d.]+)GiB", text).groups())
    job = Job(framework="flags", model="q", gpu_memory_bytes=int(total * GIB), engine_memory_fraction=util)
    engine = engine_memory(shape, job)
    assert abs(engine.budget_bytes / GIB - budget) < 0.01
    # The logged split of that budget: weights 14.99, non-torch 0.14, activations 1.45, KV 23.00 GiB.
    logged_activation_gib = float(re.search(r"PyTorch activation peak memory takes ([\d.]+)GiB", text).group(1))
    assert abs(engine.activation_bytes / GIB - logged_activation_gib) / logged_activation_gib < 0.25


def test_a_share_that_cannot_hold_the_weights_is_vllms_own_refusal(shape):
    job = Job(framework="flags", model="q", gpu_memory_bytes=24 * GIB, engine_memory_fraction=0.5)
    engine = engine_memory(shape, job)
    assert engine.kv_cache_bytes < 0 and "No available memory for the cache blocks" in engine.problem


def test_a_cache_smaller_than_one_sequence_is_vllms_max_model_len_refusal(shape):
    job = Job(framework="flags", model="q", gpu_memory_bytes=40 * GIB, engine_memory_fraction=0.45,
              engine_max_model_len=131_072)
    engine = engine_memory(shape, job)
    assert engine.kv_tokens < 131_072 and "fewer than max_model_len 131,072" in engine.problem
