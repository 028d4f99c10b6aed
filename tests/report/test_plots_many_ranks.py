"""The phase timeline of a run with hundreds of ranks stays readable: a bounded number of rows, the
rank that hangs among them, and a note saying how many were drawn."""
from __future__ import annotations

import pandas as pd

from grpo_doctor.analysis.load import PHASE_COLUMNS, Evidence
from grpo_doctor.report.plots import TIMELINE_MAX_RANKS, phase_timeline


def test_timeline_of_many_ranks_draws_the_hung_rank_and_says_how_many_it_left_out(tmp_path):
    rows = []
    for rank in range(300):
        for step in range(3):
            begin = 10.0 * step
            open_now = rank == 217 and step == 2  # the hung rank: its last rollout never ends
            rows.append([rank, f"node-{rank // 8}", step, "rollout", "rollout", begin,
                         None if open_now else begin + 4.0, None if open_now else 4.0, None])
    ev = Evidence(paths=[tmp_path], phases=pd.DataFrame(rows, columns=PHASE_COLUMNS))
    plot = phase_timeline(ev)
    assert f"{TIMELINE_MAX_RANKS} of 300 ranks drawn" in plot.note
    assert any(label.startswith("rank 217: rollout (open") for label in plot.labels)
