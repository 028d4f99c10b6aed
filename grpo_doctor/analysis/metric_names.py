"""The step metrics' canonical vocabulary (schema/metric_vocab.py) as pandas columns, for the report's rules.

The names, their aliases in each framework and what a plain `reward_std` means are defined once in
schema/metric_vocab.py, where watch's live rules read them too (one dict per logged step); this
module builds the report's columns from the same definitions and re-exports them.

Typical use:
    canonical = canonical_frame(raw_steps, reward_std_is="batch")   # columns: step, loss, reward_std_batch, ...
    framework_of(["actor/entropy", "critic/score/mean"])              # "verl"
"""
from __future__ import annotations

import pandas as pd

from grpo_doctor.schema.metric_vocab import (  # noqa: F401 - re-exported: the analysis reads them here
    ALIASES,
    CANONICAL,
    FUNC_STD,
    OPENRLHF,
    REWARD_STD_MEANINGS,
    SPANS,
    SWIFT,
    TRL,
    VERL,
    aliases_for,
    framework_entry,
    framework_of,
    logged_name,
)


def canonical_frame(raw: pd.DataFrame, reward_std_is: str) -> pd.DataFrame:
    """`raw`'s identifying columns (step, rank, host, t, source where present) plus the canonical
    metrics found in it, numeric (strings become NaN). `reward_std_is`: what a plain `reward_std` means."""
    aliases = aliases_for(reward_std_is)
    out = raw[[c for c in ("source", "rank", "host", "step", "t") if c in raw.columns]].copy()
    for name, keys in aliases.items():
        column = None
        for key in keys:
            if key in raw.columns:
                values = pd.to_numeric(raw[key], errors="coerce")
                column = values if column is None else column.combine_first(values)
        if column is not None:
            out[name] = column.astype(float)
    func_stds = [c for c in raw.columns if FUNC_STD.match(str(c))]
    if "reward_func_std_max" in raw.columns:
        func_stds.append("reward_func_std_max")
    if func_stds:
        out["reward_func_std_max"] = raw[func_stds].apply(pd.to_numeric, errors="coerce").max(axis=1, skipna=True)
    for name, high, low in SPANS:
        if name in raw.columns:
            out[name] = pd.to_numeric(raw[name], errors="coerce").astype(float)
        elif high in raw.columns and low in raw.columns:
            high_values, low_values = (pd.to_numeric(raw[c], errors="coerce").astype(float) for c in (high, low))
            out[name] = (high_values - low_values) if name == "reward_range_batch" else \
                pd.concat([high_values.abs(), low_values.abs()], axis=1).max(axis=1, skipna=False)
    return out
