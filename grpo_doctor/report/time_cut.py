"""Where to cut a timeline's time axis: the one long stretch in which nothing was recorded.

A run that ends in a hang has a last phase open for minutes after steps that took a second each;
drawn to scale, the steps shrink to a sliver beside one long bar. The cut leaves out the middle of
the longest stretch without any event (a phase beginning or ending, an error, watch detecting the
hang) when that stretch is most of the window, and keeps a little of it on both sides so that the
bars that cross it still show where they begin and end. Pure numpy: plots.py draws with it.

Typical use:
    cut = find_cut(event_times_s, end_s)        # times in seconds since the window's start
    if cut:
        x = cut.to_axis(x)                       # drawn positions; cut.to_time() goes back
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_GAP_FRACTION = 0.5  # cut only a stretch that is at least this much of the window
KEPT_FRACTION = 1 / 6  # of the rest of the window, kept on each side of the cut


@dataclass(frozen=True)
class TimeCut:
    """The drawn axis leaves out [from_s, to_s); `at_end` when the stretch lasts to the window's end."""

    from_s: float
    to_s: float
    at_end: bool

    @property
    def hidden_s(self) -> float:
        return self.to_s - self.from_s

    def to_axis(self, t_s: np.ndarray | float) -> np.ndarray:
        t = np.asarray(t_s, dtype=float)
        return np.where(t <= self.from_s, t, np.where(t >= self.to_s, t - self.hidden_s, self.from_s))

    def to_time(self, x: np.ndarray | float) -> np.ndarray:
        x = np.asarray(x, dtype=float)
        return np.where(x <= self.from_s, x, x + self.hidden_s)


def find_cut(event_times_s: np.ndarray, end_s: float) -> TimeCut | None:
    """The cut for events at `event_times_s` in a window [0, end_s], or None when the longest
    stretch without an event is less than half of it (nothing is squashed then)."""
    times = np.unique(np.concatenate([[0.0, end_s], np.asarray(event_times_s, dtype=float)]))
    times = times[np.isfinite(times) & (times >= 0.0) & (times <= end_s)]
    if len(times) < 2 or end_s <= 0:
        return None
    gaps = np.diff(times)
    i = int(np.argmax(gaps))
    gap = float(gaps[i])
    if gap < MIN_GAP_FRACTION * end_s:
        return None
    begin, end = float(times[i]), float(times[i + 1])
    kept = max((end_s - gap) * KEPT_FRACTION, gap * 0.005)
    if gap - 2 * kept <= 0:
        return None
    return TimeCut(from_s=begin + kept, to_s=end - kept, at_end=end >= end_s - 0.1 * gap)


def duration_text(seconds: float) -> str:
    """"0.4 s", "20 s", "31 min": as precise as a label on a bar needs."""
    if seconds >= 120:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"
