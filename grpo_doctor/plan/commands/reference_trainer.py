"""grpo-doctor's reference trainer (`python -m grpo_doctor_trainer.train`) as a Job.

Its model returns logits for every position; the completion's are sliced, scaled by the
temperature and upcast to fp32 before log_softmax (trainer/grpo.py: token_logprobs). Prompts are
the short arithmetic questions of trainer/data.py (16 tokens at most).

Typical use:
    job = read_reference_trainer(split_command("torchrun --nproc-per-node 2 -m grpo_doctor_trainer.train"), hw)
"""
from __future__ import annotations

from grpo_doctor.plan.commands.argv import ALL_GPUS, SplitCommand
from grpo_doctor.plan.commands.common import Hardware, Settings
from grpo_doctor.plan.commands.flags import parse_flags
from grpo_doctor.plan.commands.placement import gpus_of_node
from grpo_doctor.plan.job import COLOCATE, NO_ENGINE, SLICED_FP32, Job, Spelling

PROMPT_TOKENS = 16
SPELLING = Spelling(names={"engine_memory_fraction": "vllm-gpu-memory-utilization", "micro_batch": "per-device-batch",
                           "max_completion_len": "max-new-tokens", "zero_stage": "zero-stage",
                           "expandable_segments": "$PYTORCH_CUDA_ALLOC_CONF"},
                    values={"expandable_segments": {"true": "expandable_segments:True"}})


def read_reference_trainer(cmd: SplitCommand, hw: Hardware) -> Job:
    flags, _ = parse_flags(cmd.args, "grpo_doctor_trainer")
    s = Settings(flags, "grpo-doctor-trainer")
    gpus, note = gpus_of_node(hw, cmd.env)
    deepspeed = s.text("engine", "ddp") == "deepspeed"
    vllm = s.text("rollout", "hf") == "vllm"
    job = Job(
        framework="grpo-doctor-trainer", model=hw.model or s.text("model", "tiny"), gpu_memory_bytes=hw.gpu_memory_bytes,
        gpus_per_node=gpus, nodes=hw.nodes or cmd.nodes or 1, train_gpus_per_node=gpus if cmd.procs_per_node == ALL_GPUS else (cmd.procs_per_node or 1),
        dtype_bytes=4, zero_stage=(s.number("zero_stage", 2) if deepspeed else 0),
        micro_batch=s.number("per_device_batch", 4), max_prompt_len=PROMPT_TOKENS,
        max_completion_len=s.number("max_new_tokens", 8), reference_model=s.number("beta", 0.04, float) > 0,
        logprob_style=SLICED_FP32,
        engine="vllm" if vllm else "hf", placement=COLOCATE if vllm else NO_ENGINE,
        engine_memory_fraction=s.number("vllm_gpu_memory_utilization", 0.3, float),
        spelling=SPELLING,
    )
    return job.assume(*([note] if note else []), "fp32 weights (the reference trainer loads in float32)")
