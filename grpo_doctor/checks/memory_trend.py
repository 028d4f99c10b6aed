"""Creeping memory: a robust trend of per-step (or per-interval) peaks, and when it meets a capacity.

Pure math, numpy only: `analysis/rules/memory_growth.py` runs it over a finished run's records and
watch's samples, and watch's live sentinel can call `memory_growth_check` as the steps come in (no
pandas, no I/O, no state kept between calls: pass the recent values each time).

The trend (`fit_growth`). The first `warmup_points` values are warm-up and never trended (lazy
initialisation, the allocator filling its cache, the first long batch). Over the last `window_points`
after them the slope is Theil-Sen's (the median of the slopes between every pair of points: one-off
jumps of the allocator barely move it), and it counts as growth only when
  - the memory rises from step to step most of the time: in `min_rising_frac` of the changes between
    consecutive blocks of steps (the window cut into `num_blocks`, each block's median). Blocks, not
    single steps: a leak of a few MB a step drowns in the tens of MB a snapshot varies by, a block of
    steps does not; memory that rose once and stays flat rises between one pair of blocks only;
  - each half of the window grows too (`min_half_ratio` of the slope): a rise that stopped, or one
    jump, leaves one half flat;
  - the growth over the window reaches `min_growth_bytes` (a Python process creeping by kilobytes a
    step, metrics kept in lists, is no memory problem) and `min_growth_noise_ratio` times the noise
    around the line (a robust sigma of the residuals: a slope drawn from noise is no trend).
Where the whole window shows no such growth, its later half is tried, then its later quarter, ...
while they hold twice `min_points`: growth that began lately. The projection: the fitted line at the last point, continued at the same slope to the capacity.
Severity: "critical" when that is less than `critical_within_s` away (or, without step times,
`critical_within_steps` steps), "warning" otherwise and when no capacity is known.

Typical use (the incremental check, e.g. once a step in the live sentinel):
    found = memory_growth_check(peak_bytes, capacity_bytes=gpu_total_bytes, steps=steps, times_s=step_end_times)
    if found:  # {"id": "memory-growth", "severity": "warning" | "critical", "title": ..., "evidence": {...}}
        print(found["title"])  # "memory grows 0.45 GiB per step; at this rate it reaches the 79.1 GiB ..."
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from grpo_doctor.schema.human_text import format_bytes

ID = "memory-growth"
GIB = 2**30
MIB = 2**20


@dataclass(frozen=True)
class TrendConfig:
    warmup_points: int = 5  # the first steps (or sample intervals) are never trended
    window_points: int = 200  # the trend is fitted over at most the last this many points after warm-up
    min_points: int = 10  # fewer points after warm-up: no verdict
    num_blocks: int = 8  # the window is cut into this many blocks of consecutive steps (intervals)
    min_rising_frac: float = 0.7  # at least this share of the changes between consecutive blocks are rises
    min_half_ratio: float = 0.25  # each half of the window grows at least this share of the window's slope
    min_growth_bytes: int = 256 * MIB  # the window's growth at the fitted slope; less is no memory problem
    min_growth_noise_ratio: float = 3.0  # and it is at least this many times the values' noise around the line
    critical_within_s: float = 2 * 3600.0  # the projected OOM is nearer than this (wall time): critical
    critical_within_steps: float = 100.0  # without step times: nearer than this many steps


@dataclass(frozen=True)
class MemoryGrowthConfig:
    """The `memory-growth` rule's thresholds: the report's rule (analysis/rules/memory_growth.py) and watch's
    live one (supervisor/live_memory.py) read this one class; the trend's fields are TrendConfig's."""

    warmup_points: int = 5  # the first steps (sample intervals) are never trended
    window_points: int = 200  # the trend is fitted over at most the last this many steps (intervals)
    min_points: int = 10  # fewer steps after warm-up: no verdict
    num_blocks: int = 8  # the window is cut into this many blocks of consecutive steps (intervals)
    min_rising_frac: float = 0.7  # this share of the changes between consecutive blocks' medians are rises
    min_half_ratio: float = 0.25  # each half of the window grows at least this share of the window's slope
    min_growth_bytes: int = 256 * MIB  # growth over the window, at the fitted slope, to be reported
    min_growth_noise_ratio: float = 3.0  # and at least this many times the noise around the fitted line
    critical_within_s: float = 7200.0  # projected OOM sooner than this: critical
    critical_within_steps: float = 100.0  # without step times: sooner than this many steps
    component_share: float = 0.5  # a part of the card's growth at least this share of it is named as the cause
    sample_interval_s: float = 60.0  # watch's samples: the largest value of each interval this long is a point
    min_retry_rises: int = 3  # allocation retries rising in at least this many steps of the window
    min_retry_frac: float = 0.5  # and in at least this share of them: "climbing"

    def trend(self) -> TrendConfig:
        names = {f.name for f in fields(TrendConfig)}
        return TrendConfig(**{f.name: getattr(self, f.name) for f in fields(self) if f.name in names})


# Where the card's growth goes (a finding's `component`), and the capacities a projection runs against.
WHERE = {
    "allocated": "the trainer's allocated memory: tensors kept alive, a leak in the training code",
    "reserved": "the trainer's reserved memory; allocated flat: cached blocks, not a tensor leak",
    "other-processes": "outside the trainer's allocator: other processes on the GPU (the rollout engine)",
    "gpu-used": "the card's used memory; the trainer's allocator was not recorded",
}
CAPACITY_NAMES = {"gpu-total": "card", "ram": "host's RAM", "cgroup-memory-max": "memory cgroup limit",
                  "rlimit-as": "address-space limit (RLIMIT_AS)"}


def sampled_gpu_component(pid: int | None, pid_rank: int | None) -> tuple[str, str]:
    """From watch's samples, the card's fastest-growing process: (a key of WHERE, the words naming it)."""
    if pid is None:
        return "gpu-used", ""
    if pid_rank is not None:
        return "gpu-used", f" (rank {pid_rank}'s process, pid {pid})"
    return "other-processes", f" (pid {pid}, no rank: the rollout engine or another job)"


def gpu_component(card_slope: float, split: dict[str, float | None], component_share: float) -> str:
    """Which part of a card's growth is the cause, from the window slopes of `split` ("allocated",
    "reserved", "other": the card's used memory less the trainer's reserved); a key of WHERE."""
    reserved, allocated, other = split["reserved"], split["allocated"], split["other"]
    if reserved is None:
        return "gpu-used"
    if other is not None and other >= component_share * card_slope:
        return "other-processes"
    if allocated is not None and allocated >= component_share * max(reserved, 0.0) and allocated > 0:
        return "allocated"
    return "reserved"


@dataclass(frozen=True)
class Growth:
    """Sustained growth found in a window of points (x: steps or seconds; values: bytes)."""

    slope: float  # bytes per unit of x
    intercept: float
    level: float  # the fitted line at the last x, bytes
    first_x: float
    last_x: float
    last_value: float
    num_points: int
    rising_frac: float

    @property
    def growth(self) -> float:
        return self.slope * (self.last_x - self.first_x)


def theil_sen(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """Theil-Sen line through (x, y): the median of the pairwise slopes, and the median intercept."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.size < 2:
        return 0.0, float(y[0]) if y.size else 0.0
    i, j = np.triu_indices(x.size, 1)
    dx = x[j] - x[i]
    keep = dx != 0
    slopes = (y[j] - y[i])[keep] / dx[keep]
    slope = float(np.median(slopes)) if slopes.size else 0.0
    return slope, float(np.median(y - slope * x))


def window(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray, cfg: TrendConfig,
           points: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The points a trend is fitted on: finite ones in x order, warm-up dropped, the last `points`
    (by default `window_points`)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    order = np.argsort(x, kind="stable")
    x, y = x[order][cfg.warmup_points:], y[order][cfg.warmup_points:]
    n = cfg.window_points if points is None else points
    return x[-n:], y[-n:]


def window_slope(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray, cfg: TrendConfig,
                 points: int | None = None) -> float | None:
    """Theil-Sen slope of another series over the same window (for attribution); None with too few points."""
    wx, wy = window(x, y, cfg, points)
    return theil_sen(wx, wy)[0] if wx.size >= min(cfg.min_points, points or cfg.min_points) else None


def fit_growth(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray,
               cfg: TrendConfig | None = None) -> Growth | None:
    """Sustained growth of y over x (see the module doc), or None. The window is the last `window_points`
    after warm-up; where that shows no growth, its later half, quarter, ... while they hold at least
    twice `min_points` (growth that began lately), the first that does."""
    cfg = cfg or TrendConfig()
    wx, wy = window(x, y, cfg)
    size = wx.size
    if size < max(cfg.min_points, 3):
        return None
    while True:
        found = _fit(wx[-size:], wy[-size:], cfg)
        if found is not None or size // 2 < 2 * cfg.min_points:  # a shorter part is too short to judge
            return found
        size //= 2


def _fit(wx: np.ndarray, wy: np.ndarray, cfg: TrendConfig) -> Growth | None:
    if np.ptp(wy) < 0.5 * cfg.min_growth_bytes:  # cheap: nothing that grew enough can be this flat
        return None
    num_blocks = min(cfg.num_blocks, wy.size)
    size = wy.size // num_blocks  # equal blocks ending at the last point (the oldest remainder left out)
    medians = np.median(wy[wy.size - num_blocks * size:].reshape(num_blocks, size), axis=1)
    rising = float((np.diff(medians) > 0).mean())
    if rising < cfg.min_rising_frac:
        return None
    slope, intercept = theil_sen(wx, wy)
    growth = slope * (wx[-1] - wx[0])
    noise = 1.4826 * float(np.median(np.abs(wy - intercept - slope * wx)))  # robust sigma of the residuals
    if slope <= 0 or growth < cfg.min_growth_bytes or growth < cfg.min_growth_noise_ratio * noise:
        return None
    half = wx.size // 2  # both halves grow: one jump lies in one half, the other is flat
    if min(theil_sen(wx[:half], wy[:half])[0], theil_sen(wx[half:], wy[half:])[0]) < cfg.min_half_ratio * slope:
        return None
    return Growth(slope=slope, intercept=intercept, level=intercept + slope * wx[-1], first_x=float(wx[0]),
                  last_x=float(wx[-1]), last_value=float(wy[-1]), num_points=int(wx.size), rising_frac=rising)


def seconds_per_step(steps: Sequence[float] | np.ndarray, times_s: Sequence[float] | np.ndarray,
                     cfg: TrendConfig | None = None, points: int | None = None) -> float | None:
    """Wall seconds a step takes lately (Theil-Sen over the trend's window); None when unknown."""
    cfg = cfg or TrendConfig()
    wx, wt = window(steps, times_s, cfg, points)
    if wx.size < 2:
        return None
    rate = theil_sen(wx, wt)[0]
    return rate if rate > 0 else None


def memory_growth_check(values_bytes: Sequence[float] | np.ndarray, capacity_bytes: float | None = None, *,
                        steps: Sequence[float] | np.ndarray | None = None,
                        times_s: Sequence[float] | np.ndarray | None = None,
                        config: TrendConfig | None = None, what: str = "memory") -> dict[str, Any] | None:
    """The incremental check: given recent per-step peaks (with `steps`, and `times_s` when known) or
    per-interval peaks (`times_s` alone) and the capacity they must stay under, a finding dict
    {"id", "severity", "title", "evidence"} when the memory grows steadily, None when it does not.

    Evidence (units in the names; None where unknown): `slope_bytes_per_step`, `slope_bytes_per_s`,
    `level_bytes` (the fitted line now), `last_bytes`, `capacity_bytes`, `headroom_bytes`, `first_step`,
    `last_step`, `projected_step` (where the line meets the capacity), `steps_left`, `time_left_s`,
    `window_s` (the time the window spans), `num_points`, `rising_frac` (share of the block-to-block changes
    that rise), `growth_bytes` (over the window).
    """
    cfg = config or TrendConfig()
    if steps is None and times_s is None:
        raise ValueError("memory_growth_check needs steps or times_s")
    per_step = steps is not None
    x = np.asarray(steps if per_step else times_s, dtype=float)
    values = np.asarray(values_bytes, dtype=float)
    found = fit_growth(x, values, cfg)
    if found is None:
        return None
    step_s = seconds_per_step(x, times_s, cfg, found.num_points) if per_step and times_s is not None else None
    slope_s = found.slope / step_s if per_step and step_s else (None if per_step else found.slope)
    capacity = float(capacity_bytes) if capacity_bytes else None
    headroom = capacity - found.level if capacity else None
    left = max(0.0, headroom) / found.slope if headroom is not None else None
    steps_left = left if per_step else None
    time_left = None if left is None else (left * step_s if step_s else None) if per_step else left
    if time_left is not None:
        near = time_left <= cfg.critical_within_s
    else:
        near = steps_left is not None and steps_left <= cfg.critical_within_steps
    wx, _ = window(x, values, cfg, found.num_points)
    window_s = None
    if times_s is not None:
        _, wt = window(x, times_s, cfg, found.num_points)
        window_s = float(wt[-1] - wt[0]) if wt.size else None
    evidence = {
        "slope_bytes_per_step": float(found.slope) if per_step else None,
        "slope_bytes_per_s": float(slope_s) if slope_s is not None else None,
        "level_bytes": int(found.level),
        "last_bytes": int(found.last_value),
        "capacity_bytes": int(capacity) if capacity else None,
        "headroom_bytes": int(headroom) if headroom is not None else None,
        "first_step": int(wx[0]) if per_step else None,
        "last_step": int(wx[-1]) if per_step else None,
        "projected_step": int(round(found.last_x + left)) if per_step and left is not None else None,
        "steps_left": round(float(steps_left), 1) if steps_left is not None else None,
        "time_left_s": round(float(time_left), 1) if time_left is not None else None,
        "window_s": window_s,
        "num_points": found.num_points,
        "rising_frac": round(float(found.rising_frac), 3),
        "growth_bytes": int(found.growth),
    }
    return {"id": ID, "severity": "critical" if near else "warning",
            "title": f"{what} grows {rate_text(evidence)}{projection_text(evidence, 'capacity')}",
            "evidence": evidence}


def rate_text(ev: dict[str, Any]) -> str:
    """'0.45 GiB per step' or '1.7 GiB per hour'."""
    if ev.get("slope_bytes_per_step") is not None:
        return f"{format_bytes(ev['slope_bytes_per_step'])} per step"
    return f"{format_bytes(ev['slope_bytes_per_s'] * 3600)} per hour"


def projection_text(ev: dict[str, Any], capacity_name: str) -> str:
    """'; at this rate it reaches the 79.1 GiB card at about step 212, in about 1 h 40 min' ('' without capacity)."""
    if not ev.get("capacity_bytes"):
        return ""
    if ev.get("headroom_bytes") is not None and ev["headroom_bytes"] <= 0:
        return f"; it is at the {format_bytes(ev['capacity_bytes'])} {capacity_name} now"
    text = f"; at this rate it reaches the {format_bytes(ev['capacity_bytes'])} {capacity_name}"
    if ev.get("projected_step") is not None:
        text += f" at about step {ev['projected_step']}"
    if ev.get("time_left_s") is not None:
        when = (f"in about {format_duration(ev['time_left_s'])}" if ev["time_left_s"] >= 1 else "within a second")
        text += ("," if ev.get("projected_step") is not None else "") + f" {when}"
    return text


def format_duration(seconds: float) -> str:
    """'45 s', '12 min', '1 h 40 min', '3 d 4 h'."""
    s = max(0, round(seconds))
    if s < 90:
        return f"{s} s"
    minutes = round(s / 60)
    if minutes < 90:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"
