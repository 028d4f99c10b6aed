"""Table columns in a compact form, to carry them between processes and join them across ranks.

A rank file's million phase rows read in a worker process come back to the loader as columns:
numpy arrays where every value is an int or every value a float, codes into a list of distinct
strings where every value is a str, and the Python list itself otherwise (None, mixed types).
`joined` concatenates one column's parts; where the parts are not all of one compact kind it
hands pandas the Python values, so a table's dtypes are what pandas infers from the values, as
when the rows were lists.

Typical use:
    parts = [compact([1.5, 2.0]), compact([3.25])]       # in the workers
    frame = pd.DataFrame({"t": joined(parts)})          # float64, as from [1.5, 2.0, 3.25]
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class Codes:
    """A column of strings as indices into its distinct values (a host or phase name repeats a million times)."""

    __slots__ = ("codes", "values")

    def __init__(self, codes: np.ndarray, values: list[str]):
        self.codes, self.values = codes, values

    def __len__(self) -> int:
        return len(self.codes)

    def to_list(self) -> list[str]:
        return np.array(self.values, dtype=object)[self.codes].tolist()


Column = np.ndarray | Codes | list  # float64 or int64 array, strings as codes, or any Python values


def compact(values: list) -> Column:
    """The values in the smallest form that gives pandas the same column."""
    if not values:
        return values
    kinds = set(map(type, values))
    if kinds == {float}:
        return np.array(values, dtype=np.float64)
    if kinds == {int} and INT64_MIN <= min(values) and max(values) <= INT64_MAX:
        return np.array(values, dtype=np.int64)
    if kinds == {str}:
        index: dict[str, int] = {}
        codes = np.fromiter((index.setdefault(v, len(index)) for v in values), dtype=np.int32, count=len(values))
        return Codes(codes, list(index))
    return values


def repeated(value: Any, count: int) -> Column:
    """One value `count` times (a rank's number or host on each of its rows)."""
    if type(value) is str:
        return Codes(np.zeros(count, dtype=np.int32), [value])
    if type(value) is int and INT64_MIN <= value <= INT64_MAX:
        return np.full(count, value, dtype=np.int64)
    return [value] * count


def joined(parts: Sequence[Column]) -> np.ndarray | list:
    """One column from its parts, in order: an array where all parts are arrays of one dtype, else values."""
    parts = [p for p in parts if len(p)]
    if not parts:
        return []
    if all(isinstance(p, np.ndarray) for p in parts) and len({p.dtype for p in parts}) == 1:
        return np.concatenate(parts)
    if all(isinstance(p, Codes) for p in parts):
        index: dict[str, int] = {}
        codes = []
        for p in parts:  # renumber each part's codes into one list of distinct values
            remap = np.array([index.setdefault(v, len(index)) for v in p.values], dtype=np.int32)
            codes.append(remap[p.codes])
        # An object array of str: pandas infers the same string dtype as from a list of them.
        return np.array(list(index), dtype=object)[np.concatenate(codes)]
    out: list = []
    for p in parts:
        out += p.to_list() if isinstance(p, Codes) else p.tolist() if isinstance(p, np.ndarray) else p
    return out
