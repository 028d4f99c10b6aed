"""A metric panel shows every value logged: a rank's metric with one value is a dot, not an invisible line of
one point (seen on tests/data/inject/oom: two steps give one step time per rank, and its panel was empty)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from grpo_doctor.report.plots import MAX_LINES, _lines_by  # noqa: E402


def _drawn(table: pd.DataFrame) -> list[tuple[int, str]]:
    fig, ax = plt.subplots()
    try:
        _lines_by(ax, table, "step", "value", 0.0, scale=1.0, by="rank")
        return [(len(line.get_xdata()), str(line.get_marker())) for line in ax.lines]
    finally:
        plt.close(fig)


def test_a_single_value_is_drawn_as_a_dot_and_a_series_as_a_line():
    table = pd.DataFrame({"rank": [0, 1, 1], "step": [1, 1, 2], "value": [0.5, 0.4, 0.6]})
    assert _drawn(table) == [(1, "o"), (2, "None")]


def test_many_ranks_with_one_step_show_their_median_as_a_dot():
    ranks = MAX_LINES + 1
    table = pd.DataFrame({"rank": range(ranks), "step": [3] * ranks, "value": [float(r) for r in range(ranks)]})
    assert _drawn(table) == [(1, "o")]
