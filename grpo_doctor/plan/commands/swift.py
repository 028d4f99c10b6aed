"""`swift rlhf --rlhf_type grpo ...` (ms-swift 3.x and later) as a Job.

ms-swift reads NPROC_PER_NODE and NNODES from the environment (without NPROC_PER_NODE it runs one
process). Its defaults: train_type lora, gradient_checkpointing true, beta 0.04, per-device batch 1,
max_completion_length 512, vllm_gpu_memory_utilization 0.9, sleep_level 0. vLLM placement: `--vllm_mode
colocate` (or 3.3/3.4's `--num_infer_workers`) puts an engine in every training process;
`--vllm_mode server` / `--vllm_server_host` on GPUs elsewhere; 3.2's `--vllm_device auto` on the node's
last GPU, shared with the training rank there when NPROC_PER_NODE covers every GPU (CASES.md case 4).

Typical use:
    job = read_swift(split_command(["swift", "rlhf", "--rlhf_type", "grpo", "--use_vllm", "true"]), hardware)
"""
from __future__ import annotations

from grpo_doctor.plan.commands.argv import SplitCommand
from grpo_doctor.plan.commands.common import Hardware, Settings
from grpo_doctor.plan.commands.config_files import deepspeed_settings
from grpo_doctor.plan.commands.flags import PlanCommandError, check_known, parse_flags
from grpo_doctor.plan.commands.placement import gpus_of_node
from grpo_doctor.plan.job import COLOCATE, KEPT_ROWWISE, LAST_GPUS, NO_ENGINE, SEPARATE, Job, Spelling

SPELLING = Spelling(
    names={
        "engine_memory_fraction": "vllm_gpu_memory_utilization", "sleep_level": "sleep_level",
        "gradient_checkpointing": "gradient_checkpointing", "micro_batch": "per_device_train_batch_size",
        "zero_stage": "deepspeed", "offload_optimizer": "deepspeed", "trainer_offload_in_rollout": "offload_model",
        "optimizer_offload_in_rollout": "offload_optimizer", "engine_tp": "vllm_tensor_parallel_size",
        "engine_max_model_len": "vllm_max_model_len", "max_completion_len": "max_completion_length",
        "train_gpus_per_node": "$NPROC_PER_NODE", "expandable_segments": "$PYTORCH_CUDA_ALLOC_CONF",
        "train_type": "train_type",
    },
    values={"zero_stage": {"2": "zero2", "3": "zero3"}, "offload_optimizer": {"true": "zero3_offload"},
            "expandable_segments": {"true": "expandable_segments:True"}},
)


def read_swift(cmd: SplitCommand, hw: Hardware) -> Job:
    flags, _ = parse_flags(cmd.args, "ms_swift")
    if hw.strict_flags:
        check_known(flags, ("ms_swift", "ms_swift_3"), "swift rlhf")
    s = Settings(flags, "ms-swift")
    if cmd.program != "swift rlhf":
        raise PlanCommandError(f"{cmd.program}: grpo-doctor plan models GRPO jobs (swift rlhf --rlhf_type grpo)")
    rlhf_type = s.text("rlhf_type", "dpo")
    if rlhf_type != "grpo":
        raise PlanCommandError(f"swift rlhf --rlhf_type {rlhf_type}: grpo-doctor plan models GRPO jobs (--rlhf_type grpo)")
    model = hw.model or s.text("model") or s.text("model_id_or_path")
    if not model:
        raise PlanCommandError("swift rlhf without --model: name the model (or pass grpo-doctor plan --model)")
    env = cmd.env
    gpus, gpu_note = gpus_of_node(hw, env)
    procs = env.get("NPROC_PER_NODE")
    assumed = [gpu_note] if gpu_note else []
    if procs is None:
        assumed.append("NPROC_PER_NODE unset: ms-swift runs a single training process")
    trainers = _env_count(env, "NPROC_PER_NODE", 1)
    nodes = hw.nodes or _env_count(env, "NNODES", 1)
    # ms-swift 4 calls it --tuner_type; 3.x --train_type
    train_type = s.text("tuner_type") or s.text("train_type", "lora", say="--train_type lora (ms-swift's default)")
    if train_type == "lora" and s.number("quant_bits", None) == 4:
        train_type = "qlora"
    ds = deepspeed_settings(s.text("deepspeed")) if s.text("deepspeed") else None
    beta = s.number("beta", 0.04, float, say="beta 0.04 (ms-swift's default): a reference model is kept for full training")
    use_vllm = s.switch("use_vllm", False)
    placement, engine_gpus = _placement(s, use_vllm, trainers, gpus)
    job = Job(
        framework="ms-swift", model=model, gpu_memory_bytes=hw.gpu_memory_bytes, gpus_per_node=gpus, nodes=nodes,
        train_gpus_per_node=trainers, train_type="full" if train_type == "full" else train_type,
        lora_rank=s.number("lora_rank", 8),
        dtype_bytes=4 if s.text("torch_dtype") in ("float32", "fp32") else 2,
        zero_stage=ds.stage if ds else 0,
        offload_optimizer=bool(ds and ds.offload_optimizer), offload_params=bool(ds and ds.offload_params),
        zero_sub_group_size=ds.sub_group_size if ds else 1_000_000_000,
        gradient_checkpointing=s.switch("gradient_checkpointing", True),
        gather_for_generate=s.switch("ds3_gather_for_generation", True),
        eager_attention=s.text("attn_impl") == "eager",
        micro_batch=s.number("per_device_train_batch_size", 1),
        max_prompt_len=s.number("max_length", 512, say="prompts of 512 tokens (no --max_length)"),
        max_completion_len=s.number("max_completion_length", 512),
        reference_model=beta > 0 and train_type == "full" and not s.has("ref_model_offload"),
        logprob_style=KEPT_ROWWISE,
        engine="vllm" if use_vllm else "hf", placement=placement, engine_gpus_per_node=engine_gpus,
        engine_tp=_first(s.number("vllm_tensor_parallel_size", None), s.number("tensor_parallel_size", 1)),
        engine_memory_fraction=s.number("vllm_gpu_memory_utilization", 0.9, float),
        engine_max_model_len=s.number("vllm_max_model_len", None),
        engine_max_num_seqs=s.number("vllm_max_num_seqs", 256),
        engine_enforce_eager=s.switch("vllm_enforce_eager", False),
        sleep_level=s.number("sleep_level", 0),
        trainer_offload_in_rollout=s.switch("offload_model", False),
        optimizer_offload_in_rollout=s.switch("offload_optimizer", False),
        expandable_segments=cmd.expandable_segments,
        spelling=SPELLING,
    )
    return job.assume(*assumed, *s.assumed)


def _placement(s: Settings, use_vllm: bool, trainers: int, gpus: int) -> tuple[str, int]:
    if not use_vllm:
        return NO_ENGINE, 0
    mode = s.text("vllm_mode")
    if mode not in (None, "server", "colocate"):
        raise PlanCommandError(f"--vllm_mode {mode!r}: ms-swift takes server or colocate")
    if mode == "server" or s.has("vllm_server_host", "vllm_server_base_url"):
        return SEPARATE, 0  # engines on GPUs this plan does not see
    if mode == "colocate" or s.has("num_infer_workers"):
        return COLOCATE, 0
    if s.has("vllm_device"):  # ms-swift 3.2: the engine on the node's last GPU(s)
        return LAST_GPUS, 1
    s.assumed.append("--vllm_mode colocate (ms-swift's choice with --use_vllm and no server)")
    return COLOCATE, 0


def _env_count(env: dict[str, str], name: str, default: int) -> int:
    value = (env.get(name) or "").strip()
    if not value:
        return default
    if not value.isdigit():
        raise PlanCommandError(f"{name}={value!r} is not a number of processes or nodes")
    return int(value)


def _first(value, fallback):
    """The newer flag's value when given (0 included: check_settings names it), else the older flag's."""
    return fallback if value is None else value
