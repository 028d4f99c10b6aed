"""The step metrics as the degenerate-rollout rules read them: canonical names, one series per source.

`ev.steps` holds event-log rows (source "grpo-doctor", the trainer's own metric names, one row per
rank) and framework-log rows (source "trl" / "ms-swift", already renamed, written by rank 0).
Rules judge each source on its own: a run passed both as a run directory and as TRL's output
directory is judged twice rather than mixed. Within a source a step's value is the median over
ranks; GRPO's reward statistics are global, so ranks agree on them anyway.

Typical use:
    for source, steps in step_series(evidence).items():     # steps: indexed by step, canonical columns
        for first, last, n in consecutive_runs(steps["frac_reward_zero_std"] >= 1.0):
            ...
"""
from __future__ import annotations

import math
import re

import pandas as pd

from grpo_doctor.analysis.load import Evidence
from grpo_doctor.analysis.metric_logs import SWIFT
from grpo_doctor.analysis.metric_names import canonical_frame
from grpo_doctor.analysis.rollout_tables import EVENT_LOG_SOURCE

_BETA_ARG = re.compile(r"^--beta(?:=(.+))?$")


def rank_metrics(ev: Evidence) -> pd.DataFrame:
    """One row per source, rank and step with the canonical metrics (metric_names.py)."""
    steps = ev.steps if "source" in ev.steps.columns else ev.steps.assign(source=EVENT_LOG_SOURCE)
    if steps.empty or "step" not in steps.columns:
        return pd.DataFrame(columns=["source", "rank", "step"])
    parts = []
    for source, rows in steps.groupby("source", sort=False):
        group_mean = source == SWIFT or (source == EVENT_LOG_SOURCE and _launched_by_swift(ev))
        parts.append(canonical_frame(rows, reward_std_is="group_mean" if group_mean else "batch"))
    out = pd.concat(parts, ignore_index=True)
    return out[out["step"].notna()].astype({"step": int})


def step_series(ev: Evidence) -> dict[str, pd.DataFrame]:
    """{source: canonical metrics indexed by step (ascending), the median over ranks}.

    Nine rules and the report ask for this; on 64 ranks x 2,000 steps it takes a quarter of a
    second, so the last answer is kept while the evidence and its steps table stay the same objects.
    The dict is a copy (callers add to it); the frames are shared and must not be changed in place."""
    global _last_series
    if _last_series is not None and _last_series[0] is ev and _last_series[1] is ev.steps:
        return dict(_last_series[2])
    table = rank_metrics(ev)
    out = {}
    for source, rows in table.groupby("source", sort=False):
        numeric = rows.drop(columns=[c for c in ("source", "rank", "host", "t") if c in rows.columns])
        out[str(source)] = numeric.groupby("step").median().sort_index()
    _last_series = (ev, ev.steps, out)
    return dict(out)


_last_series: tuple[Evidence, pd.DataFrame, dict[str, pd.DataFrame]] | None = None


def column(steps: pd.DataFrame, name: str) -> pd.Series | None:
    """The named metric's logged values (NaN rows dropped), or None when this source never logged it."""
    if name not in steps.columns:
        return None
    values = steps[name].dropna()
    return values if not values.empty else None


def consecutive_runs(mask: pd.Series) -> list[tuple[int, int, int]]:
    """(first step, last step, number of steps) of each run of True in consecutive *logged* steps.

    Logged, not numbered: with logging_steps = 10 the steps 10, 20, 30 are consecutive."""
    runs, start, count, previous = [], None, 0, None
    for step, flag in mask.items():
        if flag:
            start = step if start is None else start
            count += 1
        elif start is not None:
            runs.append((int(start), int(previous), count))
            start, count = None, 0
        previous = step
    if start is not None:
        runs.append((int(start), int(previous), count))
    return runs


def longest_run(mask: pd.Series, min_steps: int) -> tuple[int, int, int] | None:
    """The longest of `consecutive_runs(mask)` if it lasts at least `min_steps`, else None."""
    runs = [r for r in consecutive_runs(mask) if r[2] >= min_steps]
    return max(runs, key=lambda r: r[2]) if runs else None


def beta_of(ev: Evidence, source: str) -> float | None:
    """The KL coefficient, where the run states it: ms-swift's args.json, `--beta` on the command line
    (reference trainer, TRL and ms-swift scripts), or a logged `beta` metric. None: not stated."""
    if source != EVENT_LOG_SOURCE:
        for log in ev.metric_logs:
            if log.source == source and isinstance(log.args.get("beta"), (int, float)):
                return float(log.args["beta"])
        return None
    for header in ev.headers.values():
        argv = list(header.argv or [])
        for i, arg in enumerate(argv):
            match = _BETA_ARG.match(arg)
            if match:
                value = match.group(1) if match.group(1) is not None else (argv[i + 1] if i + 1 < len(argv) else "")
                try:
                    return float(value)
                except ValueError:
                    return None
    if "beta" in ev.steps.columns:
        values = pd.to_numeric(ev.steps["beta"], errors="coerce").dropna()
        if not values.empty:
            return float(values.iloc[-1])
    return None


def finite(value: float | None) -> float | None:
    """A value for evidence: rounded, and None for NaN / inf (findings.json stays plain JSON)."""
    if value is None or not math.isfinite(value):
        return None
    return round(float(value), 6)


def _launched_by_swift(ev: Evidence) -> bool:
    """ms-swift's integration logs ms-swift's own metrics, whose reward_std is the mean of group stds."""
    return any("swift" in " ".join(h.argv[:2]).lower() for h in ev.headers.values() if h.argv)
