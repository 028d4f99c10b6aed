"""The job's logged steps as they arrive, one source at a time, for watch's live rules (live_rules.py).

Two sources, named as the report names them (analysis/rules judge each source apart):
- the event log ("grpo-doctor"): each rank's Step records (its trainer's metrics) and Rollout records,
  read by watch's ProgressTracker. A step's metrics are the median over the ranks that logged it (NaN:
  not logged, left out), as analysis/grpo_metrics.step_series takes them; a step is handed on once
  every rank still running has logged it, or once any rank has gone past it (a rank that lags or died
  does not hold the others' steps back);
- the job's printed metric lines (TRL's `{'loss': 0.0, 'reward': 1.0, ...}`, ms-swift's, verl's,
  OpenRLHF's), read by logs/metric_lines.py from stdout and stderr, each stream with its own reader as
  the report reads stdout.log and stderr.log: a row is a step as soon as it is printed.
A printed line is judged only while the event log has no step metric and no rollout (a Step record with
a metric, a Rollout record): a job with the two TRL lines has both, and the report judges only its event
log then; a job without them (or under --instrument, whose Step records hold no metric) is judged on
what it printed, in the report too (analysis/load.py reads watch's saved stdout.log and stderr.log).

Metrics are renamed to the canonical vocabulary (schema/metric_vocab.py) exactly as the report's
columns are. Memory stays bounded: a step is kept only until it is handed on (at most MAX_OPEN_STEPS
open at once), the output waiting to be parsed at most MAX_QUEUED_BYTES (past it, counted and left
out), and nothing of a step is kept after.

Typical use:
    feed = StepFeed()
    tee = OutputTee(..., on_lines=lambda b: feed.submit_output("stdout", b))   # any thread
    steps = feed.records(tracker.poll(now)) + feed.output()                    # watch's loop
"""
from __future__ import annotations

import math
import statistics
import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from grpo_doctor.checks.rollout_rules import NONFINITE_CHECKED, step_zero_std_share
from grpo_doctor.logs.metric_lines import MARKERS, MetricLineReader
from grpo_doctor.schema import End, Error, Header, Rollout, Step
from grpo_doctor.schema.metric_vocab import (
    ALIASES,
    SUMMARY_NAMES,
    canonical_metrics,
    event_log_reward_std,
    launch_arg,
    zero_std_is_batch_flag,
)
from grpo_doctor.schema.metric_vocab import (
    nonfinite as nonfinite_value,
)

EVENT_LOG_SOURCE = "grpo-doctor"  # analysis/rollout_tables.EVENT_LOG_SOURCE: the report's name for the event log
MAX_OPEN_STEPS = 16  # steps of the event log waiting for their last rank; the oldest is handed on past this
MAX_QUEUED_BYTES = 16 * 2**20  # of marked output waiting for the loop; past it, left out and counted


@dataclass(frozen=True)
class RolloutStats:
    """One step's Rollout records, as the report's rules read them (pooled over the ranks that recorded)."""

    reward_std_max: float | None  # the largest rank's own reward std
    reward_mean_range: float | None  # max - min of the ranks' mean rewards
    reward_mean: float | None  # median of the ranks' mean rewards
    zero_std_share: float | None  # checks/rollout_rules.step_zero_std_share (None: ranks split groups)
    truncated_frac: float | None  # weighted by num_completions
    length_mean: float | None
    max_length: int | None  # the completion length limit the ranks stated


@dataclass(frozen=True)
class LoggedStep:
    """One logged step of one source: canonical metrics (NaN never stored), and what nan-loss reads."""

    source: str
    step: int
    metrics: dict[str, float]
    logged: bool = True  # a Step record or a printed row (not only Rollout records)
    nonfinite: dict[str, float] = field(default_factory=dict)  # {canonical name: nan / inf} loss, grad_norm
    nonfinite_ranks: tuple[int, ...] = ()
    rollouts: RolloutStats | None = None
    beta: float | None = None  # the KL coefficient where the command line or a logged `beta` states it
    batch_flag: bool = False  # frac_reward_zero_std is TRL's batch-level flag (--scale_rewards batch)


class StepFeed:
    def __init__(self) -> None:
        self._argvs: dict[int, list[str] | None] = {}  # rank -> its command line (Header.argv)
        self.hosts: dict[int, str] = {}  # rank -> its host
        self._running: set[int] = set()  # ranks with a header and no end yet
        self._open: dict[int, dict[int, dict]] = {}  # step -> rank -> {"step": Step, "rollout": Rollout}
        self._highest: dict[int, int] = {}  # rank -> the highest step it recorded
        self._done_up_to: int | None = None  # the event log's steps up to here were handed on
        self._logged_beta: float | None = None
        self.event_log_has_metrics = False  # a Step with a canonical metric, or a Rollout, was seen
        self._readers = {"stdout": MetricLineReader(), "stderr": MetricLineReader()}
        self._queue: deque[tuple[str, bytes]] = deque()
        self._queued_bytes = 0
        self._lock = threading.Lock()
        self.skipped_output_bytes = 0

    # -- the event log ------------------------------------------------------------------------------

    def records(self, records: Iterable[object]) -> list[LoggedStep]:
        """The event log's steps that these records complete, in step order."""
        touched = False
        for rec in records:
            if isinstance(rec, Header):
                self._argvs[rec.rank] = list(rec.argv or [])
                self.hosts[rec.rank] = rec.host
                self._running.add(rec.rank)
            elif isinstance(rec, (End, Error)):
                self._running.discard(rec.rank)
                touched = True
            elif isinstance(rec, (Step, Rollout)) and rec.step is not None:
                if self._done_up_to is not None and rec.step <= self._done_up_to:
                    continue  # a lagging rank's step that was handed on without it
                kind = "step" if isinstance(rec, Step) else "rollout"
                self._open.setdefault(rec.step, {}).setdefault(rec.rank, {})[kind] = rec
                self._highest[rec.rank] = max(self._highest.get(rec.rank, rec.step), rec.step)
                if isinstance(rec, Rollout) or any(v is not None for v in rec.metrics.values()):
                    self.event_log_has_metrics = True  # as analysis/load.py decides it
                if isinstance(rec, Step) and isinstance(rec.metrics.get("beta"), (int, float)):
                    self._logged_beta = float(rec.metrics["beta"])
                touched = True
        return self._ready(final=False) if touched else []

    def finish(self) -> list[LoggedStep]:
        """At the end of the job: every step still open, and the printed lines still queued."""
        out = self._ready(final=True) + self.output()
        for stream, reader in self._readers.items():
            reader.flush()
            out += self._rows(stream, reader)
        return out

    def _ready(self, final: bool) -> list[LoggedStep]:
        out = []
        for step in sorted(self._open):
            ranks = self._open[step]
            recorded = {r for r, kinds in ranks.items() if "step" in kinds}
            waiting = self._running - recorded
            past = any(self._highest.get(r, -1) > step for r in self._highest)
            if not (final or not waiting or past or len(self._open) > MAX_OPEN_STEPS):
                break  # steps are handed on in order
            del self._open[step]
            self._done_up_to = step
            out.append(self._event_log_step(step, ranks))
        return out

    def _event_log_step(self, step: int, ranks: dict[int, dict]) -> LoggedStep:
        argvs = [self._argvs[r] for r in sorted(self._argvs)]
        meaning = event_log_reward_std(argvs)
        per_rank = [canonical_metrics(kinds["step"].metrics, meaning) for _, kinds in sorted(ranks.items())
                    if "step" in kinds]
        names = {name for metrics in per_rank for name in metrics}
        metrics = {}
        for name in names:
            values = [m[name] for m in per_rank if name in m and not math.isnan(m[name])]
            if values:
                metrics[name] = statistics.median(values)
        nonfinite, nonfinite_ranks = {}, set()
        for rank, kinds in sorted(ranks.items()):
            for name in NONFINITE_CHECKED:  # the rank's own names, as nan-loss reads Step records
                value = kinds["step"].metrics.get(name) if "step" in kinds else None
                if isinstance(value, float) and not math.isfinite(value):
                    nonfinite.setdefault(name, value)
                    nonfinite_ranks.add(rank)
        rollouts = [kinds["rollout"] for _, kinds in sorted(ranks.items()) if "rollout" in kinds]
        beta_arg = launch_arg(argvs, "--beta")
        return LoggedStep(EVENT_LOG_SOURCE, step, metrics, bool(per_rank), nonfinite, tuple(sorted(nonfinite_ranks)),
                          _rollout_stats(rollouts) if rollouts else None,
                          beta=_float(beta_arg) if beta_arg is not None else self._logged_beta,
                          batch_flag=zero_std_is_batch_flag(argvs))

    # -- the job's printed lines ---------------------------------------------------------------------

    def submit_output(self, stream: str, chunk: bytes) -> None:
        """Whole lines of the job's output (a tee thread; never blocks it): kept only when a metric line
        may be in them."""
        reader = self._readers.get(stream)
        if reader is None or (reader.pending is None and not any(m in chunk for m in MARKERS)):
            return
        with self._lock:
            if self._queued_bytes + len(chunk) > MAX_QUEUED_BYTES:
                self.skipped_output_bytes += len(chunk)
                return
            self._queue.append((stream, chunk))
            self._queued_bytes += len(chunk)

    def output(self) -> list[LoggedStep]:
        """The printed metric rows parsed since the last call (watch's loop)."""
        with self._lock:
            queued, self._queue = list(self._queue), deque()
            self._queued_bytes = 0
        out = []
        for stream, chunk in queued:
            self._readers[stream].feed_chunk(chunk)
        for stream, reader in self._readers.items():
            out += self._rows(stream, reader)
        return out

    def _rows(self, stream: str, reader: MetricLineReader) -> list[LoggedStep]:
        out = []
        for framework, entry in reader.take():
            if entry.get("step") is None or any(k in SUMMARY_NAMES for k in entry) or \
                    any(str(k).startswith("eval_") for k in entry):
                continue
            # ms-swift's plain reward_std is the mean of group stds (its --scale_rewards is not in the output)
            metrics = canonical_metrics(entry, "group_mean" if framework == "ms-swift" else "batch")
            nonfinite = {}
            for name in NONFINITE_CHECKED:  # as analysis/metric_logs.add_steps reads them
                bad = nonfinite_value(next((entry[key] for key in ALIASES[name] if key in entry), None))
                if bad is not None:
                    nonfinite[name] = bad
            out.append(LoggedStep(framework, int(entry["step"]), {k: v for k, v in metrics.items() if not math.isnan(v)},
                                  nonfinite=nonfinite))
        return out


def _rollout_stats(records: list[Rollout]) -> RolloutStats:
    with_reward = [r for r in records if r.reward_std is not None and r.reward_mean is not None]
    means = [r.reward_mean for r in records if r.reward_mean is not None]
    return RolloutStats(
        reward_std_max=max(r.reward_std for r in with_reward) if with_reward else None,
        reward_mean_range=(max(r.reward_mean for r in with_reward) - min(r.reward_mean for r in with_reward)
                           if with_reward else None),
        reward_mean=statistics.median(means) if means else None,
        zero_std_share=step_zero_std_share(records),
        truncated_frac=_pooled(records, "truncated_frac"),
        length_mean=_pooled(records, "length_mean"),
        max_length=max((r.max_length for r in records if r.max_length is not None), default=None),
    )


def _pooled(records: list[Rollout], name: str) -> float | None:
    """The ranks' values weighted by their numbers of completions (length-collapse's pooling)."""
    known = [(float(getattr(r, name)), float(r.num_completions)) for r in records
             if getattr(r, name) is not None and r.num_completions is not None]
    weight = sum(w for _, w in known)
    return sum(v * w for v, w in known) / weight if weight else None


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None
