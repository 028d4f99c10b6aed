"""`grpo-doctor plan [options] -- COMMAND...`: will this GRPO job fit in GPU memory, and what to change if not.

COMMAND is the launch command as you would run it (ms-swift `swift rlhf --rlhf_type grpo ...` with
NPROC_PER_NODE / NNODES from the environment or the command line, a TRL script under accelerate
or torchrun, `python -m verl.trainer.main_ppo key=value ...`, `python -m openrlhf.cli.train_ppo_ray ...`).
Nothing is run and nothing is downloaded: the model's config.json comes from a local path, the
Hugging Face cache or --model-config. GPUs come from NVML when this machine has them, else from
--gpus / --gpu-memory. Prints, per GPU and phase, what lives there, the verdict, and the changes
that free enough, cheapest first, as your framework's flags. docs/plan.md explains the model.

Typical use:
    NPROC_PER_NODE=8 grpo-doctor plan --gpu-memory 80GiB -- swift rlhf --rlhf_type grpo --model Qwen/Qwen2.5-7B ...
    grpo-doctor plan --gpus 8 --gpu-memory 80GiB --json -- accelerate launch grpo.py --config grpo.yaml
    grpo-doctor plan --model Qwen/Qwen2.5-7B-Instruct --gpu-memory 80GiB --set zero_stage=3 --set micro_batch=2
"""
from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

from grpo_doctor.cli.errors import UserError
from grpo_doctor.logs.terminal_text import terminal_safe
from grpo_doctor.plan.commands import job_from_command
from grpo_doctor.plan.commands.common import Hardware
from grpo_doctor.plan.job import GIB, Job
from grpo_doctor.plan.local_gpus import local_gpus
from grpo_doctor.plan.make import PlanResult, plan_job
from grpo_doctor.plan.render import format_plan, plan_dict
from grpo_doctor.plan.sizes import parse_size
from grpo_doctor.schema.safe_write import make_dirs, write_file

EXIT_HELP = """\
exit status: 0 the job fits; 1 it does not fit (or vLLM would refuse to start); 2 bad input (an
unknown framework flag, a model config that cannot be read, an impossible setting)."""



def add_parser(sub) -> None:
    p = sub.add_parser("plan", help="will a GRPO job fit in GPU memory, and the cheapest change if not",
                       description=__doc__.split("\n\nTypical use")[0], epilog=EXIT_HELP)
    p.add_argument("--gpus", type=int, metavar="N", help="GPUs per node (default: NVML's count, else "
                   "CUDA_VISIBLE_DEVICES, else 8)")
    p.add_argument("--nodes", type=int, metavar="N", help="nodes (default: the command's NNODES / --nnodes, else 1)")
    p.add_argument("--gpu-memory", metavar="SIZE", help="memory of one GPU, e.g. 80GiB (GB is read as GiB, as GPU "
                   "vendors mean it); default: NVML's total for GPU 0")
    p.add_argument("--model", help="model (hub id or local path) instead of the command's")
    p.add_argument("--model-config", metavar="PATH", type=Path, help="the model's config.json (or its directory)")
    p.add_argument("--set", action="append", default=[], metavar="SETTING=VALUE",
                   help="override one of the plan's settings after reading the command, e.g. micro_batch=2, "
                        "zero_stage=3, engine_memory_fraction=0.5 (grpo_doctor/plan/job.py lists them)")
    p.add_argument("--ignore-unknown-flags", action="store_true",
                   help="read the command even when a flag is not one of the framework's (a script's own flags)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--out", metavar="DIR", type=Path, help="also write plan.json into DIR (created if needed)")
    p.add_argument("launch", nargs="*", metavar="COMMAND", help="the launch command, after --")
    p.set_defaults(run=run)


def run(args) -> int:
    result = make_plan(args)
    data = plan_dict(result.plan, result.fixes)
    if args.out:  # atomically, never over a device or a FIFO (schema/safe_write.py: UnwritableFile, one line)
        make_dirs(args.out, hint="give --out a directory you can write")
        write_file(args.out / "plan.json", json.dumps(data, indent=2) + "\n", hint="give --out a directory you can write")
    # Names from the command and the model's config reach the terminal: escape sequences stay text.
    text = json.dumps(data, indent=2) if args.json else format_plan(result.plan, result.fixes)
    print("\n".join(terminal_safe(line) for line in text.splitlines()))
    return 0 if result.plan.fits else 1


def make_plan(args) -> PlanResult:
    local_count, local_total = local_gpus()
    memory, memory_note = _gpu_memory(args.gpu_memory, local_total)
    gpus = args.gpus if args.gpus is not None else local_count
    hw = Hardware(gpus_per_node=gpus, nodes=args.nodes, gpu_memory_bytes=memory, model=args.model,
                  strict_flags=not args.ignore_unknown_flags)
    if args.launch:
        job = job_from_command(args.launch, hw)
    elif args.model:
        job = Job(framework="flags", model=args.model, gpu_memory_bytes=memory, gpus_per_node=gpus or 8,
                  nodes=args.nodes or 1).assume(
            "no launch command: a generic job with the plan's defaults (full training, no DeepSpeed, micro-batch 1, "
            "512-token prompts and completions, vLLM colocated at 0.9); change them with --set")
    else:
        raise UserError("nothing to plan: give the launch command after --, or --model with --set SETTING=VALUE",
                        "e.g. grpo-doctor plan --gpu-memory 80GiB -- swift rlhf --rlhf_type grpo --model ...")
    job = _apply_sets(job, args.set)
    if memory_note:
        job = job.assume(memory_note)
    return plan_job(job, args.model_config)


def _gpu_memory(text: str | None, total: int | None) -> tuple[int, str | None]:
    if text:
        return parse_size(text), None
    if total is None:
        raise UserError("no GPU memory size: NVML sees no GPU on this machine and --gpu-memory is not given",
                        "pass the training GPUs' memory, e.g. --gpu-memory 80GiB --gpus 8")
    return total, f"GPU memory {total / GIB:.2f} GiB per GPU (NVML, GPU 0 of this machine)"


def _apply_sets(job: Job, sets: list[str]) -> Job:
    types = {f.name: f.type for f in fields(Job)}
    changes = {}
    for item in sets:
        name, eq, value = item.partition("=")
        name = name.strip()
        if not eq or name not in types or name in ("assumptions", "spelling", "command"):
            settable = ", ".join(n for n in types if n not in ("assumptions", "spelling", "command", "framework"))
            raise UserError(f"--set {item!r}: not SETTING=VALUE with a known setting", f"settings: {settable}")
        current = getattr(job, name)
        changes[name] = _typed(value.strip(), current, types[name], item)
    return job.with_changes(**changes)


def _typed(value: str, current, type_name: str, item: str):
    try:
        if isinstance(current, bool) or "bool" in str(type_name):
            if value.lower() in ("true", "1", "yes"):
                return True
            if value.lower() in ("false", "0", "no"):
                return False
            raise ValueError(value)
        if "int" in str(type_name) and "." not in value and "e" not in value.lower():
            return int(value)
        if "float" in str(type_name):
            return float(value)
        if "int" in str(type_name):
            number = float(value)  # 1e3 and 2.0 are whole numbers; 2.5, inf and nan are no count
            if not number.is_integer():
                raise ValueError(value)
            return int(number)
        return value
    except (ValueError, OverflowError):
        raise UserError(f"--set {item!r}: {value!r} is not a {type_name}") from None
