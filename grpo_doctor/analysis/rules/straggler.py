"""`straggler`: one rank is consistently slower in a phase than the others (CASES.md case 3).

For each phase path, every rank's median duration is compared with the other ranks' median: a rank
is a straggler in that phase when it is `ratio` times slower, by a share of the step that matters
(`min_step_frac`), and it also ENDS the phase late. The last test tells the straggler from the ranks
that wait for it: they are slow in the phase holding the next collective too, but leave it together
with everyone. Evidence keys: `phases` ({path: {"rank_median_s", "others_median_s", "all_median_s",
"ratio", "late_s" (median s it ended the phase after the others), "step_median_s", "num_samples"}}).

Also every `straggler` problem `grpo-doctor probe` found before training (its
`probe/` files): evidence keys `source` ("probe"), `probe_file`, `message`, `nodes`.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from grpo_doctor.analysis import remedies
from grpo_doctor.analysis.findings import Finding
from grpo_doctor.analysis.load import Evidence
from grpo_doctor.analysis.probe_evidence import probe_findings

ID = "straggler"

GPU_COUNT_SETTINGS = {"NPROC_PER_NODE", "local_world_size", "CUDA_VISIBLE_DEVICES (count)"}
HINT_NODES = ("The nodes run different numbers of ranks: give every node the same number of GPUs (NPROC_PER_NODE and "
              "CUDA_VISIBLE_DEVICES equal everywhere); an odd node makes its ranks stragglers.")
HINT_GPU = ("Check the slow rank's GPU (nvidia-smi -q -d CLOCK,PERFORMANCE: throttling, other processes on it) and its "
            "host (CPU, dataloader_num_workers).")
HINT_PHASES = ("A slow rollout phase: give vLLM more memory where it has room (server mode 0.85-0.9; colocated, from "
               "the framework's default: " + remedies.vllm_shares() + ") or more engines in server mode ("
               + remedies.flags(remedies.TRL_SERVE, "data_parallel_size") + ", "
               + remedies.flags(remedies.SWIFT_ROLLOUT, "vllm_data_parallel_size")
               + "); a slow data phase: more dataloader_num_workers.")
HINTS = (HINT_NODES, HINT_GPU, HINT_PHASES)


@dataclass(frozen=True)
class Config:
    # All thresholds are relative: to the other ranks' time in the same phase and to the step's length.
    ratio: float = 1.5  # the rank's median time in the phase / the other ranks' median
    min_step_frac: float = 0.05  # and slower by at least this share of the median step
    min_excess_s: float = 0.05  # and by at least this much (timer and scheduler noise)
    # A rank that waits in a collective for the straggler is slow in that phase too, but ends it with the
    # others; the straggler ends its phase late. Late: by at least this share of its extra time.
    min_late_frac: float = 0.5
    min_samples: int = 2  # phase completions a rank needs before it is judged
    min_ranks: int = 2


def check(run: Evidence, cfg: Config) -> Iterator[Finding]:
    yield from probe_findings(run.probe, ID)
    done = run.phases.dropna(subset=["duration_s"])
    if done.empty:
        return
    step_s = _median_step_s(done)
    slow: dict[int, dict[str, dict]] = {}
    for path, rows in done.groupby("path"):
        stats = rows.groupby("rank")["duration_s"].agg(["median", "count"])
        stats = stats[stats["count"] >= cfg.min_samples]
        if len(stats) < cfg.min_ranks:
            continue
        # Per step: how much later than the other ranks' each rank ended this phase.
        ends = rows.pivot_table(index="step", columns="rank", values="end_t", aggfunc="max")
        others_of = dict(zip(stats.index, medians_without_each(stats["median"].to_numpy(float)), strict=True))
        for rank, row in stats.iterrows():
            med = float(row["median"])
            others = float(others_of[rank])
            excess = med - others
            if med <= cfg.ratio * others or excess < max(cfg.min_excess_s, cfg.min_step_frac * step_s):
                continue
            late_s = _median_late_s(ends, rank)
            if late_s is None or late_s < cfg.min_late_frac * excess:
                continue  # it waited for someone in this phase: slow because of another rank, not itself
            slow.setdefault(int(rank), {})[str(path)] = {
                "rank_median_s": round(med, 3), "others_median_s": round(others, 3),
                "all_median_s": round(float(stats["median"].median()), 3),
                "ratio": round(med / others, 2) if others else None, "late_s": round(late_s, 3),
                "step_median_s": round(step_s, 3), "num_samples": int(row["count"])}
    # "same GPUs on every node" only where the evidence shows the nodes' GPU counts differ
    uneven = bool(remedies.launch_differences(run) & GPU_COUNT_SETTINGS)
    hints = ((HINT_NODES,) if uneven else ()) + (HINT_GPU, HINT_PHASES)
    for rank, phases in sorted(slow.items()):
        worst = max(phases, key=lambda p: phases[p]["rank_median_s"] - phases[p]["others_median_s"])
        w = phases[worst]
        host = run.host_of(rank)
        yield Finding(
            id=ID, severity="warning",
            title=f"rank {rank} is a straggler in {worst}: median {w['rank_median_s']:.2f} s vs "
                  f"{w['others_median_s']:.2f} s for the other ranks, {w['rank_median_s'] - w['others_median_s']:.2f} s "
                  f"of every {w['step_median_s']:.2f} s step",
            ranks=(rank,), hosts=(host,) if host else (), step=None, phase=worst,
            evidence={"phases": phases}, hints=hints,
        )


def medians_without_each(values: np.ndarray) -> np.ndarray:
    """For each value, the median of the others: one sort, not one median per rank (1,024 ranks
    would make that a million-element pass per phase)."""
    n = len(values)
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    position = np.empty(n, dtype=np.int64)
    position[order] = np.arange(n)

    def nth_without(k: np.ndarray) -> np.ndarray:  # the k-th smallest of the others
        return ordered[np.where(k < position, k, k + 1)]

    rest = n - 1
    if rest % 2:
        return nth_without(np.full(n, rest // 2))
    return (nth_without(np.full(n, rest // 2 - 1)) + nth_without(np.full(n, rest // 2))) / 2


def _median_step_s(done) -> float:
    """The median time from a rank's first phase begin to its last phase end in one step."""
    spans = done.groupby(["rank", "step"]).agg(begin=("begin_t", "min"), end=("end_t", "max"))
    return float((spans["end"] - spans["begin"]).median()) if not spans.empty else 0.0


def _median_late_s(ends, rank) -> float | None:
    """Median over steps of how long after the other ranks' (median) end `rank` ended the phase."""
    if rank not in ends.columns or len(ends.columns) < 2:
        return None
    late = ends[rank] - ends.drop(columns=[rank]).median(axis=1)
    late = late.dropna()
    return float(late.median()) if not late.empty else None
