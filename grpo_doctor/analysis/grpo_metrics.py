"""The step metrics as the degenerate-rollout rules read them: canonical names, one series per source.

`ev.steps` holds event-log rows (source "grpo-doctor", the trainer's own metric names, one row per
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
from pathlib import PurePath

import numpy as np
import pandas as pd

from grpo_doctor.analysis.load import Evidence
from grpo_doctor.analysis.metric_logs import SWIFT
from grpo_doctor.analysis.metric_names import canonical_frame
from grpo_doctor.analysis.rollout_tables import EVENT_LOG_SOURCE
from grpo_doctor.schema import Rollout

# Where a share of zero-std groups was read (ZeroStdShare.origin)
LOGGED_SHARE = "frac_reward_zero_std"
BATCH_FLAG = "frac_reward_zero_std, batch-level (a lower bound)"
ROLLOUT_SHARE = "rollout records"


def rank_metrics(ev: Evidence) -> pd.DataFrame:
    """One row per source, rank and step with the canonical metrics (metric_names.py)."""
    steps = ev.steps if "source" in ev.steps.columns else ev.steps.assign(source=EVENT_LOG_SOURCE)
    if steps.empty or "step" not in steps.columns:
        return pd.DataFrame(columns=["source", "rank", "step"])
    parts = []
    for source, rows in steps.groupby("source", sort=False):
        # metric_logs.py has already named a framework log's reward_std; the event log's is named here
        group_mean = source == SWIFT or (source == EVENT_LOG_SOURCE and launched_by_swift(ev)
                                         and _launch_arg(ev, "--scale_rewards") != "batch")
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

    Logged, not numbered: with logging_steps = 10 the steps 10, 20, 30 are consecutive. A gap of more
    than twice the usual interval breaks a run: the unread stretch between two windows of a big rank
    file (runlog/window.py) is no evidence either way."""
    runs, start, count, previous = [], None, 0, None
    gaps = unusual_gaps(mask.index)
    for (step, flag), gap in zip(mask.items(), gaps, strict=True):
        if gap and start is not None:
            runs.append((int(start), int(previous), count))
            start, count = None, 0
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


def unusual_gaps(steps) -> list[bool]:
    """For each step of an ascending index, whether it follows the one before by more than twice the
    median interval."""
    values = np.asarray(steps, dtype=float)
    if len(values) < 3:
        return [False] * len(values)
    intervals = np.diff(values)
    usual = float(np.median(intervals))
    return [False, *(intervals > 2 * usual).tolist()]


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
    value = _launch_arg(ev, "--beta")
    if value is not None:
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


def launched_by_swift(ev: Evidence) -> bool:
    """Whether the ranks ran ms-swift's command line: `swift rlhf` (swift/cli/main.py) starts each rank as
    `python <...>/swift/cli/rlhf.py ...`, under torch.distributed.run for several processes, and
    `python -m swift.cli.rlhf` records the same path. So the script is a file of the swift.cli package;
    a script below a folder merely named like it (/home/swiftuser/train.py) is not. A run built in a
    script of one's own around ms-swift's Python API is not recognised: its metrics read as TRL's."""
    for header in ev.headers.values():
        parts = PurePath(header.argv[0]).parts if header.argv else ()
        if any(parts[i:i + 2] == ("swift", "cli") for i in range(len(parts) - 2)):
            return True
    return False


@dataclass(frozen=True)
class ZeroStdShare:
    """A source's share of groups whose rewards were all equal, per step, and where it was read."""

    share: pd.Series  # by step (ascending), 0-1
    origin: str  # LOGGED_SHARE, BATCH_FLAG (1 only when every group was zero-std) or ROLLOUT_SHARE


def zero_std_shares(ev: Evidence) -> dict[str, ZeroStdShare]:
    """{source: ZeroStdShare}: the logged frac_reward_zero_std, or for the event log, where that is not
    logged or is only a batch-level flag, the ranks' rollout records (rollout_zero_std_share)."""
    out = {}
    for source, steps in step_series(ev).items():
        logged = column(steps, "frac_reward_zero_std")
        if logged is not None:
            out[source] = ZeroStdShare(logged, BATCH_FLAG if _zero_std_is_batch_flag(ev, source) else LOGGED_SHARE)
    from_rollouts = rollout_zero_std_share(ev.rollout_records)
    logged = out.get(EVENT_LOG_SOURCE)
    if not from_rollouts.empty and (logged is None or logged.origin == BATCH_FLAG):
        out[EVENT_LOG_SOURCE] = ZeroStdShare(from_rollouts, ROLLOUT_SHARE)
    return out


def rollout_zero_std_share(records: Iterable[Rollout]) -> pd.Series:
    """Per step, the ranks' zero_std_frac weighted by their groups, for steps where ranks hold whole groups.

    A rank's zero_std_frac is over the groups it holds. When the copies of a prompt are spread over
    ranks (TRL's layout whenever a rank's batch does not hold whole groups), a rank's part of a group
    can have equal rewards while the whole group does not, and a part of one copy is left out: the
    records do not hold the real groups' stds. So a step where two ranks hold one prompt is left out.
    Weights: num_groups, the groups a share is over when ranks hold whole groups (less those with
    fewer than two known rewards, which these records do not count)."""
    by_step: dict[int, list[Rollout]] = defaultdict(list)
    for r in records:
        if r.step is not None:
            by_step[r.step].append(r)
    shares = {}
    for step, step_records in by_step.items():
        holders: dict[str, set[int]] = defaultdict(set)
        for r in step_records:
            for prompt in set(r.prompt_hashes):
                holders[prompt].add(r.rank)
        if any(len(ranks) > 1 for ranks in holders.values()):
            continue
        known = [(r.zero_std_frac, r.num_groups) for r in step_records if r.zero_std_frac is not None]
        num_groups = sum(n for _, n in known)
        if num_groups:
            shares[step] = math.fsum(share * n for share, n in known) / num_groups
    return pd.Series(shares, dtype=float).sort_index()


def _zero_std_is_batch_flag(ev: Evidence, source: str) -> bool:
    """TRL computes frac_reward_zero_std from the std it scales by: with scale_rewards="batch" (and
    multi_objective_aggregation="normalize_then_sum") that is the batch's, so the share is 1 when
    every reward of the batch is equal and 0 otherwise. ms-swift always counts groups. Known only
    from the event log's command line: TRL's output directory keeps its arguments in a pickle."""
    if source != EVENT_LOG_SOURCE or launched_by_swift(ev):
        return False
    return (_launch_arg(ev, "--scale_rewards") == "batch"
            or _launch_arg(ev, "--multi_objective_aggregation") == "normalize_then_sum")


def _launch_arg(ev: Evidence, name: str) -> str | None:
    """The value of `name value` or `name=value` on the ranks' command line; None when not given."""
    for header in ev.headers.values():
        argv = list(header.argv or [])
        for i, arg in enumerate(argv):
            if arg == name:
                return argv[i + 1] if i + 1 < len(argv) else ""
            if arg.startswith(name + "="):
                return arg[len(name) + 1:]
    return None
