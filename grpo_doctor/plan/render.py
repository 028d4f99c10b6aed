"""The plan as the user reads it: a terminal table per GPU row, and the `--json` object.

Typical use:
    print(format_plan(plan, fixes))
    json.dumps(plan_dict(plan, fixes))
"""
from __future__ import annotations

from grpo_doctor.plan.estimate import PHASES, GpuPlan, Plan
from grpo_doctor.plan.fixes import Fix
from grpo_doctor.plan.job import GIB
from grpo_doctor.plan.trainer_memory import host_bytes_per_node
from grpo_doctor.schema.human_text import format_bytes

JSON_VERSION = 1


def gpu_label(gpus: tuple[int, ...]) -> str:
    if not gpus:
        return "GPUs"
    if len(gpus) == 1:
        return f"GPU {gpus[0]}"
    if list(gpus) == list(range(gpus[0], gpus[-1] + 1)):
        return f"GPUs {gpus[0]}-{gpus[-1]}"
    return "GPUs " + ",".join(map(str, gpus))


def verdict_line(plan: Plan) -> str:
    worst = plan.worst
    where = f"{gpu_label(worst.gpus)} ({worst.role})" + (" of every node" if plan.job.nodes > 1 else "")
    if plan.problems:
        return "DOES NOT START: " + plan.problems[0]
    if worst.free_bytes >= 0:
        return (f"FITS: the fullest GPU, {where}, peaks at {format_bytes(worst.peak_bytes)} of {format_bytes(worst.capacity_bytes)} "
                f"during {worst.peak_phase} ({format_bytes(worst.free_bytes)} to spare)")
    return (f"DOES NOT FIT: {where} needs {format_bytes(worst.peak_bytes)} of {format_bytes(worst.capacity_bytes)} during "
            f"{worst.peak_phase}: {format_bytes(-worst.free_bytes)} short")


def format_plan(plan: Plan, fixes: list[Fix]) -> str:
    job, shape = plan.job, plan.shape
    lines = [f"grpo-doctor plan: {job.framework}, {shape.name} ({shape.total_params / 1e9:.2f}B parameters), "
             f"{job.nodes} node(s) x {job.gpus_per_node} GPUs of {format_bytes(job.gpu_memory_bytes)}, "
             f"{job.world_size} training rank(s)", ""]
    for gpu in plan.gpus:
        lines += _gpu_table(gpu)
        lines.append("")
    lines.append(verdict_line(plan))
    if plan.engine is not None:
        lines.append(f"vLLM KV cache: {format_bytes(max(0, plan.engine.kv_cache_bytes))} per GPU = {plan.engine.kv_tokens:,} tokens "
                     f"(max_model_len {job.max_model_len:,})")
    host = host_bytes_per_node(shape, job)
    if host:
        lines.append(f"host memory for offloaded states: {format_bytes(host)} per node (DeepSpeed's own estimate adds 1.5x "
                     "for pinned buffers)")
    useful = [f for f in fixes if f.frees_bytes > 0 or f.fits]
    if useful and not plan.fits:
        lines += ["", "cheapest changes first (what each frees on the fullest GPU; speed cost):"]
        for fix in useful[:8]:
            mark = "fits" if fix.fits else "not enough alone"
            lines.append(f"  {fix.flag}\n      frees {format_bytes(fix.frees_bytes)} -> {mark}; cost: {fix.cost}; {fix.why}")
    if job.assumptions:
        lines += ["", "assumed (say otherwise with the framework's flag):"]
        lines += [f"  - {text}" for text in job.assumptions]
    return "\n".join(lines)


def _gpu_table(gpu: GpuPlan) -> list[str]:
    names = list(dict.fromkeys(name for phase in PHASES for name in gpu.phases[phase]))
    width = max(len(n) for n in names + ["total"]) + 2
    head = f"{gpu_label(gpu.gpus)}: {gpu.role}".ljust(width) + "".join(p.rjust(12) for p in PHASES)
    width = max(width, len(head) - 12 * len(PHASES))
    rows = [head]
    for name in names:
        rows.append(name.ljust(width) + "".join(_cell(gpu.phases[p].get(name)) for p in PHASES))
    rows.append("total".ljust(width) + "".join(_cell(gpu.phase_bytes(p), peak=p == gpu.peak_phase) for p in PHASES))
    return rows


def _cell(value: int | None, peak: bool = False) -> str:
    if not value:
        return "-".rjust(12)
    return (f"{value / GIB:.2f}" + ("*" if peak else "")).rjust(12)


def plan_dict(plan: Plan, fixes: list[Fix]) -> dict:
    job, shape = plan.job, plan.shape
    worst = plan.worst
    return {
        "version": JSON_VERSION,
        "fits": plan.fits,
        "verdict": verdict_line(plan),
        "problems": list(plan.problems),
        "framework": job.framework,
        "model": {"name": shape.name, "config": shape.source, "params": shape.total_params,
                  "trainable_params": shape.total_params if job.train_type == "full" else shape.lora_params(job.lora_rank)},
        "nodes": job.nodes, "gpus_per_node": job.gpus_per_node, "gpu_memory_bytes": job.gpu_memory_bytes,
        "worst_gpu": {"gpus": list(worst.gpus), "role": worst.role, "peak_phase": worst.peak_phase,
                      "peak_bytes": worst.peak_bytes, "free_bytes": worst.free_bytes},
        "gpus": [{"gpus": list(g.gpus), "role": g.role, "peak_phase": g.peak_phase, "peak_bytes": g.peak_bytes,
                  "free_bytes": g.free_bytes, "capacity_bytes": g.capacity_bytes,
                  "phases": {p: {"total_bytes": g.phase_bytes(p), "parts": dict(g.phases[p])} for p in PHASES}}
                 for g in plan.gpus],
        "engine": None if plan.engine is None else {
            "budget_bytes": plan.engine.budget_bytes, "weights_bytes": plan.engine.weights_bytes,
            "kv_cache_bytes": plan.engine.kv_cache_bytes, "kv_tokens": plan.engine.kv_tokens,
            "max_model_len": job.max_model_len},
        "host_offload_bytes_per_node": host_bytes_per_node(shape, job),
        "fixes": [f.to_dict() for f in fixes],
        "assumptions": list(job.assumptions),
        "command": list(job.command),
    }
