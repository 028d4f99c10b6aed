"""Rank lists as people write them: [0, 1, 2, 3, 5, 7, 8] -> "0-3,5,7-8".

Typical use:
    print(f"no records from rank(s) {format_ranks(missing)}")
"""
from __future__ import annotations

from collections.abc import Iterable


def format_ranks(ranks: Iterable[int]) -> str:
    """[0, 1, 2, 3, 5, 7, 8] -> "0-3,5,7-8"."""
    ordered = sorted(set(ranks))
    runs: list[list[int]] = []
    for r in ordered:
        if runs and r == runs[-1][-1] + 1:
            runs[-1].append(r)
        else:
            runs.append([r])
    return ",".join(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)
