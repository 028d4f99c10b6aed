"""`straggler`: one rank is consistently slower in a phase than the others (CASES.md case 3).

For each phase path, every rank's median duration is compared with the median over all ranks;
a rank is a straggler in that phase when it is both `ratio` times slower and `min_excess_s`
slower. Evidence keys: `phases` ({path: {"rank_median_s", "all_median_s", "ratio", "num_samples"}}).

Also every `straggler` problem `grpo-doctor probe` found before training (its
`probe/` files): evidence keys `source` ("probe"), `probe_file`, `message`, `nodes`.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from grpo_doctor.analysis import remedies
from grpo_doctor.analysis.findings import Finding
from grpo_doctor.analysis.load import Evidence
from grpo_doctor.analysis.probe_evidence import probe_findings

ID = "straggler"

HINT_NODES = ("Launch settings differ between nodes: give every node the same number of GPUs (NPROC_PER_NODE and "
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
    ratio: float = 1.5  # rank's median / median of all ranks
    min_excess_s: float = 0.5  # and at least this many seconds slower
    min_samples: int = 2  # phase completions a rank needs before it is judged
    min_ranks: int = 2


def check(run: Evidence, cfg: Config) -> Iterator[Finding]:
    yield from probe_findings(run.probe, ID)
    done = run.phases.dropna(subset=["duration_s"])
    if done.empty:
        return
    slow: dict[int, dict[str, dict]] = {}
    for path, rows in done.groupby("path"):
        stats = rows.groupby("rank")["duration_s"].agg(["median", "count"])
        stats = stats[stats["count"] >= cfg.min_samples]
        if len(stats) < cfg.min_ranks:
            continue
        overall = float(stats["median"].median())
        for rank, row in stats.iterrows():
            med = float(row["median"])
            if med > cfg.ratio * overall and med - overall > cfg.min_excess_s:
                slow.setdefault(int(rank), {})[str(path)] = {
                    "rank_median_s": round(med, 3), "all_median_s": round(overall, 3),
                    "ratio": round(med / overall, 2) if overall else None, "num_samples": int(row["count"])}
    # "same GPUs on every node" only where the evidence shows the nodes' launches differ
    hints = ((HINT_NODES,) if remedies.launch_settings_differ(run) else ()) + (HINT_GPU, HINT_PHASES)
    for rank, phases in sorted(slow.items()):
        worst = max(phases, key=lambda p: phases[p]["rank_median_s"] - phases[p]["all_median_s"])
        w = phases[worst]
        host = run.host_of(rank)
        yield Finding(
            id=ID, severity="warning",
            title=f"rank {rank} is a straggler in {worst}: median {w['rank_median_s']:.2f} s vs "
                  f"{w['all_median_s']:.2f} s for all ranks",
            ranks=(rank,), hosts=(host,) if host else (), step=None, phase=worst,
            evidence={"phases": phases}, hints=hints,
        )
