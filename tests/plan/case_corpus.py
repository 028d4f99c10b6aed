"""The real configurations of tests/data/plan/cases planned, and the plan's verdicts held against what happened.

Each case is a GRPO job reported in a public issue or doc (tests/data/plan/README.md): its command,
environment, GPUs and model, and whether it ran or ran out of memory. The plan reads the command as
written (flags it does not know are allowed: several commands were cut off in the source), with the
GPU size the source gives (the OOM message's total capacity when there is one). A case whose model
config.json is not under tests/data/plan/models cannot be planned and is listed as such.

Typical use:
    .venv/bin/python -m tests.plan.case_corpus            # the agreement table (docs/benchmarks.md)
"""
from __future__ import annotations

import json
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from grpo_doctor.plan.commands import job_from_command
from grpo_doctor.plan.commands.common import Hardware
from grpo_doctor.plan.job import GIB
from grpo_doctor.plan.make import PlanResult, plan_job
from grpo_doctor.schema.errors import DoctorError

DATA = Path(__file__).resolve().parents[1] / "data" / "plan"
CASES = DATA / "cases"
MODELS = DATA / "models"
SCORED = {"oom": False, "ran": True}  # "stall" cases are pictures, not verdicts


@dataclass(frozen=True)
class CaseResult:
    case: dict
    result: PlanResult | None
    skipped: str | None  # why the case could not be planned

    @property
    def id(self) -> str:
        return self.case["id"]

    @property
    def expected_fits(self) -> bool | None:
        return SCORED.get(self.case["outcome"])

    @property
    def agrees(self) -> bool | None:
        if self.result is None or self.expected_fits is None:
            return None
        return self.result.plan.fits == self.expected_fits


def load_cases() -> list[dict]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(CASES.glob("*.json"))]


def model_config(model: str | None) -> Path | None:
    if not model:
        return None
    path = MODELS / model.replace("/", "--") / "config.json"
    return path if path.is_file() else None


def gpu_memory_bytes(case: dict) -> int | None:
    observed = (case.get("observed") or {}).get("total_capacity_gib")
    if observed:
        return int(observed * GIB)
    return int(case["gpu_memory_gib"] * GIB) if case.get("gpu_memory_gib") else None


def run_case(case: dict) -> CaseResult:
    config = model_config(case.get("model"))
    memory = gpu_memory_bytes(case)
    if config is None:
        return CaseResult(case, None, f"no config.json for {case.get('model')}")
    if memory is None or not case.get("command"):
        return CaseResult(case, None, "no GPU size or no command in the source")
    env = {k: _expand(v, case) for k, v in (case.get("env") or {}).items()}
    env = {k: v for k, v in env.items() if "$" not in v}  # a shell variable the source never sets stays unknown
    hw = Hardware(gpus_per_node=case.get("gpus_per_node"), nodes=case.get("nodes"), gpu_memory_bytes=memory,
                  model=case.get("model"), strict_flags=False)
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        for name, text in (case.get("config_files") or {}).items():
            if re.fullmatch(r"[\w./-]+\.(ya?ml|json)", name):
                (base / name).parent.mkdir(parents=True, exist_ok=True)
                (base / name).write_text(text, encoding="utf-8")
        try:
            job = job_from_command(_expand(case["command"], case), hw, env=env, base_dir=base)
            return CaseResult(case, plan_job(job, config), None)
        except DoctorError as exc:
            return CaseResult(case, None, f"cannot plan: {exc}")


def _expand(text: str, case: dict) -> str:
    """The shell variables the source's own script sets (`shell_vars`), put in as the shell would."""
    for name, value in sorted((case.get("shell_vars") or {}).items(), key=lambda kv: -len(kv[0])):
        text = text.replace(name if name.startswith("$") else f"${{{name}}}", value)
        if not name.startswith("$"):
            text = re.sub(rf"\${name}(?![A-Za-z0-9_])", lambda _, v=value: v, text)
    return text


def agreement_table(results: list[CaseResult]) -> str:
    lines = ["| case | framework | outcome | plan | worst GPU peak / capacity | agrees |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in results:
        if r.result is None:
            lines.append(f"| {r.id} | {r.case['framework']} | {r.case['outcome']} | not planned: {r.skipped} | | |")
            continue
        plan = r.result.plan
        worst = plan.worst
        verdict = "fits" if plan.fits else ("does not start" if plan.problems else "does not fit")
        mark = {True: "yes", False: "**no**", None: "(picture)"}[r.agrees]
        lines.append(f"| {r.id} | {r.case['framework']} | {r.case['outcome']} | {verdict} | "
                     f"{worst.peak_bytes / GIB:.1f} / {worst.capacity_bytes / GIB:.1f} GiB | {mark} |")
    scored = [r for r in results if r.agrees is not None]
    agreed = sum(1 for r in scored if r.agrees)
    lines.append("")
    lines.append(f"Agreement: {agreed} of {len(scored)} planned cases with an outcome "
                 f"({100 * agreed / max(1, len(scored)):.0f} %); {len(results) - len(scored)} not scored.")
    return "\n".join(lines)


if __name__ == "__main__":
    print(agreement_table([run_case(c) for c in load_cases()]))
    sys.exit(0)
