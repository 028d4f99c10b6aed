"""Options of `python -m grpo_doctor_trainer.train`: defaults, one-line usage errors with exit status 2."""
from __future__ import annotations

import subprocess
import sys

import pytest
from grpo_doctor_trainer.config import TrainConfig, UsageError, parse_args
from grpo_doctor_trainer.inject import Fault
from helpers import REPO, clean_env


def run_trainer(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "grpo_doctor_trainer.train", "--no-record", *args], cwd=REPO,
                          env=clean_env(), capture_output=True, text=True, timeout=120)


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def test_defaults_match_the_documented_ones():
    cfg = parse_args([])
    assert cfg == TrainConfig()
    assert (cfg.num_generations, cfg.per_device_batch, cfg.beta, cfg.epsilon, cfg.steps) == (4, 4, 0.04, 0.2, 6)
    assert (cfg.engine, cfg.zero_stage, cfg.rollout, cfg.dist_timeout_s) == ("ddp", 2, "hf", 1800.0)
    assert cfg.vllm_gpu_memory_utilization == 0.3
    assert cfg.record


def test_inject_is_repeatable_and_parsed():
    cfg = parse_args(["--inject", "same-seed-per-node", "--inject", "slow:rank=1,delay_s=0.1", "--no-record"])
    assert cfg.faults == (Fault("same-seed-per-node"), Fault("slow", rank=1, delay_s=0.1, phase="rollout"))
    assert not cfg.record


def test_bad_inject_spec_is_a_usage_error_listing_valid_faults():
    with pytest.raises(UsageError, match="unknown fault 'explode'. Valid: same-seed-per-node"):
        parse_args(["--inject", "explode"])


def test_batch_layout_that_splits_a_group_across_steps_is_refused():
    cfg = parse_args(["--per-device-batch", "3", "--num-generations", "4"])
    with pytest.raises(UsageError, match=r"2 \* 3 = 6 is not a multiple of --num-generations 4"):
        cfg.check_world(world_size=2)
    cfg.check_world(world_size=4)


def test_option_without_effect_is_warned_about(capsys):
    parse_args(["--zero-stage", "3"])
    assert "--zero-stage 3 has no effect with --engine ddp" in capsys.readouterr().err


@pytest.mark.parametrize(("args", "says"), [
    (["--model", "/no/such/checkpoint"], "error: --model '/no/such/checkpoint' does not exist; pass a local Hugging Face"),
    (["--inject", "crash:rank=1,step=0"], "error: --inject crash: rank=1 does not exist with world size 1"),
])
def test_usage_errors_exit_2_with_one_line_and_no_traceback(args, says):
    result = run_trainer(*args)
    assert result.returncode == 2, result.stderr
    assert error_lines(result.stderr) == [error_lines(result.stderr)[0]]
    assert error_lines(result.stderr)[0].startswith(says)
    assert "Traceback" not in result.stderr


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_vllm_rollouts_without_a_gpu_exit_2_saying_so():
    result = run_trainer("--rollout", "vllm")
    assert result.returncode == 2
    assert error_lines(result.stderr) == ["error: vLLM rollouts need a CUDA GPU and this machine has none; use --rollout hf"]
