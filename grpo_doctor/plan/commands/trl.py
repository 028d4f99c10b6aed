"""A TRL GRPO script's command (`accelerate launch [--config_file ds.yaml] train.py --flags`) as a Job.

TRL scripts parse GRPOConfig (with transformers' TrainingArguments), ModelConfig and their own
ScriptArguments from flags or from `--config grpo.yaml`; flags win over the YAML. DeepSpeed / FSDP
come from the accelerate config file or `--deepspeed ds.json`. Defaults are those of TRL 1.x and
later (vllm_mode colocate from 1.0, vllm_gpu_memory_utilization 0.3 from 0.18, gradient_checkpointing
true from 0.22, beta 0 from 0.19, per_device_train_batch_size 8); older TRL defaulted to a vLLM server
and beta 0.04: state them as flags. Each default used is printed as an assumption.
TRL asks the model for the completion's logits only (logits_to_keep) and takes the log-softmax row
by row in bf16 (selective_log_softmax), so no fp32 copy of the logits is made.

Typical use:
    job = read_trl(split_command("accelerate launch --config_file zero3.yaml grpo.py --use_vllm true"), hardware)
"""
from __future__ import annotations

from pathlib import Path

from grpo_doctor.plan.commands.argv import ALL_GPUS, SplitCommand
from grpo_doctor.plan.commands.common import Hardware, Settings
from grpo_doctor.plan.commands.config_files import (
    ZeroSettings,
    accelerate_settings,
    deepspeed_settings,
    read_yaml,
)
from grpo_doctor.plan.commands.flags import PlanCommandError, check_known, normal, parse_flags
from grpo_doctor.plan.commands.placement import gpus_of_node
from grpo_doctor.plan.job import COLOCATE, KEPT_ROWWISE, NO_ENGINE, SEPARATE, Job, Spelling

SPELLING = Spelling(
    names={
        "engine_memory_fraction": "vllm_gpu_memory_utilization", "sleep_level": "vllm_enable_sleep_mode",
        "gradient_checkpointing": "gradient_checkpointing", "micro_batch": "per_device_train_batch_size",
        "zero_stage": "deepspeed", "offload_optimizer": "deepspeed", "engine_tp": "vllm_tensor_parallel_size",
        "engine_max_model_len": "vllm_max_model_length", "max_completion_len": "max_completion_length",
        "expandable_segments": "$PYTORCH_CUDA_ALLOC_CONF",
    },
    values={"sleep_level": {"1": "true", "2": "true"},
            "zero_stage": {"3": "ds_zero3.json"},
            "offload_optimizer": {"true": "ds_zero3_offload.json"},
            "expandable_segments": {"true": "expandable_segments:True"}},
    notes={"zero_stage": "ds_zero3.json: a DeepSpeed config with zero_optimization.stage 3",
           "offload_optimizer": "ds_zero3_offload.json: zero_optimization.stage 3 with offload_optimizer.device cpu"},
)


def read_trl(cmd: SplitCommand, hw: Hardware, base_dir: Path | None = None) -> Job:
    flags, _ = parse_flags(cmd.args, "trl")
    if "config" in flags and flags["config"]:
        from_yaml = {normal(k): (None if v is None else _yaml_text(v)) for k, v in read_yaml(flags["config"], base_dir).items()}
        flags = from_yaml | flags
    if hw.strict_flags:
        check_known({k: v for k, v in flags.items() if k != "config"}, ("trl",), cmd.program or "the TRL script")
    s = Settings(flags, "trl")
    model = hw.model or s.text("model_name_or_path") or s.text("model")
    if not model:
        raise PlanCommandError(f"{cmd.program}: no --model_name_or_path; name the model (grpo-doctor plan --model)")
    zero = _zero(cmd, s, base_dir)
    gpus, gpu_note = gpus_of_node(hw, cmd.env)
    # The launcher's flag wins over its config file, as accelerate reads them; accelerate and the deepspeed
    # launcher use every GPU by default, plain python and torchrun one process.
    trainers = (gpus if cmd.procs_per_node == ALL_GPUS else cmd.procs_per_node) or (zero.procs // (zero.nodes or 1) if zero.procs else None) or \
        (gpus if cmd.launcher in ("accelerate", "deepspeed") else 1)
    nodes = hw.nodes or cmd.nodes or zero.nodes or 1
    peft = s.switch("use_peft", False)
    train_type = ("qlora" if s.switch("load_in_4bit", False) else "lora") if peft else "full"
    beta = s.number("beta", 0.0, float, say="beta 0 (TRL's default since 0.19): no reference model")
    use_vllm = s.switch("use_vllm", False)
    if s.text("vllm_mode") not in (None, "server", "colocate"):
        raise PlanCommandError(f"--vllm_mode {s.text('vllm_mode')!r}: TRL takes server or colocate")
    mode = s.text("vllm_mode", "colocate", say="vllm_mode colocate (TRL 1.x's default; 0.18-0.29 defaulted to server)") \
        if use_vllm else None
    placement = NO_ENGINE if not use_vllm else (SEPARATE if mode == "server" else COLOCATE)
    prompt = s.number("max_prompt_length", 512, say="prompts of 512 tokens (no --max_prompt_length)")
    job = Job(
        framework="trl", model=model, gpu_memory_bytes=hw.gpu_memory_bytes, gpus_per_node=gpus, nodes=nodes,
        train_gpus_per_node=trainers, train_type=train_type, lora_rank=s.number("lora_r", 16),
        dtype_bytes=2, zero_stage=zero.stage, fsdp=zero.fsdp, offload_optimizer=zero.offload_optimizer,
        offload_params=zero.offload_params, zero_sub_group_size=zero.sub_group_size,
        gradient_checkpointing=s.switch("gradient_checkpointing", True,
                                        say="gradient_checkpointing true (TRL's default from 0.22)"),
        gather_for_generate=s.switch("ds3_gather_for_generation", True),
        eager_attention=s.text("attn_implementation") == "eager",
        micro_batch=s.number("per_device_train_batch_size", 8,
                             say="per_device_train_batch_size 8 (transformers' default)"),
        max_prompt_len=prompt, max_completion_len=s.number("max_completion_length", 512),
        reference_model=beta > 0 and train_type == "full",
        logprob_style=KEPT_ROWWISE,
        engine="vllm" if use_vllm else "hf", placement=placement, engine_gpus_per_node=0,
        engine_tp=s.number("vllm_tensor_parallel_size", 1),
        engine_memory_fraction=s.number("vllm_gpu_memory_utilization", 0.3, float),
        engine_max_model_len=s.number("vllm_max_model_length", None),
        sleep_level=1 if s.switch("vllm_enable_sleep_mode", False) else 0,
        expandable_segments=cmd.expandable_segments,
        spelling=SPELLING,
    )
    return job.assume(*([gpu_note] if gpu_note else []), *s.assumed)


def _zero(cmd: SplitCommand, s: Settings, base_dir: Path | None) -> ZeroSettings:
    if s.text("deepspeed"):
        return deepspeed_settings(s.text("deepspeed"), base_dir)
    if cmd.deepspeed_config:
        return deepspeed_settings(cmd.deepspeed_config, base_dir)
    if cmd.accelerate_config:
        return accelerate_settings(cmd.accelerate_config, base_dir)
    return ZeroSettings(0, source="no DeepSpeed")


def _yaml_text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return " ".join(str(v) for v in value)
    return str(value)
