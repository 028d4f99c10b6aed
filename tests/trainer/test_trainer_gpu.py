"""The trainer's CUDA-only paths: NCCL, a real CUDA OOM, colocated vLLM rollouts (skipped without CUDA)."""
from __future__ import annotations

import importlib.util
import math

import pytest
import torch

from grpo_doctor.schema import PhaseBegin, Step

pytestmark = [pytest.mark.gpu, pytest.mark.distributed]


def num_ranks() -> int:
    return min(2, torch.cuda.device_count())


def test_ddp_on_cuda_trains_over_nccl(launch_trainer, tmp_path):
    result = launch_trainer(tmp_path, "--steps", "2", "--per-device-batch", "4", nproc=num_ranks())
    assert result.returncode == 0, result.explain()
    assert "backend nccl" in result.output
    for log in result.run.ranks.values():
        assert [s.step for s in log.of_kind(Step)] == [0, 1]


def test_cuda_oom_is_a_real_torch_out_of_memory_error(launch_trainer, tmp_path):
    result = launch_trainer(tmp_path, "--steps", "2", "--inject", "oom:rank=0,step=1", nproc=1)
    assert result.returncode != 0, result.explain()
    error = result.run.ranks[0].errors[0]
    assert (error.exc_type, error.phase, error.step) == ("OutOfMemoryError", "forward", 1)
    assert "CUDA out of memory" in error.message


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed")
def test_vllm_rollouts_sync_weights_into_the_engine_before_every_rollout(launch_trainer, tmp_path):
    result = launch_trainer(tmp_path, "--steps", "2", "--per-device-batch", "4", "--rollout", "vllm",
                            "--vllm-gpu-memory-utilization", "0.2", nproc=num_ranks(), timeout_s=900)
    assert result.returncode == 0, result.explain()
    for rank, log in result.run.ranks.items():
        for n in (0, 1):
            phases = [r.phase for r in log.of_kind(PhaseBegin) if r.step == n]
            assert phases[:2] == ["weight-sync", "rollout"], (rank, n, phases)
        steps = log.of_kind(Step)
        assert [s.step for s in steps] == [0, 1]
        assert all(math.isfinite(s.metrics["loss"]) for s in steps)
        assert all(s.metrics["completion_length"] >= 1 for s in steps)
