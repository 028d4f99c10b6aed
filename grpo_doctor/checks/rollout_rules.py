"""The degenerate-rollout rules' thresholds and per-step tests, defined once for the report and for watch.

The report's rules (analysis/rules/constant_reward.py, dead_step.py, zero_std_groups.py, zero_kl.py,
nan_loss.py, entropy_collapse.py, length_collapse.py, stale_rollout_weights.py) judge a whole run with
pandas; watch judges the same steps as they arrive (supervisor/live_rules.py), without pandas. Both take
their thresholds from the `Config` classes here (each rule module's `Config` is one of them, so
`report --set dead-step.min_consecutive_steps=3` and watch's default read the same field) and decide a
step with the same tests. Each test takes plain numbers or pandas Series alike (it uses only
comparisons, `abs`, `&` and `|`), and a NaN (not logged) is never flagged.

Runs of steps are counted over *logged* steps: with logging_steps = 10 the steps 10, 20, 30 are
consecutive; a step that follows the one before by more than GAP_FACTOR x the usual interval (the
median) breaks a run (`consecutive_runs`): the unread middle of a big rank file is no evidence.

Typical use:
    cfg = DeadStepConfig()
    dead = all_groups_zero_std(share, cfg) | no_gradient(grad_norm, loss, cfg)
    consecutive_runs([1, 2, 3, 4], [True, True, False, True])     # [(1, 2, 2), (4, 4, 1)]
"""
from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

GAP_FACTOR = 2.0  # an interval above this x the median one breaks a run of logged steps
# canonical names nan-loss checks (each framework's own aliases too): a NaN reward poisons every advantage
NONFINITE_CHECKED = ("loss", "grad_norm", "reward")
# constant-reward reads the first of these a source logs (schema/metric_vocab.py names them)
REWARD_STD_METRICS = ("reward_std_batch", "reward_func_std_max", "reward_range_batch")
# stale-rollout-weights reads the first of these a source logs, each with its own floor (Config field)
DRIFT_METRICS = {"rollout_logprob_diff": "min_late_logprob_diff", "rollout_kl": "min_late_kl",
                 "rollout_prob_diff": "min_late_prob_diff"}


@dataclass(frozen=True)
class ConstantRewardConfig:
    min_consecutive_steps: int = 5  # logged steps in a row; a small batch can be all-zero for a step or two
    std_zero: float = 1e-6  # reward std at or below this counts as zero
    identical_share: float = 0.5  # duplicate_rate at or above this: the completions were copies


@dataclass(frozen=True)
class DeadStepConfig:
    min_consecutive_steps: int = 5  # logged steps in a row; a tiny batch can be all zero-std for a step or two
    zero_std_share: float = 0.999  # frac_reward_zero_std at or above this: every group zero-std
    grad_norm_zero: float = 1e-8  # gradient norm at or below this counts as zero
    loss_zero: float = 1e-6  # |loss| at or below this counts as zero (only together with a zero gradient)
    advantage_zero: float = 1e-6  # largest |advantage| (verl) at or below this: every advantage 0


@dataclass(frozen=True)
class ZeroStdGroupsConfig:
    window_steps: int = 10  # logged steps averaged; shorter runs are not judged
    min_share: float = 0.8  # mean share of zero-std groups in the window at or above this fires


@dataclass(frozen=True)
class ZeroKlConfig:
    min_consecutive_steps: int = 3  # logged steps in a row with KL at 0 after the policy started moving
    kl_zero: float = 1e-9  # |kl| at or below this is 0 (a real KL after an update is far larger)
    grad_norm_moving: float = 1e-8  # a gradient norm above this moves the policy (with lr > 0)


@dataclass(frozen=True)
class NanLossConfig:
    metrics: tuple[str, ...] = NONFINITE_CHECKED  # metric names checked for NaN / inf (same in every framework)


@dataclass(frozen=True)
class EntropyCollapseConfig:
    window_steps: int = 3  # logged steps whose median is the start / the end value
    fraction: float = 0.1  # end below this fraction of the start fires
    min_start: float = 1e-3  # a start below this is already collapsed (or not entropy): not judged


@dataclass(frozen=True)
class LengthCollapseConfig:
    min_consecutive_steps: int = 5  # logged steps in a row
    truncated_share: float = 0.95  # clipped share at or above this: everything truncated
    max_empty_length: float = 1.0  # mean length (tokens) at or below this: empty completions


@dataclass(frozen=True)
class StaleRolloutWeightsConfig:
    window_steps: int = 3  # logged values whose median is the early / late level
    min_steps: int = 8  # fewer logged values are not judged
    growth_ratio: float = 3.0  # late >= this x early
    min_late_logprob_diff: float = 0.1  # nats per token; bf16 engines differ by ~0.01-0.05
    min_late_kl: float = 0.01  # nats
    min_late_prob_diff: float = 0.05  # probability


# -- per-step tests (numbers or pandas Series) -----------------------------------------------------

def reward_is_constant(std, cfg: ConstantRewardConfig):
    """The step's reward std (one of REWARD_STD_METRICS) is zero: every completion got one reward."""
    return std <= cfg.std_zero


def rollout_rewards_constant(std_max, mean_range, cfg: ConstantRewardConfig):
    """From the ranks' rollout records: every rank's own std zero and all ranks' means equal."""
    return (std_max <= cfg.std_zero) & (mean_range <= cfg.std_zero)


def same_value_throughout(reward_range, cfg: ConstantRewardConfig):
    """The reward's max - min over the run is zero: the same value at every step (critical)."""
    return reward_range <= cfg.std_zero


def all_groups_zero_std(share, cfg: DeadStepConfig):
    return share >= cfg.zero_std_share


def no_gradient(grad_norm, loss, cfg: DeadStepConfig):
    """Zero gradient and zero loss together (a loss near 0 alone is normal in GRPO)."""
    return (grad_norm <= cfg.grad_norm_zero) & (abs(loss) <= cfg.loss_zero)


def no_advantage(advantage_abs_max, cfg: DeadStepConfig):
    return advantage_abs_max <= cfg.advantage_zero


def zero_std_window_fires(mean_share, cfg: ZeroStdGroupsConfig):
    return mean_share >= cfg.min_share


def kl_is_zero(kl, cfg: ZeroKlConfig):
    return abs(kl) <= cfg.kl_zero


def policy_moving(grad_norm, learning_rate, cfg: ZeroKlConfig):
    """The update moves the policy: a gradient norm above `grad_norm_moving` and a learning rate above 0
    (warm-up from 0 is no update yet); a learning rate that is NaN (not logged) is allowed."""
    moving = grad_norm > cfg.grad_norm_moving
    if learning_rate is None:
        return moving
    return moving & ((learning_rate > 0) | (learning_rate != learning_rate))  # x != x: NaN


def groups_disagree(frac_reward_zero_std):
    """Without a gradient norm, zero-kl's sign of a moving policy: not every group was zero-std."""
    return frac_reward_zero_std < 1


def truncated(clipped_frac, cfg: LengthCollapseConfig):
    return clipped_frac >= cfg.truncated_share


def empty(length_mean, cfg: LengthCollapseConfig):
    return length_mean <= cfg.max_empty_length


def entropy_collapsed(start: float, end: float, cfg: EntropyCollapseConfig) -> bool:
    return start > cfg.min_start and end < cfg.fraction * start


def drift_floor(metric: str, cfg: StaleRolloutWeightsConfig) -> float:
    return getattr(cfg, DRIFT_METRICS[metric])


def drifted(early: float, late: float, metric: str, cfg: StaleRolloutWeightsConfig) -> bool:
    return late >= drift_floor(metric, cfg) and late >= cfg.growth_ratio * early


# -- runs of logged steps ------------------------------------------------------------------------------

def unusual_gaps(steps: Sequence[float]) -> list[bool]:
    """For each step of an ascending sequence, whether it follows the one before by more than GAP_FACTOR x
    the median interval (never for fewer than three steps)."""
    values = [float(s) for s in steps]
    if len(values) < 3:
        return [False] * len(values)
    intervals = [b - a for a, b in zip(values, values[1:], strict=False)]
    usual = statistics.median(intervals)
    return [False, *(interval > GAP_FACTOR * usual for interval in intervals)]


def consecutive_runs(steps: Sequence[int], flags: Sequence[bool]) -> list[tuple[int, int, int]]:
    """(first step, last step, number of steps) of each run of True in consecutive *logged* steps; an
    unusual gap (unusual_gaps) breaks a run."""
    runs, start, count, previous = [], None, 0, None
    for step, flag, gap in zip(steps, flags, unusual_gaps(steps), strict=True):
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


# -- the ranks' rollout records ---------------------------------------------------------------------

def step_zero_std_share(records: Iterable) -> float | None:
    """One step's share of zero-std groups from its ranks' Rollout records (schema.Rollout): their
    zero_std_frac weighted by num_groups; None where ranks split a prompt's copies between them.

    A rank's zero_std_frac is over the groups it holds. When the copies of a prompt are spread over
    ranks (TRL's layout whenever a rank's batch does not hold whole groups), a rank's part of a group
    can have equal rewards while the whole group does not, and a part of one copy is left out: the
    records do not hold the real groups' stds, so such a step is not judged from them. Weights:
    num_groups, the groups a share is over when ranks hold whole groups (less those with fewer than
    two known rewards, which these records do not count)."""
    records = list(records)
    holders: dict[str, set[int]] = defaultdict(set)
    for r in records:
        for prompt in set(r.prompt_hashes):
            holders[prompt].add(r.rank)
    if any(len(ranks) > 1 for ranks in holders.values()):
        return None
    known = [(r.zero_std_frac, r.num_groups) for r in records if r.zero_std_frac is not None]
    num_groups = sum(n for _, n in known)
    return math.fsum(share * n for share, n in known) / num_groups if num_groups else None
