"""The degenerate-rollout rules, judged step by step while the job runs (watch's sentinels.py).

Each rule here is the report's rule of the same id (analysis/rules/<rule>.py) made incremental: the
same thresholds (its `Config`, checks/rollout_rules.py), the same per-step tests, the same counting of
runs over logged steps (an unusual gap breaks a run), on the same steps of the same source (step_feed.py:
the event log's median over ranks, or the printed metric lines). A rule holds a few numbers and a bounded
window of recent steps per source, never the run's history.

`standing()` answers what the report would say if the job ended now, for the findings that already
stand: the run of degenerate steps as long as it has lasted, the current window, the first non-finite
loss. So a finding is said as soon as the evidence is there, and no sooner than the report would say it:
constant-reward, dead-step and length-collapse at the `min_consecutive_steps`-th degenerate step in a row
(5), zero-kl at the 3rd zero KL after the policy moved, zero-std-groups once `window_steps` (10) steps
average past `min_share`, entropy-collapse and stale-rollout-weights once enough steps are logged to
compare a start with an end (2 x 3 and 8), nan-loss at the first non-finite value. A finding stops
standing when a step breaks its run (a warning that clears).

What differs from the report, by construction: the report picks the longest run (or worst window) of the
whole run, a standing finding is the current one; the report's medians over the whole run (the reward
value, length-collapse's clipped_frac and length_mean, dead-step's frac_dead_steps) are taken here over the
steps seen so far (at most WINDOW of them where a median is needed); constant-reward's duplicate_rate is
not computed live (None); dead-step's warning for a log shorter than `min_consecutive_steps` needs the end.

Typical use:
    rules = SourceRules("grpo-doctor")
    rules.update(logged_step)          # each step of that source, in order
    rules.standing()                   # {key: finding dict (findings.json's shape)}
"""
from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from grpo_doctor.checks import rollout_rules as rr
from grpo_doctor.schema.ranks import format_ranks
from grpo_doctor.supervisor.step_feed import EVENT_LOG_SOURCE, LoggedStep

WINDOW = 64  # recent logged steps kept per run where a median or an interval is needed
ROLLOUT_RECORDS = "rollout records"  # constant-reward's std_metric when read from Rollout records
LOGGED_SHARE, BATCH_FLAG = "frac_reward_zero_std", "frac_reward_zero_std, batch-level (a lower bound)"
# What to look at first, per rule; `grpo-doctor report` gives every remedy.
HINTS = {
    "constant-reward": "Call the reward function by hand on completions that should score differently (a correct "
                       "answer, a wrong one, an empty string): a constant is often an exception turned into a "
                       "default score, or a parser that never matches the completion format.",
    "dead-step": "No learning signal: check that the reward varies within a group (constant-reward, seed-collision) "
                 "and make groups disagree (more num_generations, temperature near 1.0, partial credit).",
    "zero-std-groups": "Most groups teach nothing: filter out prompts every copy solves or fails (dynamic sampling), "
                       "raise num_generations, give the reward finer gradations.",
    "zero-kl": "The reference may be the policy itself (LoRA without the adapter disabled, one model for both "
               "log-probs), or bf16 rounds every update away: keep fp32 master weights.",
    "nan-loss": "Find the first bad value: a reward returning NaN / inf, an advantage divided by a zero std, "
                "-inf log-probabilities; train in bf16 rather than fp16, lower the learning rate, clip gradients.",
    "entropy-collapse": "The policy stopped exploring: lower the learning rate, set a KL penalty (beta), add an "
                        "entropy bonus, sample at temperature near 1.0; check for reward hacking.",
    "length-collapse": "Completions hit the length limit or shrank to nothing: raise max_completion_length and check "
                       "the end token, or check the reward does not pay for empty answers.",
    "stale-rollout-weights": "Check the weight sync into the rollout engine runs every step and succeeds, and that "
                             "vLLM's prefix cache is reset after it.",
}
RULE_IDS = tuple(HINTS)


@dataclass(frozen=True)
class LiveConfigs:
    """The rules' thresholds: the report's defaults (or the `report --set` values the caller passes)."""

    constant_reward: rr.ConstantRewardConfig = field(default_factory=rr.ConstantRewardConfig)
    dead_step: rr.DeadStepConfig = field(default_factory=rr.DeadStepConfig)
    zero_std_groups: rr.ZeroStdGroupsConfig = field(default_factory=rr.ZeroStdGroupsConfig)
    zero_kl: rr.ZeroKlConfig = field(default_factory=rr.ZeroKlConfig)
    nan_loss: rr.NanLossConfig = field(default_factory=rr.NanLossConfig)
    entropy_collapse: rr.EntropyCollapseConfig = field(default_factory=rr.EntropyCollapseConfig)
    length_collapse: rr.LengthCollapseConfig = field(default_factory=rr.LengthCollapseConfig)
    stale_rollout_weights: rr.StaleRolloutWeightsConfig = field(default_factory=rr.StaleRolloutWeightsConfig)


class TrailingRun:
    """The current run of flagged logged steps, counted as checks/rollout_rules.consecutive_runs counts
    them: a step more than GAP_FACTOR x the usual interval after the one before breaks the run (the usual
    interval: the median of the last WINDOW ones)."""

    def __init__(self) -> None:
        self.first: int | None = None
        self.last: int | None = None
        self.count = 0
        self._previous: int | None = None
        self._intervals: deque[float] = deque(maxlen=WINDOW)
        self._seen = 0

    def add(self, step: int, flag: bool) -> None:
        gap = False
        if self._previous is not None:
            self._intervals.append(step - self._previous)
            self._seen += 1
            gap = self._seen >= 2 and self._intervals[-1] > rr.GAP_FACTOR * statistics.median(self._intervals)
        self._previous = step
        if gap or not flag:
            self.first, self.count = None, 0
        if flag:
            self.first = step if self.first is None else self.first
            self.count += 1
            self.last = step

    def lasted(self, min_steps: int) -> bool:
        return self.first is not None and self.count >= min_steps


def _finding(rule_id: str, severity: str, title: str, step: int | None, evidence: dict[str, Any],
             ranks: tuple[int, ...] = ()) -> dict[str, Any]:
    return {"id": rule_id, "severity": severity, "title": title, "ranks": list(ranks), "hosts": [], "step": step,
            "phase": None, "evidence": evidence, "hints": [HINTS[rule_id]], "role": None, "caused_by": None}


def _finite(value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return round(float(value), 6)


def _median(values) -> float | None:
    values = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(values) if values else None


def _flag(value) -> bool:
    """A test's answer as a bool; a NaN compared is False, as the report's fillna(False) makes it."""
    return bool(value)


class ConstantReward:
    def __init__(self, source: str, cfg: rr.ConstantRewardConfig) -> None:
        self.source, self.cfg = source, cfg
        self.metric: str | None = None
        self.run = TrailingRun()
        self.run_rewards: deque[tuple[int, float]] = deque(maxlen=WINDOW)
        self.reward_min = self.reward_max = None

    def update(self, s: LoggedStep) -> None:
        metric = next((m for m in rr.REWARD_STD_METRICS if m in s.metrics), None)
        if metric is None and self.metric in (None, ROLLOUT_RECORDS) and s.source == EVENT_LOG_SOURCE \
                and s.rollouts is not None and s.rollouts.reward_std_max is not None:
            metric = ROLLOUT_RECORDS
        if metric is not None and metric != self.metric and (self.metric is None or self.metric == ROLLOUT_RECORDS
                                                              or rr.REWARD_STD_METRICS.index(metric)
                                                              < rr.REWARD_STD_METRICS.index(self.metric)):
            self.metric, self.run = metric, TrailingRun()  # the first metric in order is the one read
        reward = s.metrics.get("reward")
        if reward is None and self.metric == ROLLOUT_RECORDS and s.rollouts is not None:
            reward = s.rollouts.reward_mean
        if reward is not None:
            self.reward_min = reward if self.reward_min is None else min(self.reward_min, reward)
            self.reward_max = reward if self.reward_max is None else max(self.reward_max, reward)
        if self.metric is None or (self.metric != ROLLOUT_RECORDS and not s.logged):
            return
        if self.metric == ROLLOUT_RECORDS:
            if s.rollouts is None or s.rollouts.reward_std_max is None:
                return
            flag = _flag(rr.rollout_rewards_constant(s.rollouts.reward_std_max, s.rollouts.reward_mean_range, self.cfg))
        else:
            std = s.metrics.get(self.metric)
            flag = std is not None and _flag(rr.reward_is_constant(std, self.cfg))
        was = self.run.first
        self.run.add(s.step, flag)
        if self.run.first != was:
            self.run_rewards.clear()
        if flag and reward is not None:
            self.run_rewards.append((s.step, reward))

    def standing(self) -> dict[tuple, dict[str, Any]]:
        run = self.run
        if not run.lasted(self.cfg.min_consecutive_steps):
            return {}
        value = _finite(_median(r for _, r in self.run_rewards))
        same = self.reward_min is not None and _flag(rr.same_value_throughout(self.reward_max - self.reward_min,
                                                                              self.cfg))
        title = (f"the reward is {value} for every completion" + (" at every step" if same else "")
                 + f" ({run.count} steps in a row, {run.first}-{run.last})")
        return {("constant-reward", self.source, run.first): _finding(
            "constant-reward", "critical" if same else "warning", title, run.first,
            {"source": self.source, "first_step": run.first, "last_step": run.last, "num_steps": run.count,
             "reward_value": value, "same_value_every_step": same, "std_metric": self.metric,
             "duplicate_rate": None})}


def _zero_std_share(s: LoggedStep) -> tuple[float | None, str | None]:
    """The step's share of zero-std groups and where it was read, as grpo_metrics.zero_std_shares reads it:
    logged, unless only TRL's batch-level flag is logged (or nothing) and the rollout records give it."""
    logged = s.metrics.get("frac_reward_zero_std")
    from_rollouts = s.rollouts.zero_std_share if s.rollouts is not None else None
    if from_rollouts is not None and s.source == EVENT_LOG_SOURCE and (logged is None or s.batch_flag):
        return from_rollouts, ROLLOUT_RECORDS
    if logged is not None:
        return logged, BATCH_FLAG if s.batch_flag and s.source == EVENT_LOG_SOURCE else LOGGED_SHARE
    return None, None


class DeadStep:
    def __init__(self, source: str, cfg: rr.DeadStepConfig) -> None:
        self.source, self.cfg = source, cfg
        self.run = TrailingRun()
        self.reasons: set[str] = set()
        self.grad_max = self.loss_max = None
        self.num_steps = self.num_dead = 0

    def update(self, s: LoggedStep) -> None:
        share, _ = _zero_std_share(s)
        if not s.logged and share is None:
            return
        m = s.metrics
        flags = {
            "all groups zero-std": share is not None and _flag(rr.all_groups_zero_std(share, self.cfg)),
            "every advantage 0": "advantage_abs_max" in m and _flag(rr.no_advantage(m["advantage_abs_max"], self.cfg)),
            "zero gradient and loss": ("grad_norm" in m and "loss" in m
                                       and _flag(rr.no_gradient(m["grad_norm"], m["loss"], self.cfg))),
        }
        dead = any(flags.values())
        was = self.run.first
        self.run.add(s.step, dead)
        if self.run.first != was:
            self.reasons, self.grad_max, self.loss_max = set(), None, None
        self.num_steps += 1
        self.num_dead += dead
        if dead:
            self.reasons |= {name for name, flag in flags.items() if flag}
            if "grad_norm" in m:
                self.grad_max = m["grad_norm"] if self.grad_max is None else max(self.grad_max, m["grad_norm"])
            if "loss" in m:
                self.loss_max = abs(m["loss"]) if self.loss_max is None else max(self.loss_max, abs(m["loss"]))

    def standing(self) -> dict[tuple, dict[str, Any]]:
        run = self.run
        if not run.lasted(self.cfg.min_consecutive_steps):
            return {}
        reason = " + ".join(n for n in ("all groups zero-std", "every advantage 0", "zero gradient and loss")
                            if n in self.reasons)
        title = f"no learning signal for {run.count} steps in a row ({run.first}-{run.last}): {reason}"
        return {("dead-step", self.source, run.first): _finding(
            "dead-step", "critical", title, run.first,
            {"source": self.source, "first_step": run.first, "last_step": run.last, "num_steps": run.count,
             "reason": reason, "frac_dead_steps": round(self.num_dead / max(self.num_steps, 1), 4),
             "grad_norm_max": _finite(self.grad_max), "loss_max_abs": _finite(self.loss_max)})}


class ZeroStdGroups:
    def __init__(self, source: str, cfg: rr.ZeroStdGroupsConfig) -> None:
        self.source, self.cfg = source, cfg
        self.window: deque[tuple[int, float]] = deque(maxlen=max(cfg.window_steps, 1))
        self.total = 0.0
        self.count = 0
        self.origin: str | None = None
        self.fired: tuple[int, int, float, float] | None = None  # first, last, mean share, worst step share

    def update(self, s: LoggedStep) -> None:
        share, origin = _zero_std_share(s)
        if share is None:
            return
        self.origin = origin
        self.window.append((s.step, share))
        self.total += share
        self.count += 1
        if len(self.window) < self.cfg.window_steps:
            return
        mean = statistics.fmean(v for _, v in self.window)
        if not _flag(rr.zero_std_window_fires(mean, self.cfg)):
            self.fired = None
        elif self.fired is None:
            self.fired = (self.window[0][0], self.window[-1][0], mean, max(v for _, v in self.window))

    def standing(self) -> dict[tuple, dict[str, Any]]:
        if self.fired is None:
            return {}
        first, last, mean, worst_step = self.fired
        bound = "at least " if self.origin == BATCH_FLAG else ""
        title = f"{bound}{mean:.0%} of groups had identical rewards (no gradient) over steps {first}-{last}"
        return {("zero-std-groups", self.source, first): _finding(
            "zero-std-groups", "warning", title, first,
            {"source": self.source, "first_step": first, "last_step": last, "zero_std_share": round(mean, 4),
             "share_overall": round(self.total / self.count, 4), "num_steps": self.cfg.window_steps,
             "worst_step_share": round(worst_step, 4), "zero_std_from": self.origin})}


class ZeroKl:
    def __init__(self, source: str, cfg: rr.ZeroKlConfig) -> None:
        self.source, self.cfg = source, cfg
        self.since: int | None = None
        self.grad_logged = False
        self.run = TrailingRun()
        self.run_grads: deque[float] = deque(maxlen=WINDOW)
        self.beta: float | None = None

    def update(self, s: LoggedStep) -> None:
        if not s.logged:
            return
        self.beta = s.beta
        m = s.metrics
        self.grad_logged = self.grad_logged or "grad_norm" in m
        if self.since is None:
            if "grad_norm" in m:
                moving = _flag(rr.policy_moving(m["grad_norm"], m.get("learning_rate"), self.cfg))
            else:
                moving = (not self.grad_logged and "frac_reward_zero_std" in m
                          and _flag(rr.groups_disagree(m["frac_reward_zero_std"])))
            if moving:
                self.since = s.step
            return
        if "kl" not in m:
            return
        was = self.run.first
        flag = _flag(rr.kl_is_zero(m["kl"], self.cfg))
        self.run.add(s.step, flag)
        if self.run.first != was:
            self.run_grads.clear()
        if flag and "grad_norm" in m:
            self.run_grads.append(m["grad_norm"])

    def standing(self) -> dict[tuple, dict[str, Any]]:
        run = self.run
        if self.beta == 0 or not run.lasted(self.cfg.min_consecutive_steps):
            return {}
        title = (f"KL to the reference is exactly 0 for {run.count} steps ({run.first}-{run.last}) although the "
                 "policy is updated")
        return {("zero-kl", self.source, run.first): _finding(
            "zero-kl", "warning", title, run.first,
            {"source": self.source, "first_step": run.first, "last_step": run.last, "num_steps": run.count,
             "beta": self.beta, "moving_since_step": self.since,
             "grad_norm_median": _finite(_median(self.run_grads)) if self.grad_logged else None})}


class NanLoss:
    def __init__(self, source: str, cfg: rr.NanLossConfig) -> None:
        self.source, self.cfg = source, cfg
        self.first: tuple[int, dict[str, float], tuple[int, ...]] | None = None
        self.affected = 0
        self.last_logged: int | None = None
        self.last_finite: dict[str, float] = {}
        self.before_first: dict[str, float | None] = {}

    def update(self, s: LoggedStep) -> None:
        if not s.logged:
            return
        bad = {name: v for name, v in s.nonfinite.items() if name in self.cfg.metrics}
        if bad:
            if self.first is None:
                self.first = (s.step, bad, s.nonfinite_ranks)
                self.before_first = {name: self.last_finite.get(name) for name in ("loss", "grad_norm")}
            self.affected += 1
        elif self.first is None:
            for name in ("loss", "grad_norm"):
                if name in s.metrics and math.isfinite(s.metrics[name]):
                    self.last_finite[name] = s.metrics[name]
        self.last_logged = s.step

    def standing(self) -> dict[tuple, dict[str, Any]]:
        if self.first is None:
            return {}
        step, bad, ranks = self.first
        if self.affected == 1 and self.last_logged is not None and self.last_logged > step:
            return {}  # one step, then finite values: fp16 loss scaling skipped it (the report's warning)
        flagged = sorted(bad, key=self.cfg.metrics.index)
        where = f"on rank(s) {format_ranks(ranks)}" if ranks else f"({self.source} log)"
        values = {name: ("inf" if bad[name] > 0 else "-inf") if math.isinf(bad[name]) else "nan" for name in flagged}
        return {("nan-loss", self.source, step): _finding(
            "nan-loss", "critical", f"{' and '.join(flagged)} became non-finite at step {step} {where}", step,
            {"source": self.source, "first_step": step, "metrics": flagged, "values": values,
             "num_steps_affected": self.affected, "last_finite_loss": _finite(self.before_first.get("loss")),
             "last_finite_grad_norm": _finite(self.before_first.get("grad_norm"))}, ranks)}


class EntropyCollapse:
    def __init__(self, source: str, cfg: rr.EntropyCollapseConfig) -> None:
        self.source, self.cfg = source, cfg
        self.head: list[tuple[int, float]] = []  # the first window_steps values
        self.tail: deque[float] = deque(maxlen=max(cfg.window_steps, 1))
        self.count = 0
        self.last_step: int | None = None
        self.first_below: int | None = None

    def update(self, s: LoggedStep) -> None:
        value = s.metrics.get("entropy") if s.logged else None
        if value is None:
            return
        if len(self.head) < self.cfg.window_steps:
            self.head.append((s.step, value))
        self.tail.append(value)
        self.count += 1
        self.last_step = s.step
        if len(self.head) == self.cfg.window_steps and self.first_below is None:
            start = statistics.median(v for _, v in self.head)
            # the first step below over the whole series: the first window's own steps included
            candidates = self.head if self.count == self.cfg.window_steps else [(s.step, value)]
            self.first_below = next((step for step, v in candidates if v < self.cfg.fraction * start), None)

    def standing(self) -> dict[tuple, dict[str, Any]]:
        if self.count < 2 * self.cfg.window_steps:
            return {}
        start, end = statistics.median(v for _, v in self.head), statistics.median(self.tail)
        if not rr.entropy_collapsed(start, end, self.cfg) or self.first_below is None:
            return {}
        title = f"token entropy collapsed from {start:.3g} to {end:.3g} ({end / start:.0%} of its start)"
        return {("entropy-collapse", self.source, self.first_below): _finding(
            "entropy-collapse", "warning", title, self.first_below,
            {"source": self.source, "start_entropy": round(start, 6), "end_entropy": round(end, 6),
             "ratio": round(end / start, 4), "first_step_below": self.first_below, "last_step": self.last_step,
             "num_steps": self.count})}


class LengthCollapse:
    def __init__(self, source: str, cfg: rr.LengthCollapseConfig) -> None:
        self.source, self.cfg = source, cfg
        self.runs = {"truncated": TrailingRun(), "empty": TrailingRun()}
        self.clipped: deque[float] = deque(maxlen=WINDOW)
        self.lengths: deque[float] = deque(maxlen=WINDOW)
        self.records_max_length: int | None = None  # the limit the rollout records state (event log)
        self.logged_max_length: int | None = None  # else the largest logged length
        self.logged_clipped = self.logged_length = False

    def update(self, s: LoggedStep) -> None:
        m, r = s.metrics, s.rollouts
        self.logged_clipped = self.logged_clipped or "clipped_frac" in m
        self.logged_length = self.logged_length or "completion_length_mean" in m
        from_records = s.source == EVENT_LOG_SOURCE and r is not None
        clipped = m.get("clipped_frac") if self.logged_clipped else (r.truncated_frac if from_records else None)
        length = (m.get("completion_length_mean") if self.logged_length
                  else (r.length_mean if from_records else None))
        if from_records and r.max_length is not None:
            self.records_max_length = max(self.records_max_length or 0, r.max_length)
        if "completion_length_max" in m:
            self.logged_max_length = max(self.logged_max_length or 0, int(m["completion_length_max"]))
        if clipped is not None:
            self.clipped.append(clipped)
            self.runs["truncated"].add(s.step, _flag(rr.truncated(clipped, self.cfg)))
        if length is not None:
            self.lengths.append(length)
            self.runs["empty"].add(s.step, _flag(rr.empty(length, self.cfg)))

    def standing(self) -> dict[tuple, dict[str, Any]]:
        out = {}
        for kind, run in self.runs.items():
            if not run.lasted(self.cfg.min_consecutive_steps):
                continue
            what = "were cut at the length limit" if kind == "truncated" else "were empty (at most one token)"
            out[("length-collapse", self.source, run.first, kind)] = _finding(
                "length-collapse", "warning",
                f"completions {what} for {run.count} steps in a row ({run.first}-{run.last})", run.first,
                {"source": self.source, "kind": kind, "first_step": run.first, "last_step": run.last,
                 "num_steps": run.count, "clipped_frac": _finite(_median(self.clipped)),
                 "length_mean": _finite(_median(self.lengths)),
                 "max_length": self.records_max_length if self.records_max_length is not None
                 else self.logged_max_length})
        return out


class StaleRolloutWeights:
    def __init__(self, source: str, cfg: rr.StaleRolloutWeightsConfig) -> None:
        self.source, self.cfg = source, cfg
        self.metric: str | None = None
        self._reset()

    def _reset(self) -> None:
        self.head: list[float] = []
        self.tail: deque[float] = deque(maxlen=max(self.cfg.window_steps, 1))
        self.count = 0
        self.first_step = self.last_step = None

    def update(self, s: LoggedStep) -> None:
        metric = next((m for m in rr.DRIFT_METRICS if m in s.metrics), None) if s.logged else None
        if metric is None:
            return
        order = list(rr.DRIFT_METRICS)
        if self.metric is None or order.index(metric) < order.index(self.metric):
            self.metric = metric  # the first metric in order this source logs is the one judged
            self._reset()
        value = s.metrics.get(self.metric)
        if value is None:
            return
        if len(self.head) < self.cfg.window_steps:
            self.head.append(value)
        self.tail.append(value)
        self.count += 1
        self.first_step = s.step if self.first_step is None else self.first_step
        self.last_step = s.step

    def standing(self) -> dict[tuple, dict[str, Any]]:
        if self.metric is None or self.count < self.cfg.min_steps:
            return {}
        early, late = statistics.median(self.head), statistics.median(self.tail)
        if not rr.drifted(early, late, self.metric, self.cfg):
            return {}
        title = (f"rollout and trainer log-probabilities drift apart: {self.metric} grew from {early:.3g} "
                 f"to {late:.3g}")
        return {("stale-rollout-weights", self.source, self.first_step): _finding(
            "stale-rollout-weights", "warning", title, self.first_step,
            {"source": self.source, "metric": self.metric, "early_value": round(early, 6),
             "late_value": round(late, 6), "ratio": round(late / early, 2) if early else None,
             "first_step": self.first_step, "last_step": self.last_step, "num_steps": self.count})}


class SourceRules:
    """Every rule's state for one source."""

    def __init__(self, source: str, configs: LiveConfigs | None = None) -> None:
        c = configs or LiveConfigs()
        self.source = source
        # root causes before their consequences (analysis/incidents.py): constant-reward explains dead-step
        self.rules = [NanLoss(source, c.nan_loss), ConstantReward(source, c.constant_reward),
                      DeadStep(source, c.dead_step), ZeroStdGroups(source, c.zero_std_groups),
                      ZeroKl(source, c.zero_kl), LengthCollapse(source, c.length_collapse),
                      EntropyCollapse(source, c.entropy_collapse),
                      StaleRolloutWeights(source, c.stale_rollout_weights)]
        self.last_step: int | None = None

    def update(self, s: LoggedStep) -> None:
        for rule in self.rules:
            rule.update(s)
        self.last_step = s.step

    def standing(self) -> dict[tuple, dict[str, Any]]:
        out: dict[tuple, dict[str, Any]] = {}
        for rule in self.rules:
            out.update(rule.standing())
        return out
