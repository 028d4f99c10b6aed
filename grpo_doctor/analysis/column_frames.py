"""Columns read by the reader (runlog/columns.py) joined across ranks into pandas columns.

Where the parts are not all of one compact kind, pandas gets the Python values, so a table's dtypes
are what pandas infers from the values, exactly as when the rows were lists.

Typical use:
    parts = [compact([1.5, None]), compact([3.25])]      # from the reader
    frame = pd.DataFrame({"t": joined(parts)})          # float64 with NaN, as from [1.5, None, 3.25]
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from grpo_doctor.runlog.columns import Codes, Column, FloatsWithNone


def joined(parts: Sequence[Column]) -> np.ndarray | pd.api.extensions.ExtensionArray | list:
    """One column from its parts, in order, for `pd.DataFrame({name: joined(parts)})`."""
    parts = [p for p in parts if len(p)]
    if not parts:
        return []
    arrays = [p for p in parts if isinstance(p, np.ndarray)]
    if len(arrays) == len(parts) and len({a.dtype for a in arrays}) == 1:
        return np.concatenate(arrays)
    floats = [p.values if isinstance(p, FloatsWithNone) else p for p in parts
              if isinstance(p, FloatsWithNone) or isinstance(p, np.ndarray) and p.dtype == np.float64]
    if len(floats) == len(parts):
        return np.concatenate(floats)
    coded = [p for p in parts if isinstance(p, Codes)]
    if len(coded) == len(parts):
        index: dict[str, int] = {}
        codes = [np.array([index.setdefault(v, len(index)) for v in p.values], dtype=np.int32)[p.codes]
                 for p in coded]
        # pandas' own string array for these values (what it infers from a list of them), then one
        # take: five times faster than pandas reading a million Python strings.
        strings = pd.DataFrame({"value": list(index)})["value"].array
        return strings.take(np.concatenate(codes))
    out: list = []
    for p in parts:
        out += p.tolist() if isinstance(p, np.ndarray) else p.to_list() if isinstance(p, Codes | FloatsWithNone) else p
    return out
