"""`constant-reward`: every completion got the same reward, step after step (the reward function returns one value).

A step's reward is constant when the std of the reward over all its completions is about 0. That
std is read as `reward_std_batch` (TRL's and the reference trainer's `reward_std`), else as the
largest per-function std `reward_func_std_max` (TRL's and ms-swift's `rewards/<func>/std`, both
over all completions), else as the batch's range `reward_range_batch` (verl's critic/score max - min),
else from the ranks' rollout records (every rank's own reward std 0 and
all ranks' means equal). ms-swift's own `reward_std` is the mean of group stds and cannot tell
this, so it is not read here. Fires for at least `min_consecutive_steps` logged steps in a row.
Critical when the value is also the same at every step of the run (a reward function that
ignores its input); a warning when it changes between steps (e.g. every completion wrong).

When the copies of each prompt were themselves identical (seed-collision, a collapsed policy),
any reward gives one value: `duplicate_rate` says so and the first hint points there.

Evidence keys: `source`, `first_step`, `last_step`, `num_steps`, `reward_value` (median reward
over the run), `same_value_every_step` (bool), `std_metric` (the metric read: reward_std_batch,
reward_func_std_max, reward_range_batch or rollout records), `duplicate_rate` (median over the run's steps of the share
of completions identical to an earlier copy of the same prompt, on any rank; from rollout records
or completion files; None when neither was recorded).
"""
from __future__ import annotations

from collections.abc import Iterator

import pandas as pd

from grpo_doctor.analysis.findings import Finding
from grpo_doctor.analysis.grpo_metrics import column, finite, longest_run, step_series
from grpo_doctor.analysis.rollout_tables import EVENT_LOG_SOURCE, duplicate_rates
from grpo_doctor.analysis.views import RunView, View
from grpo_doctor.checks.rollout_rules import (
    REWARD_STD_METRICS,
    reward_is_constant,
    rollout_rewards_constant,
    same_value_throughout,
)
from grpo_doctor.checks.rollout_rules import ConstantRewardConfig as Config  # watch's live rules read it too

ID = "constant-reward"
READS = {View.FRAMEWORK_METRICS, View.RANK_TABLES, View.RANKS, View.ROLLOUT_TABLES}

HINT_IDENTICAL = ("The completions themselves were identical copies, so any reward gives one value: fix the "
                  "sampling first (see seed-collision: a distinct seed per sampling process; or a policy that "
                  "collapsed to one answer: see entropy-collapse).")
HINTS = (
    "Call the reward function by hand on a few completions that should score differently (a correct answer, a "
    "wrong one, an empty string) and check it returns different values; a constant often means an exception "
    "caught and turned into a default score, or a parsing step that never matches the completion format.",
    "Check the reward function reads the right fields: TRL passes completions as text or as chat messages "
    "([{'role', 'content'}]) depending on the dataset format, plus every dataset column as a keyword argument.",
    "If every completion is simply wrong, the task is out of the model's reach: start from an SFT checkpoint, use "
    "easier prompts, or give partial credit (format reward) so groups disagree.",
)


def check(run: RunView, cfg: Config) -> Iterator[Finding]:
    series = step_series(run)
    if not run.rollouts.empty:  # a run that recorded rollouts but no step metrics
        series.setdefault(EVENT_LOG_SOURCE, pd.DataFrame())
    for source, steps in series.items():
        flags, metric = _constant_steps(run, source, steps, cfg)
        if flags is None:
            continue
        longest = longest_run(flags, cfg.min_consecutive_steps)
        if longest is None:
            continue
        first, last, num = longest
        rewards = column(steps, "reward")
        if rewards is None and metric == "rollout records":
            rewards = run.rollouts.groupby("step")["reward_mean"].median()
        value = finite(rewards.loc[first:last].median()) if rewards is not None else None
        same = bool(rewards is not None and same_value_throughout(rewards.max() - rewards.min(), cfg))
        dupes = duplicate_rates(run.rollout_records) if source == EVENT_LOG_SOURCE else column(steps, "duplicate_rate")
        dupes = dupes.loc[first:last] if dupes is not None else None
        duplicate_rate = finite(dupes.median()) if dupes is not None and not dupes.empty else None
        copies = duplicate_rate is not None and duplicate_rate >= cfg.identical_share
        yield Finding(
            id=ID, severity="critical" if same else "warning",
            title=(f"the reward is {value} for every completion" + (" at every step" if same else "")
                   + f" ({num} steps in a row, {first}-{last})"),
            step=first,
            evidence={"source": source, "first_step": first, "last_step": last, "num_steps": num,
                      "reward_value": value, "same_value_every_step": same, "std_metric": metric,
                      "duplicate_rate": duplicate_rate},
            hints=(HINT_IDENTICAL, *HINTS) if copies else HINTS,
        )


def _constant_steps(run: RunView, source: str, steps: pd.DataFrame, cfg: Config):
    for name in REWARD_STD_METRICS:
        values = column(steps, name)
        if values is not None:
            return reward_is_constant(values, cfg).reindex(steps.index, fill_value=False), name
    if source == EVENT_LOG_SOURCE and not run.rollouts.empty:
        by_step = run.rollouts.dropna(subset=["reward_std", "reward_mean"]).groupby("step")
        stats = by_step.agg(std_max=("reward_std", "max"), mean_min=("reward_mean", "min"),
                            mean_max=("reward_mean", "max"))
        if not stats.empty:
            flags = rollout_rewards_constant(stats["std_max"], stats["mean_max"] - stats["mean_min"], cfg)
            return flags.sort_index(), "rollout records"
    return None, None
