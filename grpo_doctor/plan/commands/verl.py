"""verl's `python -m verl.trainer.main_ppo key=value ...` (Hydra overrides) as a Job.

verl colocates the FSDP actor, the reference and the rollout engine on every GPU (its hybrid
engine): trainer.n_gpus_per_node x trainer.nnodes, the engine sharded by
actor_rollout_ref.rollout.tensor_model_parallel_size. FSDP keeps sharded fp32 parameters (the
optimizer's master weights). `free_cache_engine` (default true) frees the KV cache while training;
param / optimizer offload move the actor's states to the CPU whenever they are not in use. verl
computes log-probs over the whole packed sequence with a fused cross-entropy. Defaults are those of
verl's ppo_trainer.yaml (gpu_memory_utilization 0.5, tensor_model_parallel_size 2, response and
prompt length 512); a `+key=value` is a new key Hydra adds, accepted as is.

Typical use:
    job = read_verl(split_command("python3 -m verl.trainer.main_ppo trainer.n_gpus_per_node=8 ..."), hardware)
"""
from __future__ import annotations

from grpo_doctor.plan.commands.argv import SplitCommand
from grpo_doctor.plan.commands.common import Hardware, Settings
from grpo_doctor.plan.commands.flags import PlanCommandError, check_known
from grpo_doctor.plan.job import COLOCATE, FUSED, Job, Spelling

A = "actor_rollout_ref."
SPELLING = Spelling(
    style="{name}={value}",
    names={
        "engine_memory_fraction": A + "rollout.gpu_memory_utilization",
        "gradient_checkpointing": A + "model.enable_gradient_checkpointing",
        "micro_batch": A + "actor.ppo_micro_batch_size_per_gpu",
        "offload_optimizer": A + "actor.fsdp_config.optimizer_offload",
        "trainer_offload_in_rollout": A + "actor.fsdp_config.param_offload",
        "engine_tp": A + "rollout.tensor_model_parallel_size",
        "engine_max_model_len": A + "rollout.max_model_len",
        "max_completion_len": "data.max_response_length",
        "sleep_level": A + "rollout.free_cache_engine",
        "expandable_segments": "$PYTORCH_CUDA_ALLOC_CONF",
    },
    values={"sleep_level": {"1": "True", "2": "True"}, "expandable_segments": {"true": "expandable_segments:True"}},
)


def hydra_overrides(args: tuple[str, ...]) -> dict[str, str]:
    """key=value overrides; Hydra's own options (--config-name=X) under their names with the dashes."""
    overrides = {}
    for word in args:
        if word.startswith("$") and "=" not in word:  # a script's "$@": its own arguments, unknown here
            continue
        if word.startswith("--"):
            name, _, value = word.partition("=")
            overrides[name] = value.strip("'\"")
            continue
        key, eq, value = word.partition("=")
        if not eq:
            raise PlanCommandError(f"{word!r} is not a Hydra override (key=value) for verl.trainer.main_ppo")
        overrides[key.lstrip("~")] = value.strip("'\"")
    return overrides


def read_verl(cmd: SplitCommand, hw: Hardware) -> Job:
    overrides = hydra_overrides(cmd.args)
    config_name = overrides.pop("--config-name", "") or overrides.pop("-cn", "")
    overrides.pop("--config-path", None)
    if "megatron" in config_name or any(".megatron." in key for key in overrides):
        raise PlanCommandError("verl with Megatron workers (ppo_megatron_trainer): the plan models verl's FSDP "
                               "workers only")
    if hw.strict_flags:
        check_known({k: v for k, v in overrides.items() if not k.startswith(("+", "--"))}, ("verl",),
                    "verl.trainer.main_ppo")
    s = Settings({k.lstrip("+"): v for k, v in overrides.items()}, "verl")
    model = hw.model or s.text(A + "model.path")
    if not model:
        raise PlanCommandError("verl command without actor_rollout_ref.model.path=...; name the model")
    # verl places its workers on trainer.n_gpus_per_node GPUs of each node, whatever the node has.
    gpus = s.number("trainer.n_gpus_per_node", None)
    if gpus is None:
        gpus = hw.gpus_per_node or s.number("trainer.n_gpus_per_node", 8, say="trainer.n_gpus_per_node=8 (verl's default)")
    lora_rank = s.number(A + "model.lora_rank", 0)
    use_kl = s.switch(A + "actor.use_kl_loss", False) or s.switch("algorithm.use_kl_in_reward", False)
    param_offload = s.switch(A + "actor.fsdp_config.param_offload", False)
    strategy = s.text(A + "actor.strategy", "fsdp")
    if strategy == "megatron":
        raise PlanCommandError("actor_rollout_ref.actor.strategy=megatron: the plan models verl's FSDP workers only")
    micro = s.number(A + "actor.ppo_micro_batch_size_per_gpu", None)
    prompt, response = s.number("data.max_prompt_length", 512), s.number("data.max_response_length", 512)
    nodes = s.number("trainer.nnodes", None)
    nodes = nodes if nodes is not None else (hw.nodes or 1)
    if micro is None and s.number(A + "actor.ppo_micro_batch_size", None):
        # verl before 0.3: a micro-batch over every GPU of the job
        micro = max(1, s.number(A + "actor.ppo_micro_batch_size", 1) // (gpus * nodes))
    if s.switch(A + "actor.use_dynamic_bsz", False):  # micro-batches packed up to a token budget per GPU
        budget = s.number(A + "actor.ppo_max_token_len_per_gpu", 16384)
        micro = max(1, budget // (prompt + response))
    if micro is None:
        max_tokens = s.number(A + "actor.ppo_max_token_len_per_gpu", None)
        micro = max(1, max_tokens // (prompt + response)) if max_tokens else 1
        if not max_tokens:
            s.assumed.append("micro-batch of 1 sequence (no actor.ppo_micro_batch_size_per_gpu)")
    job = Job(
        framework="verl", model=model, gpu_memory_bytes=hw.gpu_memory_bytes, gpus_per_node=gpus,
        nodes=nodes, train_type="lora" if lora_rank else "full",
        lora_rank=lora_rank or 8, fsdp=True, zero_stage=3,
        offload_optimizer=s.switch(A + "actor.fsdp_config.optimizer_offload", False),
        offload_params=param_offload,
        gradient_checkpointing=s.switch(A + "model.enable_gradient_checkpointing", False),
        micro_batch=micro,
        logprob_micro_batch=s.number(A + "rollout.log_prob_micro_batch_size_per_gpu", None)
        or _per_gpu(s.number(A + "rollout.log_prob_micro_batch_size", None), gpus * nodes),
        max_prompt_len=prompt, max_completion_len=response,
        reference_model=use_kl and not lora_rank,
        reference_offload=s.switch(A + "ref.fsdp_config.param_offload", False),
        logprob_style=FUSED,
        engine=s.text(A + "rollout.name", "vllm"), placement=COLOCATE,
        engine_tp=s.number(A + "rollout.tensor_model_parallel_size", 2,
                           say="rollout.tensor_model_parallel_size=2 (verl's default)"),
        engine_memory_fraction=s.number(A + "rollout.gpu_memory_utilization", 0.5, float,
                                        say="rollout.gpu_memory_utilization=0.5 (verl's default)"),
        engine_max_model_len=s.number(A + "rollout.max_model_len", None),
        engine_max_num_seqs=s.number(A + "rollout.max_num_seqs", 1024),
        engine_enforce_eager=s.switch(A + "rollout.enforce_eager", False),
        sleep_level=1 if s.switch(A + "rollout.free_cache_engine", True) else 0,
        trainer_offload_in_rollout=param_offload,
        optimizer_offload_in_rollout=s.switch(A + "actor.fsdp_config.optimizer_offload", False),
        expandable_segments=cmd.expandable_segments,
        spelling=SPELLING,
    )
    if s.switch(A + "model.use_remove_padding", False):
        s.assumed.append(f"every sequence at {prompt} + {response} tokens; verl packs sequences without padding, "
                         "so data with shorter answers needs less (--set max_completion_len=N plans typical lengths)")
    return job.assume(*s.assumed)


def _per_gpu(total: int | None, gpus: int) -> int | None:
    return max(1, total // gpus) if total else None
