"""OpenRLHF's `python -m openrlhf.cli.train_ppo_ray --flags` (GRPO: --advantage_estimator group_norm).

The actor trains with DeepSpeed (--zero_stage, --adam_offload) on --actor_num_gpus_per_node GPUs;
vLLM engines (--vllm_num_engines x --vllm_tensor_parallel_size GPUs) run on GPUs of their own unless
--colocate_all_models puts everything on the actor's GPUs (then --vllm_enable_sleep and
--deepspeed_enable_sleep take turns on them). The reference model has GPUs of its own unless
--colocate_actor_ref or --colocate_all_models. Log-probs are taken over the whole sequence.
Defaults are OpenRLHF's argparse defaults (zero_stage 2, prompt_max_len 1024, generate_max_len 1024,
micro_train_batch_size 8, vllm_gpu_memory_utilization 0.95, init_kl_coef 0.01).

Typical use:
    job = read_openrlhf(split_command("python -m openrlhf.cli.train_ppo_ray --pretrain Qwen/Qwen2.5-7B ..."), hardware)
"""
from __future__ import annotations

from grpo_doctor.plan.commands.argv import SplitCommand
from grpo_doctor.plan.commands.common import Hardware, Settings
from grpo_doctor.plan.commands.flags import PlanCommandError, check_known, parse_flags
from grpo_doctor.plan.job import COLOCATE, FUSED, SEPARATE, Job, Spelling

SPELLING = Spelling(
    names={
        "engine_memory_fraction": "vllm_gpu_memory_utilization", "sleep_level": "vllm_enable_sleep",
        "gradient_checkpointing": "gradient_checkpointing", "micro_batch": "micro_train_batch_size",
        "zero_stage": "zero_stage", "offload_optimizer": "adam_offload",
        "trainer_offload_in_rollout": "deepspeed_enable_sleep", "engine_tp": "vllm_tensor_parallel_size",
        "max_completion_len": "generate_max_len", "expandable_segments": "$PYTORCH_CUDA_ALLOC_CONF",
    },
    values={"sleep_level": {"1": "", "2": ""}, "gradient_checkpointing": {"true": ""},
            "offload_optimizer": {"true": ""}, "trainer_offload_in_rollout": {"true": ""},
            "expandable_segments": {"true": "expandable_segments:True"}},
)


def read_openrlhf(cmd: SplitCommand, hw: Hardware) -> Job:
    flags, _ = parse_flags(cmd.args, "openrlhf")
    if hw.strict_flags:
        check_known(flags, ("openrlhf",), "openrlhf.cli.train_ppo_ray")
    # OpenRLHF 0.10.2 renamed its options to dotted names: read them under the older names.
    flags = {**{DOTTED.get(k, k): v for k, v in flags.items() if "." in k}, **flags}
    if "max_len" in flags and "generate_max_len" in flags and "prompt_max_len" not in flags:
        # 0.10.2's data.max_len is prompt + response; the older flags gave the prompt's own cap.
        try:
            flags["prompt_max_len"] = str(max(1, int(flags["max_len"]) - int(flags["generate_max_len"])))
        except (TypeError, ValueError):
            pass
    s = Settings(flags, "openrlhf")
    model = hw.model or s.text("pretrain")
    if not model:
        raise PlanCommandError("openrlhf.cli.train_ppo_ray without --pretrain; name the model")
    actor_gpus = s.number("actor_num_gpus_per_node", 8)
    gpus = hw.gpus_per_node or max(8, actor_gpus)
    engines, tp = s.number("vllm_num_engines", 0), s.number("vllm_tensor_parallel_size", 1)
    colocate_all = s.switch("colocate_all_models", False, )
    placement = COLOCATE if colocate_all else SEPARATE
    engine_gpus = 0 if colocate_all else min(max(0, gpus - actor_gpus), engines * tp)
    kl = s.number("init_kl_coef", 0.01, float)
    lora = s.number("lora_rank", 0)
    job = Job(
        framework="openrlhf", model=model, gpu_memory_bytes=hw.gpu_memory_bytes, gpus_per_node=gpus,
        # The actor's own nodes: the cluster also holds the reference, the engines and the reward model.
        nodes=s.number("actor_num_nodes", 1), train_gpus_per_node=actor_gpus,
        train_type=("qlora" if s.switch("load_in_4bit", False) else "lora") if lora else "full", lora_rank=lora or 8,
        zero_stage=s.number("zero_stage", 2), offload_optimizer=s.switch("adam_offload", False),
        gradient_checkpointing=s.switch("gradient_checkpointing", False),
        eager_attention=_eager(s),
        micro_batch=s.number("micro_train_batch_size", 8),
        logprob_micro_batch=s.number("micro_rollout_batch_size", 8),
        max_prompt_len=s.number("prompt_max_len", 1024), max_completion_len=s.number("generate_max_len", 1024),
        reference_model=kl > 0 and not lora and (colocate_all or s.switch("colocate_actor_ref", False)),
        reference_offload=s.switch("ref_reward_offload", False),
        logprob_style=FUSED,
        engine="vllm" if engines else "hf", placement=placement if engines else SEPARATE, engine_gpus_per_node=engine_gpus,
        engine_tp=tp, engine_memory_fraction=s.number("vllm_gpu_memory_utilization", 0.95, float),
        engine_max_model_len=s.number("max_len", None),
        sleep_level=1 if s.switch("vllm_enable_sleep", False) else 0,
        trainer_offload_in_rollout=s.switch("deepspeed_enable_sleep", False),
        optimizer_offload_in_rollout=s.switch("deepspeed_enable_sleep", False),
        expandable_segments=cmd.expandable_segments,
        spelling=SPELLING,
    )
    return job.assume(*s.assumed)


def _eager(s: Settings) -> bool:
    """--attn_implementation (0.9+, FlashAttention-2 by default); before it, eager unless --flash_attn."""
    if s.has("attn_implementation"):
        return s.text("attn_implementation") == "eager"
    if s.has("flash_attn"):
        return False
    s.assumed.append("attention: flash_attention_2 (OpenRLHF's default from 0.9; older releases ran eager "
                     "attention unless --flash_attn)")
    return False


# OpenRLHF 0.10.2's dotted options and the names they had before (openrlhf/cli/train_ppo_ray.py, v0.11.0).
DOTTED = {
    "actor.model_name_or_path": "pretrain", "actor.num_nodes": "actor_num_nodes",
    "actor.num_gpus_per_node": "actor_num_gpus_per_node", "ref.num_nodes": "ref_num_nodes",
    "ref.num_gpus_per_node": "ref_num_gpus_per_node", "train.colocate_all": "colocate_all_models",
    "train.colocate_actor_ref": "colocate_actor_ref", "vllm.num_engines": "vllm_num_engines",
    "vllm.tensor_parallel_size": "vllm_tensor_parallel_size", "vllm.gpu_memory_utilization": "vllm_gpu_memory_utilization",
    "vllm.enable_sleep": "vllm_enable_sleep", "vllm.enforce_eager": "enforce_eager",
    "ds.enable_sleep": "deepspeed_enable_sleep", "ds.zero_stage": "zero_stage", "ds.adam_offload": "adam_offload",
    "ds.attn_implementation": "attn_implementation", "ds.load_in_4bit": "load_in_4bit", "ds.lora.rank": "lora_rank",
    "ds.ref_reward_offload": "ref_reward_offload", "actor.gradient_checkpointing_enable": "gradient_checkpointing",
    "train.micro_batch_size": "micro_train_batch_size", "rollout.micro_batch_size": "micro_rollout_batch_size",
    "data.max_len": "max_len", "rollout.max_new_tokens": "generate_max_len", "algo.kl.init_coef": "init_kl_coef",
}
