"""Command-line options of the reference trainer, parsed into one frozen `TrainConfig`.

Checks that need only the options happen here; checks that need the world size (batch
layout, rank numbers in `--inject`) happen in `TrainConfig.check_world`, once the process
group is up. Every bad value becomes a `UsageError`: one line naming the value and the fix.

Typical use:
    cfg = parse_args(["--steps", "3", "--inject", "slow:rank=1,delay_s=0.2"])
    cfg.check_world(world_size=2)
"""
from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass

from .inject import Fault, check_faults_for_world, parse_fault


class UsageError(Exception):
    """A bad option: main prints `error: <message>` and `hint: <hint>` and exits 2."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.hint = hint


@dataclass(frozen=True)
class TrainConfig:
    model: str = "tiny"
    steps: int = 6
    seed: int = 0
    num_generations: int = 4
    per_device_batch: int = 4
    max_new_tokens: int = 8
    temperature: float = 1.0
    lr: float = 1e-3
    beta: float = 0.04
    epsilon: float = 0.2
    max_grad_norm: float = 1.0
    engine: str = "ddp"
    zero_stage: int = 2
    backend: str = "auto"
    dist_timeout_s: float = 1800.0
    rollout: str = "hf"
    vllm_gpu_memory_utilization: float = 0.3
    vllm_seed: int | None = None
    run_dir: str | None = None
    record: bool = True
    sync_phases: bool = False
    log_every: int = 1
    faults: tuple[Fault, ...] = ()
    weight_sync_check_every: int = 1  # compare trainer and rollout weights after every Nth push; 0: never

    def check_world(self, world_size: int) -> None:
        """Checks that need the number of processes."""
        global_batch = world_size * self.per_device_batch
        if global_batch % self.num_generations:
            raise UsageError(
                f"world_size * --per-device-batch = {world_size} * {self.per_device_batch} = {global_batch} "
                f"is not a multiple of --num-generations {self.num_generations}",
                "every group of completions of one prompt must fit in one global batch; "
                "change --per-device-batch or --num-generations",
            )
        problem = check_faults_for_world(self.faults, world_size, beta=self.beta, rollout=self.rollout)
        if problem:
            raise UsageError(problem, "rank numbers count from 0; phases must be ones this run enters")

    def num_prompts(self, world_size: int) -> int:
        return world_size * self.per_device_batch // self.num_generations


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m grpo_doctor_trainer.train",
        description="Reference GRPO trainer for grpo-doctor (run under torchrun for several ranks).",
    )
    p.add_argument("--model", default="tiny", help="'tiny' (built in code) or a local Hugging Face checkpoint dir")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--num-generations", type=int, default=4, help="completions per prompt (G)")
    p.add_argument("--per-device-batch", type=int, default=4, help="completions per rank per step (B)")
    p.add_argument("--max-new-tokens", type=int, default=8)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--beta", type=float, default=0.04, help="KL weight; 0 skips the reference model")
    p.add_argument("--epsilon", type=float, default=0.2, help="PPO clip range")
    p.add_argument("--max-grad-norm", type=float, default=1.0)
    p.add_argument("--engine", choices=("ddp", "deepspeed"), default="ddp")
    p.add_argument("--zero-stage", type=int, choices=(2, 3), default=None, help="DeepSpeed ZeRO stage (default 2)")
    p.add_argument("--backend", choices=("auto", "gloo", "nccl"), default="auto",
                   help="process-group backend; auto = nccl with CUDA, gloo without")
    p.add_argument("--dist-timeout-s", type=float, default=1800.0, help="collective timeout (init_process_group)")
    p.add_argument("--rollout", choices=("hf", "vllm"), default="hf", help="hf generate, or colocated vLLM (GPU)")
    p.add_argument("--vllm-gpu-memory-utilization", type=float, default=None, help="default 0.3")
    p.add_argument("--vllm-seed", type=int, default=None, help="base seed of the vLLM engines; rank r's is this + r (default --seed)")
    p.add_argument("--run-dir", default=None, help="grpo-doctor run directory (GRPO_DOCTOR_RUN_DIR wins)")
    p.add_argument("--no-record", action="store_true", help="turn grpo-doctor recording off")
    p.add_argument("--sync-phases", action="store_true", help="CUDA-synchronise at every phase boundary")
    p.add_argument("--log-every", type=int, default=1, help="print a line every N steps (rank 0)")
    p.add_argument("--weight-sync-check-every", type=int, default=1, metavar="N",
                   help="compare the rollout engine's weights with the trainer's after every Nth push (0: never)")
    p.add_argument("--inject", action="append", default=[], metavar="SPEC",
                   help="fault to inject, NAME[:key=value,...]; repeatable (see trainer/inject.py)")
    return p


def parse_args(argv: list[str] | None = None) -> TrainConfig:
    args = build_parser().parse_args(argv)
    positive = ("steps", "num_generations", "per_device_batch", "max_new_tokens", "log_every")
    for name in positive:
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} {getattr(args, name)} must be at least 1")
    if args.weight_sync_check_every < 0:
        raise UsageError(f"--weight-sync-check-every {args.weight_sync_check_every} must be >= 0", "0 turns the check off")
    if args.temperature <= 0:
        raise UsageError(f"--temperature {args.temperature} must be > 0", "sampling needs a positive temperature")
    if args.dist_timeout_s <= 0:
        raise UsageError(f"--dist-timeout-s {args.dist_timeout_s} must be > 0")
    if args.engine == "ddp" and args.zero_stage is not None:
        _warn(f"--zero-stage {args.zero_stage} has no effect with --engine ddp; add --engine deepspeed")
    if args.rollout == "hf" and (args.vllm_gpu_memory_utilization is not None or args.vllm_seed is not None):
        _warn("--vllm-* options have no effect with --rollout hf; add --rollout vllm")
    utilization = 0.3 if args.vllm_gpu_memory_utilization is None else args.vllm_gpu_memory_utilization
    if not 0 < utilization <= 1:
        raise UsageError(f"--vllm-gpu-memory-utilization {utilization} must be in (0, 1]")
    try:
        faults = tuple(parse_fault(spec) for spec in args.inject)
    except ValueError as exc:
        raise UsageError(str(exc), "e.g. --inject hang:rank=1,phase=forward,step=2") from None
    return TrainConfig(
        model=args.model,
        steps=args.steps,
        seed=args.seed,
        num_generations=args.num_generations,
        per_device_batch=args.per_device_batch,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        lr=args.lr,
        beta=args.beta,
        epsilon=args.epsilon,
        max_grad_norm=args.max_grad_norm,
        engine=args.engine,
        zero_stage=2 if args.zero_stage is None else args.zero_stage,
        backend=args.backend,
        dist_timeout_s=args.dist_timeout_s,
        rollout=args.rollout,
        vllm_gpu_memory_utilization=utilization,
        vllm_seed=args.vllm_seed,
        run_dir=args.run_dir,
        record=not args.no_record,
        sync_phases=args.sync_phases,
        log_every=args.log_every,
        faults=faults,
        weight_sync_check_every=args.weight_sync_check_every,
    )


def _warn(message: str) -> None:
    if os.environ.get("RANK", "0") == "0":  # every rank parses the same options: say it once
        print(f"warning: {message}", file=sys.stderr, flush=True)
