"""A synthetic fleet of 1,024 ranks hung four ways: the stacks grouped, the ranks that stand out mapped onto
the parallel layout, and the verdict (issue 24 part 3; docs/benchmarks.md, "Parallel layout and machines").

The fleet: 128 hosts x 8 GPUs (hosts gpu-a0 ... gpu-a127, rank = host * 8 + local rank, GPU index = local
rank), tp = 8 within a host, pp = 4 across hosts, dp = 32 (Megatron's order tp-dp-pp: rank = tp_rank +
8 * dp_rank + 256 * pp_rank). Every rank's file holds its header and its three `parallel_group` records,
as `watch --instrument` writes them; each host's watch takes its 8 ranks' stacks, built from the real
py-spy capture tests/data/pyspy/torchrun_8_ranks.txt (a rank waiting in all_reduce, the rank 7 of that
capture busy in generate), and the looks of the 128 hosts are merged as the fleet does (checks/hang_merge.py).
The scenarios (which ranks are in generate while the others wait):
  one-rank   rank 537                       -> its coordinates: host gpu-a67, GPU 1, tp group 67, pp stage 2
  host       ranks 536-543 (all of gpu-a67)  -> "drain host gpu-a67"
  pp-group   ranks 25, 281, 537, 793         -> "pp group 25 ... across hosts ...: check that group's links"
  dp-group   the 32 ranks of dp group 17     -> its links
  scattered  ranks 5, 300, 611, 1000         -> "a code path, not the hardware"

Timed per scenario: the 128 looks merged (checks/hang_merge.py, once, as the fleet does); (a) mapping +
verdict from the merged looks: the stacks grouped (checks/stack_groups.py),
the culprits named, the layout built from the 1,024 ranks' records and the culprits judged
(checks/layout.py) -- the target is 5 s; (b) the same through the report's path: `load_evidence` of the
run directory (1,024 rank files and the hang report) and the hang rule.

Typical use:
    python benchmarks/bench_fleet_layout.py [--repeat 3] [--no-report]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from grpo_doctor.checks.hang_merge import merge_hang_reports
from grpo_doctor.checks.layout import Membership, Place, build_layout, fault_domain
from grpo_doctor.checks.stack_groups import culprit_ranks, group_stacks
from grpo_doctor.logs.pyspy import parse_pyspy_text
from grpo_doctor.runlog.decoder import record_from_dict
from grpo_doctor.schema import Header, ParallelGroup, RunPaths
from grpo_doctor.schema.stacks import StackCapture
from grpo_doctor.schema.watch_files import HangRank, HangReport

ROOT = Path(__file__).resolve().parents[1]
PYSPY = ROOT / "tests" / "data" / "pyspy" / "torchrun_8_ranks.txt"
HOSTS, PER_HOST, TP, PP = 128, 8, 8, 4
WORLD = HOSTS * PER_HOST
DP = WORLD // (TP * PP)
T0 = 1_795_000_000.0
SCENARIOS = {
    "one-rank": [537],
    "host": list(range(536, 544)),
    "pp-group": [25, 281, 537, 793],
    "dp-group": [1 + 8 * d + 256 * 2 for d in range(DP)],
    "scattered": [5, 300, 611, 1000],
}


def host_of(rank: int) -> str:
    return f"gpu-a{rank // PER_HOST}"


def groups_of(rank: int) -> dict[str, list[int]]:
    """The rank's tp, pp and dp groups (global ranks, group-rank order)."""
    tp, dp, pp = rank % TP, (rank // TP) % DP, rank // (TP * DP)
    return {"tp": list(range(rank - tp, rank - tp + TP)),
            "pp": [tp + TP * dp + TP * DP * p for p in range(PP)],
            "dp": [tp + TP * d + TP * DP * pp for d in range(DP)]}


def rank_records(rank: int) -> list[dict]:
    """The head of one rank's file as watch --instrument writes it: header, then its groups."""
    common = dict(rank=rank, host=host_of(rank), pid=10_000 + rank, step=0, t=T0, mono=100.0)
    header = Header(**common, local_rank=rank % PER_HOST, world_size=WORLD, node_rank=rank // PER_HOST,
                    local_world_size=PER_HOST, gpu_uuid=f"GPU-{rank:08x}-0000-0000-0000-000000000000",
                    versions={}, launch={}, argv=["train.py"], gpu_index=rank % PER_HOST,
                    gpu_pci_bus_id=f"00000000:{0x18 + 0x10 * (rank % PER_HOST):02X}:00.0")
    groups = [ParallelGroup(**common, ranks=ranks, name=dim, dim=dim, pg_name=None, source="device_mesh",
                            mesh_shape=[PP, DP, TP], mesh_dim_names=["pp", "dp", "tp"], mesh_dim=2 - i)
              for i, (dim, ranks) in enumerate(groups_of(rank).items())]
    return [r.to_dict() for r in (header, *groups)]


def real_stacks():
    """(waiting in all_reduce, busy in generate): main threads of the real py-spy capture."""
    captures = {c.rank: c for c in parse_pyspy_text(PYSPY.read_text())}
    return captures[0].main_thread(), captures[7].main_thread()


def host_looks(outliers: list[int], t: float = T0 + 60) -> list[HangReport]:
    """Each host's watch's look at the hang: its 8 ranks, their stacks, no culprit of its own."""
    waiting, busy = real_stacks()
    out = set(outliers)
    looks = []
    for h in range(HOSTS):
        ranks = range(h * PER_HOST, (h + 1) * PER_HOST)
        looks.append(HangReport(
            host=f"gpu-a{h}", detected_t=t,
            ranks={r: HangRank(pid=10_000 + r, verdict="stuck", open_phase="rollout" if r in out else "all_reduce",
                               step=12, idle_s=300.0, timeout_s=60.0) for r in ranks},
            stacks={r: busy if r in out else waiting for r in ranks}))
    return looks


def mapping_and_verdict(merged: HangReport, records: list[list[dict]]):
    """From the merged looks to the verdict: stacks grouped, culprits named, layout built and judged."""
    captures = [StackCapture(r, merged.ranks[r].pid or -1, merged.host_of(r), None, (thread,))
                for r, thread in merged.stacks.items()]
    culprits = culprit_ranks(group_stacks(captures))
    places, memberships = {}, []
    for lines in records:
        for data in lines:
            record = record_from_dict(data)
            if isinstance(record, Header):
                places[record.rank] = Place(record.host, record.local_rank, record.gpu_index, record.gpu_pci_bus_id,
                                            record.gpu_uuid)
            elif isinstance(record, ParallelGroup):
                memberships.append(Membership(tuple(record.ranks), record.dim, record.name, record.pg_name))
    layout = build_layout(places, memberships)
    domain = fault_domain(layout, culprits, {r: merged.host_of(r) for r in merged.ranks})
    return culprits, layout.describe(culprits[0]), domain


def write_run(run_dir: Path, records: list[list[dict]]) -> None:
    ranks_dir = RunPaths(run_dir).ranks
    ranks_dir.mkdir(parents=True, exist_ok=True)
    for rank, lines in enumerate(records):
        (ranks_dir / f"rank-{rank:05d}.jsonl").write_text("".join(json.dumps(d) + "\n" for d in lines))


def write_hang(hang_dir: Path, merged: HangReport) -> None:
    path = RunPaths(hang_dir).supervisor / merged.host / "hang-1.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(merged.to_dict()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-report", action="store_true", help="time the pure path only")
    args = parser.parse_args()
    records = [rank_records(r) for r in range(WORLD)]
    rows = []
    with tempfile.TemporaryDirectory(prefix="fleet-layout-") as tmp:
        run_dir = Path(tmp) / "run"
        write_run(run_dir, records)
        for name, outliers in SCENARIOS.items():
            looks = host_looks(outliers)
            start = time.perf_counter()
            merged = merge_hang_reports(looks)
            merge_s = time.perf_counter() - start
            best = float("inf")
            for _ in range(args.repeat):
                start = time.perf_counter()
                culprits, where, domain = mapping_and_verdict(merged, records)
                best = min(best, time.perf_counter() - start)
            report_s, title = None, ""
            if not args.no_report:
                from grpo_doctor.analysis.load import load_evidence
                from grpo_doctor.analysis.rules import hang

                hang_dir = Path(tmp) / f"hang-{name}"
                write_hang(hang_dir, merged)
                start = time.perf_counter()
                evidence = load_evidence([run_dir, hang_dir])
                finding = next(hang.check(evidence, hang.Config()))
                report_s = time.perf_counter() - start
                title = finding.title
            rows.append((name, len(culprits), domain.kind if domain else None, merge_s, best, report_s, where,
                         domain.verdict() if domain else "", title))
    print(f"{WORLD} ranks ({HOSTS} hosts x {PER_HOST}), tp={TP} pp={PP} dp={DP}; best of {args.repeat}")
    print(f"{'scenario':10} {'outliers':>8} {'domain':10} {'merge s':>8} {'map+verdict s':>13} {'load+rule s':>11}")
    for name, n, kind, merge_s, best, report_s, where, verdict, title in rows:
        load = f"{report_s:11.2f}" if report_s is not None else f"{'-':>11}"
        print(f"{name:10} {n:8d} {kind or '-':10} {merge_s:8.3f} {best:13.3f} {load}")
        print(f"    {where}" + (f"\n    {verdict}" if verdict else ""))
        if title:
            print(f"    title: {title[:400]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
