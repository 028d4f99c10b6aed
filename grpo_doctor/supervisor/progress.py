"""Follow every rank's event log as it grows and decide when a rank has stalled.

Progress is any new record from a rank (phase begin/end, step). The timeout is learned from
the run itself, as nvidia-resiliency-ext does for its sections: for each phase, the longest
interval between two consecutive records seen while that phase was the open one, times a
safety factor, never below a floor. A phase never seen to finish yet gets `initial_s`. A rank
waiting in a collective inside a normally short phase therefore stalls quickly, and the rank
stuck in a long phase stalls after a multiple of that phase's longest duration. Time between
phases (a reward function that `--instrument` does not wrap, an unmarked checkpoint save) is
bounded by a whole step: once two steps were seen, it gets the same factor times the longest step
(or gap) seen, so a stall there is caught about as fast as inside a phase; before that, `initial_s`.

Staleness is measured on the supervisor's clock from the moment a record was *seen*, so hosts
with skewed clocks do not matter; intervals are learned from the records' own monotonic time.

Typical use:
    tracker = ProgressTracker(paths, HangPolicy())
    tracker.poll(now_mono)                     # read what the ranks appended
    stalled = tracker.stalled(now_mono)        # {rank: seconds without progress}
"""
from __future__ import annotations

import stat
from dataclasses import dataclass, field
from pathlib import Path

from grpo_doctor.runlog.decoder import RankFileTail
from grpo_doctor.runlog.rank_log import advance_open_phases
from grpo_doctor.schema import (
    End,
    Error,
    Header,
    PhaseEnd,
    Record,
    RunPaths,
    Step,
)


@dataclass(frozen=True)
class HangPolicy:
    """When a rank counts as stalled. `fixed_s` (--hang-timeout) replaces the learned timeout."""

    factor: float = 5.0  # x the longest interval seen in that phase
    floor_s: float = 30.0  # never less: checkpoint writes and GC pauses are normal
    initial_s: float = 300.0  # a phase not yet seen to finish (first step, model loading)
    fixed_s: float | None = None

    def timeout_s(self, longest_seen_s: float | None) -> float:
        if self.fixed_s is not None:
            return self.fixed_s
        if longest_seen_s is None:
            return self.initial_s
        return max(self.floor_s, self.factor * longest_seen_s)


@dataclass
class RankProgress:
    rank: int
    host: str | None = None
    pid: int | None = None
    step: int | None = None
    stack: list[str] = field(default_factory=list)  # open phase paths
    seen_mono: float | None = None  # supervisor clock when the last record arrived
    last_record_mono: float | None = None  # the rank's own clock of its last record
    longest_s: dict[str, float] = field(default_factory=dict)  # open phase path ("" = none) -> longest interval
    last_step_mono: float | None = None  # the rank's own clock at its last step record
    longest_step_s: float | None = None  # the longest interval between two step records
    last_left: str | None = None  # the phase that ended last: where a rank between phases came from
    ended: str | None = None  # End reason, or "error" type
    error: str | None = None
    num_records: int = 0

    @property
    def open_path(self) -> str | None:
        return self.stack[-1] if self.stack else None

    def apply(self, record: Record, seen_mono: float) -> None:
        key = self.open_path or ""
        if self.last_record_mono is not None and not isinstance(record, Header):
            interval = record.mono - self.last_record_mono
            if interval > self.longest_s.get(key, 0.0):
                self.longest_s[key] = interval
        self.last_record_mono, self.seen_mono = record.mono, seen_mono
        self.host, self.pid, self.num_records = record.host, record.pid, self.num_records + 1
        if record.step is not None:
            self.step = record.step
        advance_open_phases(self.stack, record)
        if isinstance(record, Header):
            self.ended = self.error = None
        elif isinstance(record, Step):
            self.step = record.step + 1
            if self.last_step_mono is not None:
                self.longest_step_s = max(self.longest_step_s or 0.0, record.mono - self.last_step_mono)
            self.last_step_mono = record.mono
        elif isinstance(record, PhaseEnd):
            self.last_left = record.path
        elif isinstance(record, Error):
            self.error = f"{record.exc_type} in {record.path or 'no phase'}"
        elif isinstance(record, End):
            self.ended = str(record.reason)
            self.stack = [record.open_path] if record.open_path else []


class ProgressTracker:
    def __init__(self, paths: RunPaths, policy: HangPolicy) -> None:
        self.paths = paths
        self.policy = policy
        self.ranks: dict[int, RankProgress] = {}
        self._tails: dict[Path, RankFileTail] = {}
        self._num_bad_records = 0  # decoded, but with a field apply() cannot use

    def poll(self, now_mono: float) -> list[Record]:
        """Read new records of every rank file; returns them."""
        new: list[Record] = []
        try:
            paths = self.paths.rank_files()
        except OSError:  # a run directory that cannot be reached (a name too long): no rank file, watch said why
            paths = []
        for path in paths:
            if path not in self._tails and not _regular_file(path):
                continue  # a FIFO (or a device) named like a rank file: opening it would block the loop
            tail = self._tails.setdefault(path, RankFileTail(path))
            for record in tail.read_records():
                try:
                    self.ranks.setdefault(record.rank, RankProgress(record.rank)).apply(record, now_mono)
                except (TypeError, ValueError, AttributeError):  # a field of the wrong type
                    self._num_bad_records += 1
                    continue
                new.append(record)
        return new

    @property
    def num_bad_lines(self) -> int:
        return self._num_bad_records + sum(tail.num_bad_lines for tail in self._tails.values())

    def timeout_s(self, progress: RankProgress) -> float:
        key = progress.open_path or ""
        learned = self.policy.timeout_s(progress.longest_s.get(key))
        if key == "" and self.policy.fixed_s is None:
            # Between phases run checkpoint saves and evaluations the loop did not mark: a few short
            # gaps say nothing about them, a whole step does (a step holds every gap of its own).
            if progress.longest_step_s is None:
                return max(learned, self.policy.initial_s)
            return max(learned, self.policy.timeout_s(progress.longest_step_s))
        return learned

    def stalled(self, now_mono: float) -> dict[int, float]:
        """Ranks still running that made no progress for longer than their timeout: rank -> idle s."""
        out = {}
        for rank, p in self.ranks.items():
            if p.ended is not None or p.seen_mono is None:
                continue
            idle_s = now_mono - p.seen_mono
            if idle_s > self.timeout_s(p):
                out[rank] = idle_s
        return out

    def running(self) -> list[int]:
        return [r for r, p in self.ranks.items() if p.ended is None]


def _regular_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return False
