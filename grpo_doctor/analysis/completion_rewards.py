"""Which columns of a TRL / ms-swift completions file are rewards, with which weights, and their total.

A completion's reward is the trainers' weighted nansum of the reward functions' columns (None where
no function scored it). The functions are those the step log beside the file names
(`rewards/<f>/mean` in trainer_state.json or logging.jsonl), else the columns between completion and
advantage(s); never grpo-doctor's zero-weight probe (always NaN). Weights: ms-swift's
`reward_weights` (args.json, in the order of `reward_funcs`); TRL keeps its own only in
training_args.bin (a pickle, not read): equal weights.

Typical use:
    functions = reward_functions(args, columns, step_log, warnings, "out/completions.jsonl")
    total = weighted_sum(row, functions)
"""
from __future__ import annotations

import functools
import math
import re
from pathlib import Path
from typing import Any

from grpo_doctor.schema.safe_read import loads_bounded, read_json, read_text

MAX_STEP_LOG_BYTES = 512 * 2**20  # the step log beside the completions is read whole, so capped

# grpo-doctor's rollout probe as a reward function (rank/integrations: TRL's name, ms-swift's class): always NaN
PROBE_COLUMNS = ("grpo_doctor_rollouts", "GrpoDoctorRollouts")
_LOGGED_REWARD = re.compile(r"^rewards/(.+?)(?:/mean|/std)?$")  # ms-swift < 3.4 logged rewards/<f> alone


def reward_functions(args: dict[str, Any], columns: list[str], step_log: Path | None, warnings: list[str],
                     where: str) -> dict[str, float]:
    """{reward function column: weight}, in the file's order (the trainers' order of functions and weights)."""
    logged = _logged_reward_functions(step_log)
    names = [c for c in columns if c in logged]
    if not names:  # TRL and ms-swift write the functions' columns right after the completion, then advantage(s)
        start = columns.index("completion") + 1
        names = columns[start:next((i for i, c in enumerate(columns) if c in ("advantage", "advantages")),
                                   len(columns))]
    weights = _fitting_weights(args, names, warnings, where)
    if weights is None:
        weights = [1.0] * len(names)
    elif len(weights) < len(names):  # the probe's weight was left out with its function (_fitting_weights)
        names = [name for name in names if name not in PROBE_COLUMNS]
    return {name: float(w) for name, w in zip(names, weights, strict=True) if name not in PROBE_COLUMNS}


def weighted_sum(row: dict[str, Any], functions: dict[str, float]) -> float | None:
    """The trainers' total: a nansum (a function that did not score the sample counts for nothing),
    None where no function scored it (TRL's unscorable row)."""
    scored = [(w, v) for name, w in functions.items() if (v := number(row.get(name))) is not None]
    return math.fsum(w * v for w, v in scored) if scored else None


def number(value: Any) -> float | None:
    """A finite-or-inf float from a JSON / parquet cell; None for NaN, text, bools and missing cells."""
    if hasattr(value, "item"):  # a numpy scalar from parquet
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        return None
    return float(value)


def _fitting_weights(args: dict[str, Any], names: list[str], warnings: list[str], where: str) -> list | None:
    """ms-swift's reward_weights for these columns, None (equal weights) where it has none that fit."""
    weights, functions = args.get("reward_weights"), args.get("reward_funcs")
    if weights is None:
        return None
    if isinstance(weights, list) and all(number(w) is not None for w in weights):
        if len(weights) == len(names):
            return weights
        if isinstance(functions, list) and len(functions) == len(weights):
            # ms-swift 4.6 logs no rewards/GrpoDoctorRollouts/* (always NaN), so the probe may have no column
            kept = [w for f, w in zip(functions, weights, strict=True) if f not in PROBE_COLUMNS]
            if len(kept) == len([name for name in names if name not in PROBE_COLUMNS]):
                return kept
    warnings.append(f"{where}: reward_weights {weights!r} do not fit the reward columns "
                    f"{', '.join(names)}; completion rewards are summed with equal weights")
    return None


def _logged_reward_functions(step_log: Path | None) -> frozenset[str]:
    """The functions the step log names, empty where there is none."""
    try:
        return _reward_functions_in(step_log, step_log.stat().st_mtime_ns) if step_log is not None else frozenset()
    except (OSError, ValueError):
        return frozenset()


@functools.lru_cache(maxsize=4)
def _reward_functions_in(log: Path, mtime_ns: int) -> frozenset[str]:
    """Read once per step log (and version): TRL writes one parquet file per logging step beside it."""
    if log.name == "logging.jsonl":
        entries = [_json_or_none(line) for line in read_text(log, cap=MAX_STEP_LOG_BYTES, errors="replace").splitlines()]
    else:
        state = read_json(log, cap=MAX_STEP_LOG_BYTES, errors="replace")
        entries = (state.get("log_history") or []) if isinstance(state, dict) else []
    return frozenset(m.group(1) for e in entries if isinstance(e, dict) for k in e
                     if (m := _LOGGED_REWARD.match(str(k))))


def _json_or_none(line: str) -> Any:
    try:
        return loads_bounded(line)
    except ValueError:
        return None
