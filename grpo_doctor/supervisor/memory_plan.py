"""watch's memory plan at start: before the job's first step, say when it will not fit in GPU memory.

The plan (grpo-doctor plan) runs on the launch command when it names a framework the planner reads,
with this machine's GPU memory from NVML or watch's --gpu-memory (with neither there is nothing to
plan against, and it says nothing). It never delays, ends or changes the job: anything it cannot do
(a model config not on this machine, a command it cannot read) is one line saying so, and the job
starts as it would have. The verdict goes into
supervisor/HOST/plan.json, which `report` quotes beside a CUDA OOM.

Typical use:
    lines, data = plan_at_start(["swift", "rlhf", ...], dict(os.environ), gpu_memory_bytes=None)
"""
from __future__ import annotations

from grpo_doctor.plan.commands import job_from_command, recognised
from grpo_doctor.plan.commands.common import Hardware
from grpo_doctor.plan.local_gpus import local_gpus
from grpo_doctor.plan.make import plan_job
from grpo_doctor.plan.render import plan_dict, verdict_line
from grpo_doctor.schema.errors import DoctorError
from grpo_doctor.schema.human_text import format_bytes


def plan_at_start(command: list[str], env: dict[str, str],
                  gpu_memory_bytes: int | None) -> tuple[list[str], dict | None]:
    """Lines for the console, and the plan's JSON (None when no plan was made)."""
    if not recognised(command):
        return [], None
    gpus, local_total = local_gpus()
    memory = gpu_memory_bytes if gpu_memory_bytes is not None else local_total
    if memory is None:  # no GPU here and none named: nothing to plan against, and nothing to say
        return [], None
    try:
        job = job_from_command(command, Hardware(gpus_per_node=gpus, nodes=None, gpu_memory_bytes=memory,
                                                 strict_flags=False), env)
        result = plan_job(job)
    except DoctorError as exc:
        if job_model_is_builtin(command):
            return [], None
        return [f"memory plan skipped: {exc}"], None
    except Exception as exc:  # the plan must never stop the job from starting
        return [f"memory plan skipped: internal error {type(exc).__name__}: {exc}"], None
    data = plan_dict(result.plan, result.fixes)
    if result.plan.fits:
        worst = result.plan.worst
        return [f"memory plan: fits ({format_bytes(worst.peak_bytes)} peak of {format_bytes(worst.capacity_bytes)} per GPU)"], data
    lines = [f"WARNING memory plan: {verdict_line(result.plan)}"]
    fix = result.cheapest_fit
    if fix is not None:
        lines.append(f"  cheapest change that fits: {fix.flag} (frees {format_bytes(fix.frees_bytes)}; speed cost: {fix.cost})")
    lines.append("  the job starts anyway; `grpo-doctor plan -- COMMAND` shows the whole table")
    return lines, data


def job_model_is_builtin(command: list[str]) -> bool:
    """The reference trainer's default model is built in code: there is no config.json to plan from."""
    return any("grpo_doctor_trainer" in word for word in command) and "--model" not in command
