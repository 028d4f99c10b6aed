"""Flags of a command line, and whether the framework knows them.

`--name value`, `--name=value`, a bare switch (`--bf16`), several values (`--reward_funcs acc fmt`),
and Hydra's `key=value` / `+key=value` for verl. The real argument names of each framework and
launcher are listed in plan/flag_names/ (generated from their sources by
tools/refresh_flag_names.py): a name in none of the lists is a mistake the plan names, with the
closest real name, rather than a setting silently ignored. `-` and `_` are the same in a name, as
Hugging Face's argument parser takes both.

Typical use:
    flags, _ = parse_flags(["--use_vllm", "true", "--bf16"], "trl")
    check_known(flags, ("trl",), program="train.py")     # raises on --vllm_gpu_memory_utilisation
"""
from __future__ import annotations

import difflib
import math
from functools import cache
from importlib import resources

from grpo_doctor.plan.job import MAX_COUNT
from grpo_doctor.schema.errors import DoctorError


class PlanCommandError(DoctorError):
    hint = "fix the flag (grpo-doctor plan reads the command as the framework would), or pass --ignore-unknown-flags"


# Launcher switches that take no value: the word after one is the program, not the switch's value.
_SWITCHES = {
    "torchrun": {"standalone", "no_python", "module", "m", "run_path", "log_line_prefix_template", "virtual_local_rank"},
    "accelerate_launch": {"multi_gpu", "use_deepspeed", "use_fsdp", "use_megatron_lm", "use_xpu", "cpu", "debug",
                          "module", "m", "no_python", "quiet", "q", "same_network", "tpu", "use_cpu", "enable_cpu_affinity",
                          "deepspeed_multinode_launcher_no_ssh", "dynamo_use_fullgraph", "dynamo_use_dynamic"},
    "deepspeed_launcher": {"no_python", "module", "no_local_rank", "force_multi", "bind_cores_to_rank",
                           "no_ssh_check", "save_pid", "enable_each_rank_log", "elastic_training", "no_ssh"},
}


def normal(name: str) -> str:
    return name.lstrip("-").replace("-", "_")


def parse_flags(words: list[str] | tuple[str, ...], vocabulary: str,
                stop_at_positional: bool = False) -> tuple[dict[str, str | None], int]:
    """Flags by normal name -> value (None for a bare switch; several values joined by spaces), and
    how many words were read. With `stop_at_positional`, reading stops at the first word that is
    neither a flag nor a flag's value (a launcher's program)."""
    switches = _SWITCHES.get(vocabulary, set())
    flags: dict[str, str | None] = {}
    i = 0
    while i < len(words):
        word = words[i]
        if not word.startswith("-") or word in ("-", "--"):
            if stop_at_positional:
                break
            i += 1
            continue
        name, eq, value = word.partition("=")
        key = normal(name)
        i += 1
        if eq:
            flags[key] = value
            continue
        values = []
        if key not in switches:
            while i < len(words) and not _is_flag(words[i]):
                values.append(words[i])
                i += 1
                if stop_at_positional:
                    break  # a launcher flag takes one value; the next word is the program
        flags[key] = " ".join(values) if values else None
    return flags, i


def _is_flag(word: str) -> bool:
    if not word.startswith("-") or word == "-":
        return False
    try:  # negative numbers are values
        float(word)
        return False
    except ValueError:
        return True


def check_known(flags: dict[str, str | None], vocabularies: tuple[str, ...], program: str) -> None:
    """Every flag must be a real argument of one of `vocabularies` (plan/flag_names/<name>.txt)."""
    known: set[str] = set()
    for vocabulary in vocabularies:
        known |= known_names(vocabulary)
    if not known:
        return
    for name in flags:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
            suggestion = f" (did you mean --{close[0]}?)" if close else ""
            raise PlanCommandError(f"unknown flag --{name} for {program}{suggestion}")


@cache
def known_names(vocabulary: str) -> frozenset[str]:
    """Names in plan/flag_names/<vocabulary>.txt (normalised); empty when the list is absent."""
    try:
        text = resources.files("grpo_doctor.plan").joinpath("flag_names", f"{vocabulary}.txt").read_text("utf-8")
    except (FileNotFoundError, OSError):
        return frozenset()
    return frozenset(normal(line.strip()) for line in text.splitlines() if line.strip() and not line.startswith("#"))


def as_bool(value: str | None, default: bool = True) -> bool:
    """A switch's value: bare (`--bf16`) is true; true/false/1/0/yes/no in any case."""
    if value is None:
        return default
    text = value.strip().lower()
    if text in ("true", "1", "yes", "y", "on"):
        return True
    if text in ("false", "0", "no", "n", "off", "none", "null"):
        return False
    raise PlanCommandError(f"{value!r} is not true or false")


def as_number(value: str | None, name: str, kind: type = int):
    if value is None:
        raise PlanCommandError(f"--{name} needs a value")
    try:
        number = float(value)
    except ValueError:
        raise PlanCommandError(f"--{name} {value!r} is not a number") from None
    if not math.isfinite(number):
        raise PlanCommandError(f"--{name} {value!r} is not a finite number")
    if kind is not int:
        return kind(number)
    if not number.is_integer():
        raise PlanCommandError(f"--{name} {value!r} is not a whole number")
    if abs(number) > MAX_COUNT:
        raise PlanCommandError(f"--{name} {value!r} is beyond any job (at most {MAX_COUNT:.0e})")
    return int(number)


# Counts a framework refuses below 1, checked wherever they appear (the plan may not read them all,
# but a job that cannot start has no plan): TRL, ms-swift, OpenRLHF, verl, the reference trainer.
POSITIVE_COUNTS = frozenset({
    "num_generations", "per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps",
    "num_iterations", "generation_batch_size", "steps_per_generation", "max_completion_length", "max_prompt_length",
    "n_samples_per_prompt", "micro_train_batch_size", "micro_rollout_batch_size", "train_batch_size",
    "rollout_batch_size", "prompt_max_len", "generate_max_len", "per_device_batch", "max_new_tokens",
    "actor_rollout_ref.rollout.n", "data.train_batch_size", "data.max_prompt_length", "data.max_response_length",
    "actor_rollout_ref.actor.ppo_mini_batch_size", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
})


def check_counts(flags: dict[str, str | None]) -> None:
    """Each count of POSITIVE_COUNTS given: a whole number from 1 to MAX_COUNT (None and null: unset)."""
    for name, value in flags.items():
        if name in POSITIVE_COUNTS and value not in (None, "null", "None"):
            if as_number(value, name) < 1:
                raise PlanCommandError(f"--{name} {value!r}: must be a whole number, at least 1")
