"""The step metrics as the degenerate-rollout rules read them: canonical names, one series per source.

`run.steps` holds event-log rows (source "grpo-doctor", the trainer's own metric names, one row per
rank) and framework-log rows (source "trl" / "ms-swift", already renamed, written by rank 0).
Rules judge each source on its own: a run passed both as a run directory and as TRL's output
directory is judged twice rather than mixed. Within a source a step's value is the median over
ranks; GRPO's reward statistics are global, so ranks agree on them anyway.

The event log's metrics mean what its trainer means by them: ms-swift's `reward_std` is the mean of
the group stds (unless `--scale_rewards batch`), TRL's the batch std; TRL's `frac_reward_zero_std`
is only a batch-level flag under `--scale_rewards batch` (zero_std_shares).

Typical use:
    for source, steps in step_series(evidence).items():     # steps: indexed by step, canonical columns
        for first, last, n in consecutive_runs(steps["frac_reward_zero_std"] >= 1.0):
            ...
    zero_std_shares(evidence)["grpo-doctor"].share           # by step, 0-1: logged or from rollout records
"""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pandas as pd

from grpo_doctor.analysis.metric_logs import SWIFT
from grpo_doctor.analysis.metric_names import canonical_frame
from grpo_doctor.analysis.rollout_tables import EVENT_LOG_SOURCE
from grpo_doctor.analysis.views import RunView, loaded_run
from grpo_doctor.checks import rollout_rules
from grpo_doctor.checks.rollout_rules import unusual_gaps  # noqa: F401 - re-exported (report/plots.py)
from grpo_doctor.schema import Rollout
from grpo_doctor.schema.metric_vocab import (
    event_log_reward_std,
    launch_arg,
    zero_std_is_batch_flag,
)

if TYPE_CHECKING:
    from grpo_doctor.analysis.load import Evidence

# Where a share of zero-std groups was read (ZeroStdShare.origin)
LOGGED_SHARE = "frac_reward_zero_std"
BATCH_FLAG = "frac_reward_zero_std, batch-level (a lower bound)"
ROLLOUT_SHARE = "rollout records"


def rank_metrics(run: RunView) -> pd.DataFrame:
    """One row per source, rank and step with the canonical metrics (metric_names.py)."""
    steps = run.steps if "source" in run.steps.columns else run.steps.assign(source=EVENT_LOG_SOURCE)
    if steps.empty or "step" not in steps.columns:
        return pd.DataFrame(columns=["source", "rank", "step"])
    parts = []
    for source, rows in steps.groupby("source", sort=False):
        # metric_logs.py has already named a framework log's reward_std; the event log's is named here
        group_mean = source == SWIFT or (source == EVENT_LOG_SOURCE and event_log_reward_std(_argvs(run)) == "group_mean")
        parts.append(canonical_frame(rows, reward_std_is="group_mean" if group_mean else "batch"))
    out = pd.concat(parts, ignore_index=True)
    return out[out["step"].notna()].astype({"step": int})


def step_series(run: RunView) -> dict[str, pd.DataFrame]:
    """{source: canonical metrics indexed by step (ascending), the median over ranks}.

    Most rollout rules (directly or through zero_std_shares) and the report ask for this; on 64 ranks x 2,000 steps it takes a quarter of a
    second, so the last answer is kept while the evidence and its steps table stay the same objects.
    The dict is a copy (callers add to it); the frames are shared and must not be changed in place."""
    global _last_series
    owner = loaded_run(run)  # the Evidence behind each rule's view: one answer for every rule
    if _last_series is not None and _last_series[0] is owner and _last_series[1] is run.steps:
        return dict(_last_series[2])
    table = rank_metrics(run)
    out = {}
    for source, rows in table.groupby("source", sort=False):
        numeric = rows.drop(columns=[c for c in ("source", "rank", "host", "t") if c in rows.columns])
        out[str(source)] = numeric.groupby("step").median().sort_index()
    _last_series = (owner, run.steps, out)
    return dict(out)


_last_series: tuple[Evidence, pd.DataFrame, dict[str, pd.DataFrame]] | None = None


def column(steps: pd.DataFrame, name: str) -> pd.Series | None:
    """The named metric's logged values (NaN rows dropped), or None when this source never logged it."""
    if name not in steps.columns:
        return None
    values = steps[name].dropna()
    return values if not values.empty else None


def consecutive_runs(mask: pd.Series) -> list[tuple[int, int, int]]:
    """(first step, last step, number of steps) of each run of True in consecutive *logged* steps
    (checks/rollout_rules.py: watch's live rules count runs the same way).

    Logged, not numbered: with logging_steps = 10 the steps 10, 20, 30 are consecutive. A gap of more
    than twice the usual interval breaks a run: the unread stretch between two windows of a big rank
    file (runlog/window.py) is no evidence either way."""
    return rollout_rules.consecutive_runs(list(mask.index), [bool(flag) for flag in mask.to_numpy()])


def longest_run(mask: pd.Series, min_steps: int) -> tuple[int, int, int] | None:
    """The longest of `consecutive_runs(mask)` if it lasts at least `min_steps`, else None."""
    runs = [r for r in consecutive_runs(mask) if r[2] >= min_steps]
    return max(runs, key=lambda r: r[2]) if runs else None


def beta_of(run: RunView, source: str) -> float | None:
    """The KL coefficient, where the run states it: ms-swift's args.json, `--beta` on the command line
    (reference trainer, TRL and ms-swift scripts), or a logged `beta` metric. None: not stated."""
    if source != EVENT_LOG_SOURCE:
        for log in run.metric_logs:
            if log.source == source and isinstance(log.args.get("beta"), (int, float)):
                return float(log.args["beta"])
        return None
    value = _launch_arg(run, "--beta")
    if value is not None:
        try:
            return float(value)
        except ValueError:
            return None
    if "beta" in run.steps.columns:
        values = pd.to_numeric(run.steps["beta"], errors="coerce").dropna()
        if not values.empty:
            return float(values.iloc[-1])
    return None


def finite(value: float | None) -> float | None:
    """A value for evidence: rounded, and None for NaN / inf (findings.json stays plain JSON)."""
    if value is None or not math.isfinite(value):
        return None
    return round(float(value), 6)


@dataclass(frozen=True)
class ZeroStdShare:
    """A source's share of groups whose rewards were all equal, per step, and where it was read."""

    share: pd.Series  # by step (ascending), 0-1
    origin: str  # LOGGED_SHARE, BATCH_FLAG (1 only when every group was zero-std) or ROLLOUT_SHARE


def zero_std_shares(run: RunView) -> dict[str, ZeroStdShare]:
    """{source: ZeroStdShare}: the logged frac_reward_zero_std, or for the event log, where that is not
    logged or is only a batch-level flag, the ranks' rollout records (rollout_zero_std_share)."""
    out = {}
    for source, steps in step_series(run).items():
        logged = column(steps, "frac_reward_zero_std")
        if logged is not None:
            out[source] = ZeroStdShare(logged, BATCH_FLAG if _zero_std_is_batch_flag(run, source) else LOGGED_SHARE)
    from_rollouts = rollout_zero_std_share(run.rollout_records)
    logged = out.get(EVENT_LOG_SOURCE)
    if not from_rollouts.empty and (logged is None or logged.origin == BATCH_FLAG):
        out[EVENT_LOG_SOURCE] = ZeroStdShare(from_rollouts, ROLLOUT_SHARE)
    return out


def rollout_zero_std_share(records: Iterable[Rollout]) -> pd.Series:
    """Per step, the ranks' zero_std_frac weighted by their groups, for steps where ranks hold whole groups
    (checks/rollout_rules.step_zero_std_share, which watch's live rules use too)."""
    by_step: dict[int, list[Rollout]] = defaultdict(list)
    for r in records:
        if r.step is not None:
            by_step[r.step].append(r)
    shares = {step: share for step, step_records in by_step.items()
              if (share := rollout_rules.step_zero_std_share(step_records)) is not None}
    return pd.Series(shares, dtype=float).sort_index()


def _zero_std_is_batch_flag(run: RunView, source: str) -> bool:
    """Whether the logged frac_reward_zero_std is only TRL's batch-level flag (schema/metric_vocab.py).
    Known only from the event log's command line: TRL's output directory keeps its arguments in a pickle."""
    return source == EVENT_LOG_SOURCE and zero_std_is_batch_flag(_argvs(run))


def _argvs(run: RunView) -> list:
    return [header.argv for header in run.headers.values()]


def _launch_arg(run: RunView, name: str) -> str | None:
    """The value of `name value` or `name=value` on the ranks' command line; None when not given."""
    return launch_arg(_argvs(run), name)
