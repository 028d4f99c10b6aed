"""One call from a launch command (or a Job) to a plan with its ranked fixes.

Typical use:
    result = plan_job(job_from_command(["swift", "rlhf", ...], Hardware(8, 1, 80 * GIB)), model_config=None)
    result.plan.fits, result.fixes[0].flag
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from grpo_doctor.plan.estimate import Plan, estimate
from grpo_doctor.plan.fixes import Fix, rank_fixes
from grpo_doctor.plan.job import Job
from grpo_doctor.plan.known_models import is_table_source
from grpo_doctor.plan.model_shape import load_model_shape


@dataclass(frozen=True)
class PlanResult:
    plan: Plan
    fixes: list[Fix]

    @property
    def cheapest_fit(self) -> Fix | None:
        return next((f for f in self.fixes if f.fits), None)


def plan_job(job: Job, model_config: str | Path | None = None) -> PlanResult:
    shape = load_model_shape(job.model, model_config)
    if is_table_source(shape.source):  # no config.json here: say whose architecture is planned
        job = job.assume(f"architecture from {shape.source}: no config.json of yours was read (a local path, the "
                         "Hugging Face cache or --model-config wins)")
    plan = estimate(job, shape)
    return PlanResult(plan, rank_fixes(plan))
