"""Table columns in a compact form, to carry them between processes and join them across ranks.

A rank file's phase rows, read in a worker process, come back to the loader as columns: numpy
arrays where every value is an int or every value a float (None allowed, as NaN with a mask),
codes into a list of distinct strings where every value is a str, and the Python list itself
otherwise (all None, mixed types). analysis/column_frames.py joins them into pandas tables. numpy
only: the reader is below the analysis.

Typical use:
    parts = [compact([1.5, None]), compact([3.25])]      # in the workers
"""
from __future__ import annotations

from typing import Any

import numpy as np

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class Codes:
    """Strings as indices into their distinct values (a phase name repeats a million times)."""

    __slots__ = ("codes", "values")

    def __init__(self, codes: np.ndarray, values: list[str]):
        self.codes, self.values = codes, values

    def __len__(self) -> int:
        return len(self.codes)

    def to_list(self) -> list[str]:
        return np.array(self.values, dtype=object)[self.codes].tolist()


class FloatsWithNone:
    """Floats and None (an open phase's end): NaN where None was, and where it was."""

    __slots__ = ("none", "values")

    def __init__(self, values: np.ndarray, none: np.ndarray):
        self.values, self.none = values, none

    def __len__(self) -> int:
        return len(self.values)

    def to_list(self) -> list:
        out = self.values.tolist()
        for i in np.flatnonzero(self.none).tolist():
            out[i] = None
        return out


Column = np.ndarray | Codes | FloatsWithNone | list  # int64 or float64 array, or the forms above


def compact(values: list) -> Column:
    """The values in the smallest form that gives pandas the same column."""
    if not values:
        return values
    kinds = set(map(type, values))
    if kinds == {float}:
        return np.array(values, dtype=np.float64)
    if kinds == {int}:
        try:
            return np.array(values, dtype=np.int64)
        except OverflowError:  # beyond int64: pandas holds such a column as uint64 or objects
            return values
    if kinds == {str}:
        distinct = list(dict.fromkeys(values))
        index = {v: i for i, v in enumerate(distinct)}
        return Codes(np.fromiter(map(index.__getitem__, values), dtype=np.int32, count=len(values)), distinct)
    if kinds == {float, type(None)}:
        floats = np.array(values, dtype=np.float64)  # None becomes NaN
        return FloatsWithNone(floats, np.array([v is None for v in values]))
    return values


def as_list(column: Column) -> list:
    return column.tolist() if isinstance(column, np.ndarray) else column.to_list() if isinstance(
        column, Codes | FloatsWithNone) else list(column)


def concatenated(first: Column, second: Column) -> Column:
    """One column after the other, compact again (two files of one rank: rare, so by the values)."""
    return compact(as_list(first) + as_list(second))


def selected(column: Column, keep: list[bool]) -> Column:
    return compact([value for value, kept in zip(as_list(column), keep, strict=True) if kept])


def repeated(value: Any, count: int) -> Column:
    """One value `count` times (a rank's number or host on each of its rows)."""
    if type(value) is str:
        return Codes(np.zeros(count, dtype=np.int32), [value])
    if type(value) is int and INT64_MIN <= value <= INT64_MAX:
        return np.full(count, value, dtype=np.int64)
    return [value] * count
