"""Clock skew between hosts, measured from the run's own records, and the shift that removes it.

Wall clocks of different nodes disagree (no NTP, a drifting VM clock), which puts one node's
phases seconds before or after the others on a shared timeline. GRPO steps are synchronised:
every rank leaves the gradient all-reduce of step N at nearly the same true moment and writes
its step record right after. So for each host, the median over steps of (its ranks' median step
time - the reference host's) is that host's clock offset; a median over many steps is robust to
a rank that lagged in a few. The reference is the host of the lowest rank.

Typical use:
    offsets = host_offsets(steps_table)          # {"node-1": 12.31}: node-1's clock is 12.31 s ahead
    aligned = shift_times(phases_table, offsets, ["begin_t", "end_t"])
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

MIN_SKEW_S = 0.5  # below this, what looks like skew is the time ranks take to leave a collective
MIN_COMMON_STEPS = 3  # fewer shared steps than this is too little to judge a host's clock


def host_offsets(steps: pd.DataFrame, min_skew_s: float = MIN_SKEW_S) -> dict[str, float]:
    """Seconds each host's clock is ahead of the reference host's; only hosts off by `min_skew_s` or more."""
    if steps.empty or steps["host"].nunique() < 2:
        return {}
    reference = steps.loc[steps["rank"].idxmin(), "host"]
    per_host_step = steps.groupby(["host", "step"])["t"].median().unstack("host")
    offsets: dict[str, float] = {}
    for host in per_host_step.columns:
        if host == reference:
            continue
        diffs = (per_host_step[host] - per_host_step[reference]).dropna()
        if len(diffs) < MIN_COMMON_STEPS:
            continue
        offset = float(diffs.median())
        if abs(offset) >= min_skew_s:
            offsets[str(host)] = offset
    return offsets


def shift_times(table: pd.DataFrame, offsets: Mapping[str, float], columns: Sequence[str]) -> pd.DataFrame:
    """`table` with `offsets[host]` subtracted from the time columns of that host's rows."""
    if not offsets or table.empty:
        return table
    shift = table["host"].map(offsets).fillna(0.0).astype(float)
    out = table.copy()
    for column in columns:
        out[column] = out[column].astype(float) - shift
    return out


def describe_offsets(offsets: Mapping[str, float], reference: str | None) -> list[str]:
    return [f"clock skew: host {host}'s clock is {abs(off):.2f} s {'ahead of' if off > 0 else 'behind'} "
            f"{reference or 'the reference host'}'s (from synchronised steps); its times are shifted to match"
            for host, off in sorted(offsets.items())]
