"""CASES.md's two memory failures, planned from the commands their reporters posted.

Case 4 (ms-swift #3307, 2 nodes x 8 A100 80GB, ms-swift 3.2's vLLM on each node's last GPU): the
plan must find the GPU that ran out (GPU 7, shared by rank 7's trainer and the engine, while GPUs
0-6 fit), give both shares, and name the changes the thread recommends (NPROC_PER_NODE=7, a lower
vllm_gpu_memory_utilization) as fixes that fit. Case 5 (ms-swift #3887, 32B on 8 x 96 GB, ZeRO-3
offload, vLLM tp=8): it stalled without an OOM; the plan must show where the memory goes (the
offloaded policy, the engine's tensor-parallel shard, its KV cache) and that the GPUs do not run
out, and what the offload costs the host.

Typical use:
    .venv/bin/python -m pytest -q tests/plan/test_field_cases.py
"""
from __future__ import annotations

import pytest

from grpo_doctor.plan.job import GIB
from grpo_doctor.plan.trainer_memory import host_bytes_per_node
from tests.plan.case_corpus import load_cases, run_case


def planned(case_id: str):
    case = next(c for c in load_cases() if c["id"] == case_id)
    result = run_case(case)
    if result.result is None:
        pytest.skip(result.skipped)
    return case, result.result


def test_case_4_gpu_7_runs_out_where_trainer_and_vllm_share_it():
    case, result = planned("swift-3307-qwen7b-16gpu")
    plan = result.plan
    rows = {g.gpus: g for g in plan.gpus}
    shared, alone = rows[(7,)], rows[tuple(range(7))]
    assert not plan.fits and plan.worst is shared and shared.role == "trainer + vLLM"
    assert alone.free_bytes > 0  # GPUs 0-6 have room: only the shared GPU runs out, as logged
    observed = case["observed"]
    assert observed["gpu_index"] == 7
    # vLLM's share is its gpu_memory_utilization x the GPU, which the trainer's 29.59 / 48.83 GiB crowd out.
    engine = sum(v for k, v in shared.phases["start"].items() if k.startswith("vLLM"))
    assert engine / GIB == pytest.approx(0.5 * 79.35 + 1.5, abs=0.6)
    trainer_start = sum(v for k, v in shared.phases["start"].items() if not k.startswith("vLLM"))
    assert abs(trainer_start / GIB - 29.59) / 29.59 < 0.15  # policy + reference loaded, as at the OOM


def test_case_4_fixes_are_the_threads_own_remedies_and_they_fit():
    _, result = planned("swift-3307-qwen7b-16gpu")
    fitting = {f.flag.split(" ")[0].split("=")[0]: f for f in result.fixes if f.fits}
    assert "NPROC_PER_NODE" in fitting and fitting["NPROC_PER_NODE"].flag == "NPROC_PER_NODE=7"
    share = fitting["--vllm_gpu_memory_utilization"]
    assert share.value < 0.5 and share.cost == "small"


def test_case_5_the_32b_job_fits_its_gpus_and_shows_where_memory_goes():
    _, result = planned("swift-3887-32b-8gpu-tp8-stall")
    plan = result.plan
    assert plan.fits  # no OOM was reported: the stall is not the GPUs running out
    (row,) = plan.gpus
    backward = row.phases["backward"]
    assert "policy weights" not in backward  # zero3_offload: the policy's parameters live on the CPU
    assert backward["vLLM weights"] == pytest.approx(2 * plan.shape.total_params / 8, rel=0.01)  # tp=8 shard
    assert backward["vLLM KV cache"] > 30 * GIB
    assert host_bytes_per_node(plan.shape, plan.job) > 500 * GIB  # what the offload puts on the host
