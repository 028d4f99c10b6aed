"""The framework flags that remedies name, in one table: every flag a hint names is tied to the framework
(and the version) it belongs to, and tests/analysis/test_hint_flags.py checks each one against that
framework's own argument class where it is installed (TRL's `GRPOConfig`, ms-swift's `RLHFArguments`
and `RolloutArguments`, torchrun's parser), with the defaults the hints quote.

Frameworks spell the same setting differently (TRL `vllm_max_model_length`, ms-swift
`--vllm_max_model_len`, verl `actor_rollout_ref.rollout.max_model_len`) and ship different defaults
(vLLM's memory share: TRL colocate 0.3, ms-swift 0.9, verl 0.5), so a hint never names a bare flag:
it names the framework with it, through `flags()`.

Typical use:
    from grpo_doctor.analysis.remedies import SWIFT, TRL, flags
    HINT = f"Put vLLM to sleep during training steps: {flags(TRL, 'vllm_enable_sleep_mode')}; " \\
           f"{flags(SWIFT, 'sleep_level', 'offload_model')}."
    # -> "... TRL `vllm_enable_sleep_mode=True`; ms-swift `--sleep_level 1`, `--offload_model true`."
"""
from __future__ import annotations

from typing import Any

TRL = "TRL"  # trl.GRPOConfig (and the transformers TrainingArguments it extends)
TRL_SERVE = "trl vllm-serve"  # trl/scripts/vllm_serve.py ScriptArguments: server-mode engine limits
SWIFT = "ms-swift"  # `swift rlhf`: swift.arguments.RLHFArguments
SWIFT_ROLLOUT = "swift rollout"  # the server-mode engine: swift.arguments.RolloutArguments
VERL = "verl"  # Hydra keys of verl/trainer/config/ppo_trainer.yaml (DAPO recipe: recipe/dapo)
OPENRLHF = "OpenRLHF"  # openrlhf.cli.train_ppo_ray
TORCHRUN = "torchrun"  # torch.distributed.run's parser and its rendezvous handlers

# The versions the table was checked against (sources of these releases; the test re-checks the
# installed ones). A hint that quotes a default says which framework it belongs to.
CHECKED_AGAINST: dict[str, str] = {
    TRL: "1.16.0", TRL_SERVE: "1.16.0", SWIFT: "4.6.0", SWIFT_ROLLOUT: "4.6.0",
    VERL: "0.8.0.dev (main, January 2026)", OPENRLHF: "main (2026)", TORCHRUN: "torch 2.13",
}

# {framework: {flag (the field / key / option name): how a hint writes it}}
FLAGS: dict[str, dict[str, str]] = {
    TRL: {
        "use_vllm": "use_vllm=True",
        "vllm_mode": 'vllm_mode="server"',
        "vllm_enable_sleep_mode": "vllm_enable_sleep_mode=True",
        "vllm_gpu_memory_utilization": "vllm_gpu_memory_utilization",
        "vllm_max_model_length": "vllm_max_model_length",
        "vllm_tensor_parallel_size": "vllm_tensor_parallel_size=2",
        "vllm_importance_sampling_correction": "vllm_importance_sampling_correction=True",
        "ddp_timeout": "ddp_timeout",
        "beta": "beta",
        "entropy_coef": "entropy_coef",
        "use_adaptive_entropy": "use_adaptive_entropy=True",
        "top_entropy_quantile": "top_entropy_quantile=0.2",
        "epsilon_high": "epsilon_high=0.28",
        "num_iterations": "num_iterations",
        "steps_per_generation": "steps_per_generation",
        "mask_truncated_completions": "mask_truncated_completions=True",
        "max_completion_length": "max_completion_length",
        "generation_kwargs": "generation_kwargs",
        "gradient_accumulation_steps": "gradient_accumulation_steps",
        "dataloader_drop_last": "dataloader_drop_last=True",
        "dataloader_num_workers": "dataloader_num_workers",
        "logging_nan_inf_filter": "logging_nan_inf_filter=False",
    },
    TRL_SERVE: {
        "model": "--model",
        "gpu_memory_utilization": "--gpu_memory_utilization",
        "max_model_len": "--max_model_len",
        "tensor_parallel_size": "--tensor_parallel_size",
        "data_parallel_size": "--data_parallel_size",
    },
    SWIFT: {
        "vllm_mode": "--vllm_mode server",
        "sleep_level": "--sleep_level 1",
        "offload_model": "--offload_model true",
        "offload_optimizer": "--offload_optimizer true",
        "move_model_batches": "--move_model_batches",
        "vllm_gpu_memory_utilization": "--vllm_gpu_memory_utilization",
        "vllm_max_model_len": "--vllm_max_model_len",
        "vllm_tensor_parallel_size": "--vllm_tensor_parallel_size 2",
        "vllm_enable_lora": "--vllm_enable_lora true",
        "ddp_timeout": "--ddp_timeout 1800",
        "beta": "--beta",
        "epsilon_high": "--epsilon_high 0.28",
        "top_entropy_quantile": "--top_entropy_quantile 0.2",
        "dynamic_sample": "--dynamic_sample true",
        "max_resample_times": "--max_resample_times 3",
        "overlong_filter": "--overlong_filter true",
        "rollout_importance_sampling_mode": "--rollout_importance_sampling_mode",
        "max_completion_length": "--max_completion_length",
        "dataloader_drop_last": "--dataloader_drop_last true",
    },
    SWIFT_ROLLOUT: {
        "model": "--model",
        "vllm_data_parallel_size": "--vllm_data_parallel_size 2",
        "vllm_gpu_memory_utilization": "--vllm_gpu_memory_utilization",
        "vllm_max_model_len": "--vllm_max_model_len",
    },
    VERL: {
        "actor_rollout_ref.actor.fsdp_config.param_offload": "actor_rollout_ref.actor.fsdp_config.param_offload=True",
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload":
            "actor_rollout_ref.actor.fsdp_config.optimizer_offload=True",
        "actor_rollout_ref.rollout.free_cache_engine": "actor_rollout_ref.rollout.free_cache_engine",
        "actor_rollout_ref.rollout.gpu_memory_utilization": "actor_rollout_ref.rollout.gpu_memory_utilization",
        "actor_rollout_ref.rollout.max_model_len": "actor_rollout_ref.rollout.max_model_len",
        "actor_rollout_ref.rollout.tensor_model_parallel_size": "actor_rollout_ref.rollout.tensor_model_parallel_size",
        "actor_rollout_ref.nccl_timeout": "actor_rollout_ref.nccl_timeout",
        "actor_rollout_ref.actor.entropy_coeff": "actor_rollout_ref.actor.entropy_coeff",
        "actor_rollout_ref.actor.clip_ratio_high": "actor_rollout_ref.actor.clip_ratio_high=0.28",
        "actor_rollout_ref.actor.use_kl_loss": "actor_rollout_ref.actor.use_kl_loss=True",
        "actor_rollout_ref.actor.kl_loss_coef": "actor_rollout_ref.actor.kl_loss_coef",
        "actor_rollout_ref.actor.ppo_epochs": "actor_rollout_ref.actor.ppo_epochs",
        "actor_rollout_ref.actor.ppo_mini_batch_size": "actor_rollout_ref.actor.ppo_mini_batch_size",
        "data.train_batch_size": "data.train_batch_size",
        # DAPO recipe only (python -m recipe.dapo.main_dapo); verl's main trainer ignores them.
        "algorithm.filter_groups.enable": "algorithm.filter_groups.enable=True",
        "data.gen_batch_size": "data.gen_batch_size",
        "data.max_response_length": "data.max_response_length",
    },
    OPENRLHF: {
        "dynamic_filtering": "--dynamic_filtering",
        "dynamic_filtering_reward_range": "--dynamic_filtering_reward_range 0 1",
    },
    TORCHRUN: {
        "nnodes": "--nnodes",
        "master-addr": "--master-addr",
        "master-port": "--master-port",
        "rdzv-backend": "--rdzv-backend c10d",
        "rdzv-endpoint": "--rdzv-endpoint host:port",
        "rdzv-conf timeout": "--rdzv-conf timeout=1800",
        "rdzv-conf join_timeout": "--rdzv-conf join_timeout=1800",
    },
}

# Defaults the hints quote, checked against the installed framework where there is one.
DEFAULTS: dict[str, dict[str, Any]] = {
    TRL: {"vllm_gpu_memory_utilization": 0.3, "ddp_timeout": 1800, "beta": 0.0, "entropy_coef": 0.0,
          "vllm_enable_sleep_mode": False, "vllm_importance_sampling_correction": True},
    TRL_SERVE: {"gpu_memory_utilization": 0.9},
    SWIFT: {"vllm_gpu_memory_utilization": 0.9, "ddp_timeout": 18000000, "sleep_level": 0},
    VERL: {"actor_rollout_ref.rollout.gpu_memory_utilization": 0.5, "actor_rollout_ref.nccl_timeout": 600,
           "actor_rollout_ref.rollout.free_cache_engine": True, "actor_rollout_ref.actor.entropy_coeff": 0},
}

# The vLLM range each trainer declares for itself (TRL: its `vllm` extra).
VLLM_RANGES: dict[str, str] = {TRL: "vllm>=0.22.0,<=0.31.0"}

# Flags of tools that are not training frameworks; named in hints, not checked (no argument class here).
OTHER_TOOLS: dict[str, tuple[str, ...]] = {
    "docker": ("--shm-size", "--ipc", "--memory", "--ulimit"),
    "Slurm": ("--mem",),
    "compute-sanitizer": ("--tool",),
    "py-spy": ("--pid", "--native"),
}


def flag(framework: str, name: str) -> str:
    """How a hint writes one flag, in backticks (KeyError for a flag not in the table: add it there)."""
    return f"`{FLAGS[framework][name]}`"


def flags(framework: str, *names: str) -> str:
    """The framework's name and its flags: "ms-swift `--sleep_level 1`, `--offload_model true`"."""
    return f"{framework} " + ", ".join(flag(framework, n) for n in names)


def flag_set(framework: str, name: str, value: Any) -> str:
    """One flag with a value other than the table's: `key=value` (TRL, verl) or `--flag value` (CLIs)."""
    written = FLAGS[framework][name].split("=")[0].split(" ")[0]
    return f"`{written} {value}`" if written.startswith("--") else f"`{written}={value}`"


def default(framework: str, name: str) -> Any:
    return DEFAULTS[framework][name]


def vllm_shares() -> str:
    """The frameworks' defaults for vLLM's memory share, for hints that tell the user to change it."""
    return (f"{TRL} colocate {default(TRL, 'vllm_gpu_memory_utilization')} "
            f"(`trl vllm-serve` {default(TRL_SERVE, 'gpu_memory_utilization')}), "
            f"{SWIFT} {default(SWIFT, 'vllm_gpu_memory_utilization')}, "
            f"{VERL} {default(VERL, 'actor_rollout_ref.rollout.gpu_memory_utilization')}")


_PARAM_OFFLOAD = "actor_rollout_ref.actor.fsdp_config.param_offload"
_OPTIMIZER_OFFLOAD = "actor_rollout_ref.actor.fsdp_config.optimizer_offload"

# Remedy sentences more than one rule gives, written once so they stay alike.
SLEEP_AND_OFFLOAD = (
    "Free the GPU in turns: put vLLM to sleep while the trainer steps and offload the trainer while vLLM "
    f"generates: {flags(TRL, 'vllm_enable_sleep_mode')}; {flags(SWIFT, 'sleep_level', 'offload_model', 'offload_optimizer')} "
    f"(and {flag(SWIFT, 'move_model_batches')} N to send the weights to vLLM in N batches); "
    f"{flags(VERL, _PARAM_OFFLOAD, _OPTIMIZER_OFFLOAD)} (verl puts vLLM to sleep by default: "
    f"{flag(VERL, 'actor_rollout_ref.rollout.free_cache_engine')}).")

VLLM_SHARE = (
    f"Give colocated vLLM a smaller share of the GPU than the value you run with (defaults differ: {vllm_shares()}, "
    f"so lower it from your own setting, not to a fixed number): {flags(TRL, 'vllm_gpu_memory_utilization')}, "
    f"{flags(SWIFT, 'vllm_gpu_memory_utilization')}, {flags(VERL, 'actor_rollout_ref.rollout.gpu_memory_utilization')}; "
    f"and cap the context to the longest prompt + completion: {flags(TRL, 'vllm_max_model_length')}, "
    f"{flags(SWIFT, 'vllm_max_model_len')}, {flags(VERL, 'actor_rollout_ref.rollout.max_model_len')}.")

VLLM_OWN_GPUS = (
    "Give vLLM GPUs of its own (server mode): NPROC_PER_NODE=N-1 alone no longer reserves one (in colocate mode "
    "every training process runs its own engine). Start the server on the spare GPUs and train on the others, with "
    f"disjoint CUDA_VISIBLE_DEVICES: TRL `CUDA_VISIBLE_DEVICES=7 trl vllm-serve --model M` and "
    f"{flag(TRL, 'vllm_mode')} (a server sharing a GPU with the trainer fails with NCCL's \"Duplicate GPU "
    f"detected\"); ms-swift `CUDA_VISIBLE_DEVICES=6,7 swift rollout --model M "
    f"{FLAGS[SWIFT_ROLLOUT]['vllm_data_parallel_size']}` and {flag(SWIFT, 'vllm_mode')} (ms-swift's "
    "num_infer_workers is gone). Server-mode engine limits go on the server's command line: "
    f"{flags(TRL_SERVE, 'gpu_memory_utilization', 'max_model_len')}; "
    f"{flags(SWIFT_ROLLOUT, 'vllm_gpu_memory_utilization', 'vllm_max_model_len')}.")

EXPANDABLE_SEGMENTS = (
    "Only where vLLM's sleep mode is off in the training process (TRL "
    f"{flag_set(TRL, 'vllm_enable_sleep_mode', False)}, ms-swift {flag_set(SWIFT, 'sleep_level', 0)}, verl "
    f"{flag_set(VERL, 'actor_rollout_ref.rollout.free_cache_engine', False)}, or vLLM in server mode) set "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation. With sleep mode on, vLLM releases "
    "from early 2025 until vLLM PR #40812 (April 2026) stop with \"Expandable segments are not compatible with "
    "memory pool\", and later ones switch it off inside vLLM's memory pool: there, rely on sleep mode and "
    "offloading instead.")

COLLECTIVE_TIMEOUTS = (
    "collective timeouts by launcher: plain torch init_process_group (NCCL) 10 min; HF Trainer / "
    f"{TRL} {flag(TRL, 'ddp_timeout')} {default(TRL, 'ddp_timeout')} s; {VERL} "
    f"{flag(VERL, 'actor_rollout_ref.nccl_timeout')} {default(VERL, 'actor_rollout_ref.nccl_timeout')} s; "
    f"{SWIFT}'s `--ddp_timeout` defaults to {default(SWIFT, 'ddp_timeout')} s (about 208 days: a hang there never "
    f"ends in an error, so set it, e.g. {flag(SWIFT, 'ddp_timeout')})")

FLIGHT_RECORDER = (
    "Set TORCH_FR_BUFFER_SIZE=2000 and TORCH_NCCL_TRACE_BUFFER_SIZE=2000 (the same setting under its newer and "
    "older name; torch reads the one it knows) with TORCH_NCCL_DUMP_ON_TIMEOUT=1, and leave "
    "TORCH_NCCL_ASYNC_ERROR_HANDLING at its default so the dumps are written before the process ends "
    "(grpo-doctor watch sets these)")

LAUNCH_IDENTICAL = (
    "Launch settings differ between nodes (see the config-mismatch finding), so ranks can take different code paths "
    "and wait in different collectives: make NNODES, NPROC_PER_NODE, MASTER_ADDR, MASTER_PORT, CUDA_VISIBLE_DEVICES "
    "and use_vllm / vllm_mode identical on every node (only NODE_RANK differs), exported from one shared script.")

DYNAMIC_SAMPLING = (
    f"drop zero-variance groups and sample more (DAPO dynamic sampling): {flags(SWIFT, 'dynamic_sample', 'max_resample_times')}; "
    f"{flags(OPENRLHF, 'dynamic_filtering', 'dynamic_filtering_reward_range')}; verl only in its DAPO recipe "
    f"(python -m recipe.dapo.main_dapo with {flag(VERL, 'algorithm.filter_groups.enable')} and "
    f"{flag(VERL, 'data.gen_batch_size')} larger than {flag(VERL, 'data.train_batch_size')}: verl's main trainer "
    "ignores filter_groups); TRL has no online filter: filter the prompts by pass rate offline (sample each a few "
    "times with the starting policy, keep those it neither always nor never solves)")
