"""When watch investigates a stall: once when it begins, then again only as it keeps growing.

An investigation pauses every rank for py-spy twice (the stacks and the second look), so it must
be rare. A stall is one state of the ranks' progress, named by its key: the records each rank has
written (instrumented ranks; their output does not count, a stalled rank that keeps printing is
still stalled) or the output and CPU seen (uninstrumented jobs, where output is the only sign of
work). A new key is a new stall, investigated at once. A stall that persists is looked at again
only when its idle time has grown fourfold since the last look (`backoff`), at most `max_looks` times in
all, so a job stuck for hours is paused a handful of times, not every loop.

Typical use:
    schedule = StallSchedule()
    if schedule.due(key, idle_s):
        investigate(...)
"""
from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field


@dataclass
class StallSchedule:
    backoff: float = 4.0  # look again once the idle time is this many times the last look's
    max_looks: int = 3  # investigations of one stall, the first included
    _key: Hashable | None = field(default=None, init=False)
    _looks: int = field(default=0, init=False)
    _last_idle_s: float = field(default=0.0, init=False)

    def due(self, key: Hashable, idle_s: float) -> bool:
        """Whether to investigate now: a new stall, or one whose idle time grew `backoff`-fold since
        the last look. Counts the look when it answers True."""
        if key != self._key:
            self._key, self._looks = key, 0
        elif self._looks >= self.max_looks or idle_s < self.backoff * self._last_idle_s:
            return False
        self._looks += 1
        self._last_idle_s = max(idle_s, 1e-3)
        return True

    @property
    def looks(self) -> int:
        """Investigations of the current stall so far."""
        return self._looks
