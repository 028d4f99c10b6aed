"""The memory plan beside a CUDA OOM: what `grpo-doctor plan` says of the run's own command.

watch's plan.json (made at start on the training machine, with its GPUs and model config) is
used when there; else the command run.json records is planned here with the launch variables watch
recorded beside it (NPROC_PER_NODE, NNODES, ...) and the GPU size the OOM message gives. No plan (no command, a model config not on this machine) is no quote, never an error.

Typical use:
    quote = plan_for_oom(evidence, total_bytes=85_198_045_184)
    quote["verdict"], quote["fix"]
"""
from __future__ import annotations

from typing import Any

from grpo_doctor.plan.commands import job_from_command, recognised
from grpo_doctor.plan.commands.common import Hardware
from grpo_doctor.plan.make import plan_job
from grpo_doctor.plan.render import plan_dict
from grpo_doctor.schema.errors import DoctorError
from grpo_doctor.schema.human_text import format_bytes


def plan_for_oom(memory_plans: dict[str, dict], command: tuple[str, ...], total_bytes: int | None,
                 launch_env: dict[str, str] | None = None) -> dict[str, Any] | None:
    if memory_plans:
        host, data = sorted(memory_plans.items())[0]
        return _quote(data, f"watch's plan at start ({host})")
    if not command or not total_bytes or not recognised(command):
        return None
    try:
        job = job_from_command(command, Hardware(None, None, int(total_bytes), strict_flags=False),
                               env=dict(launch_env or {}))
        result = plan_job(job)
    except DoctorError:  # no config.json on this machine, a command the plan cannot read: no quote
        return None
    except Exception:  # the quote is an extra: a planner bug must not cost the user the OOM finding
        return None
    return _quote(plan_dict(result.plan, result.fixes), "planned from run.json's command with the OOM's GPU size")


def _quote(data: dict, source: str) -> dict[str, Any]:
    fix = next((f for f in data.get("fixes", []) if f.get("fits")), None)
    worst = data.get("worst_gpu") or {}
    return {
        "source": source, "fits": data["fits"], "verdict": data["verdict"],
        "worst_gpus": worst.get("gpus"), "worst_peak_bytes": worst.get("peak_bytes"),
        "fix": fix.get("flag") if fix else None, "fix_frees_bytes": fix.get("frees_bytes") if fix else None,
        "fix_speed_cost": fix.get("speed_cost") if fix else None,
    }


def plan_hint(quote: dict[str, Any]) -> str:
    text = f"The memory plan for this command ({quote['source']}): {quote['verdict']}."
    if quote.get("fix"):
        text += (f" Cheapest change that fits: {quote['fix']} (frees {format_bytes(quote['fix_frees_bytes'] or 0)}; "
                 f"speed cost: {quote['fix_speed_cost']}). `grpo-doctor plan -- COMMAND` shows every GPU and phase.")
    return text
