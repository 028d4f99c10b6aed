"""Launch commands read into a Job: one reader per framework, chosen by the program the command runs.

Typical use:
    job = job_from_command(["swift", "rlhf", "--rlhf_type", "grpo", "--model", "Qwen/Qwen2.5-7B"], hardware)
"""
from __future__ import annotations

import shlex
from pathlib import Path

from grpo_doctor.plan.commands.argv import SplitCommand, split_command
from grpo_doctor.plan.commands.common import Hardware
from grpo_doctor.plan.commands.flags import PlanCommandError
from grpo_doctor.plan.commands.openrlhf import read_openrlhf
from grpo_doctor.plan.commands.reference_trainer import read_reference_trainer
from grpo_doctor.plan.commands.swift import read_swift
from grpo_doctor.plan.commands.trl import read_trl
from grpo_doctor.plan.commands.verl import read_verl
from grpo_doctor.plan.job import Job

# The environment the command readers look at (ms-swift's launch variables, the visible GPUs, the allocator).
PLAN_ENV = ("NPROC_PER_NODE", "NNODES", "CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES", "PYTORCH_CUDA_ALLOC_CONF")
FRAMEWORKS = "ms-swift (swift rlhf), TRL scripts (accelerate launch / torchrun script.py), verl.trainer.main_ppo, " \
             "openrlhf.cli.train_ppo_ray, grpo_doctor_trainer.train"


def job_from_command(argv: str | list[str] | tuple[str, ...], hw: Hardware, env: dict[str, str] | None = None,
                     base_dir: Path | None = None) -> Job:
    cmd = split_command(argv, env)
    reader = _reader_for(cmd)
    if reader is None:
        if not cmd.program:
            raise PlanCommandError("no command after --: give the launch command, e.g. grpo-doctor plan -- swift rlhf ...")
        raise PlanCommandError(f"cannot tell which framework {cmd.program!r} is; the plan reads {FRAMEWORKS}")
    job = read_trl(cmd, hw, base_dir) if reader is read_trl else reader(cmd, hw)
    return job.with_changes(command=tuple(shlex.split(argv) if isinstance(argv, str) else argv))


def recognised(argv: list[str] | tuple[str, ...]) -> bool:
    """Whether `job_from_command` knows the command's framework (watch plans only those)."""
    try:
        return _reader_for(split_command(argv, {})) is not None
    except PlanCommandError:
        return False


def _reader_for(cmd: SplitCommand):
    program = cmd.program
    if program.startswith("swift "):
        return read_swift
    if program.startswith("verl.trainer"):
        return read_verl
    if program.startswith("openrlhf.cli.train_ppo"):
        return read_openrlhf
    if program.startswith("grpo_doctor_trainer"):
        return read_reference_trainer
    if program.endswith(".py") or (cmd.launcher == "accelerate" and program) or program == "trl":
        return read_trl
    return None
