"""Zero-code instrumentation: phases and step heartbeats for a job whose code never imports grpo_doctor.

`grpo-doctor watch --instrument` puts `sitedir/` (its `sitecustomize.py`) first on the job's
PYTHONPATH and sets GRPO_DOCTOR_INSTRUMENT=1; every Python process of the job (torchrun workers,
Ray workers, their children) inherits both. That sitecustomize installs a post-import hook and
nothing else; when one of the modules in `TARGETS` is first imported, `patch_module` wraps it:
  - torch.distributed: the collectives become phases named after the op (`collectives.py`),
    init_process_group starts this process's recorder under its rank (`state.py`), and the groups made
    by new_group / new_subgroups / init_device_mesh are recorded as the job's layout (`groups.py`);
  - torch.optim.optimizer: every optimizer step is a `step()` heartbeat (`optimizer.py`);
  - transformers / vLLM / SGLang generate: a phase "rollout" (`rollout.py`).
A wrapper calls the original with the same arguments and returns its result; a failure of ours
turns instrumentation off for the process with one line on stderr, and the original still runs.
Past the first calls of each op in a step, collectives are counted into one summary line (`quiet.py`).
What the job can and cannot notice is listed in docs/instrument.md ("What it changes").

Without watch:
    PYTHONPATH=$(python -m grpo_doctor.rank.auto --path):$PYTHONPATH GRPO_DOCTOR_INSTRUMENT=1 torchrun ...

Typical use (what sitecustomize does once a target module has been executed):
    from grpo_doctor.rank.auto import patch_module
    patch_module("torch.distributed", module)
"""
from __future__ import annotations

from pathlib import Path
from types import ModuleType

INSTRUMENT_ENV = "GRPO_DOCTOR_INSTRUMENT"  # sitedir/sitecustomize.py and supervisor/childenv.py spell it too
SITE_DIR = Path(__file__).resolve().parent / "sitedir"

# Module name -> what patches it. sitedir/sitecustomize.py holds the same names (it may not import this
# package: that would load grpo_doctor into every Python process, pip included).
TARGETS = {
    "torch.distributed": ("collectives", "patch"),
    "torch.optim.optimizer": ("optimizer", "patch"),
    "transformers.generation.utils": ("rollout", "patch_transformers"),
    "vllm.entrypoints.llm": ("rollout", "patch_vllm"),
    "sglang.srt.entrypoints.engine": ("rollout", "patch_sglang"),
}


def site_dir() -> Path:
    """The directory to put first on PYTHONPATH."""
    return SITE_DIR


def patch_module(name: str, module: ModuleType) -> None:
    """Wrap what `module` (just imported as `name`) offers; a failure turns instrumentation off, saying why."""
    from grpo_doctor.rank.auto import state

    if state.is_off():
        return
    try:
        part, function = TARGETS[name]
        if part == "collectives":
            from grpo_doctor.rank.auto import collectives as patcher
        elif part == "optimizer":
            from grpo_doctor.rank.auto import optimizer as patcher
        else:
            from grpo_doctor.rank.auto import rollout as patcher
        getattr(patcher, function)(module)
    except Exception as exc:  # noqa: BLE001 - ours must never break the job's import
        state.fail(f"patching {name}", exc)
