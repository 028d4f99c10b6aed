"""`straggler`: one rank is consistently slower in a phase than the others (CASES.md case 3).

For each phase path, every rank's median duration is compared with the other ranks' median: a rank
is a straggler in that phase when it is `ratio` times slower, by a share of the step that matters
(`min_step_frac`), and it also ENDS the phase late. The last test tells the straggler from the ranks
that wait for it: they are slow in the phase holding the next collective too, but leave it together
with everyone. Evidence keys: `phases` ({path: {"rank_median_s", "others_median_s", "all_median_s",
"ratio", "late_s" (median s it ended the phase after the others), "step_median_s", "num_samples"}}).

Slow ranks are then placed on their hosts (the rank headers' host), since where they run tells the
machine from the code:
- every rank of a host is slow (at least two ranks there) and other hosts have fast ranks: one finding
  names the host ("host node-1: all 8 ranks 2.1x slower in rollout: drain or check that machine"),
  `scope` "host", `host`; several such hosts give one finding naming them all (`scope` "hosts"), which
  says "links between" them only where `grpo-doctor probe` measured slow links there (`links`: its
  messages naming two or more of those hosts);
- the slow ranks are spread over two or more hosts, each of which also has fast ranks: one finding
  (`scope` "scattered", `ranks_per_host` ({host: [slow ranks]})) saying it is a code path or data
  imbalance (what those ranks do or get), not the hardware;
- otherwise (one rank, ranks of one host beside fast ones, hosts unknown): one finding per rank, as above
  (no `scope` key).
A finding for several ranks has `phases` over them ({path: the medians over its slow ranks of the keys
above, and `num_ranks`, how many were slow in it}), `ratio` (the median rank's, in the worst phase) and
`ranks` ({rank: its own `phases`}).

Where the job recorded its process groups (analysis/parallel_layout.py), slow ranks on several hosts that
share one group spanning machines (a pp stage chain, a dp group) are one finding about that group's links
(`scope` "group"), not a scattered one. Every finding then carries `coordinates` ({rank: {"host",
"local_rank", "gpu_index", "gpu_pci_bus_id", "gpu_uuid", "groups"}}) and its title the first rank's place
("rank 537: host gpu-a67, GPU 1, tp group 67 (ranks 536-543), pp stage 2"); a finding for several ranks
also `fault_domain` ("host", "group" or "scattered"), `fault_hosts` and `fault_group`.

Also every `straggler` problem `grpo-doctor probe` found before training (its
`probe/` files): evidence keys `source` ("probe"), `probe_file`, `message`, `nodes`.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from grpo_doctor.analysis import remedies
from grpo_doctor.analysis.findings import Finding
from grpo_doctor.analysis.launch_settings import differing_settings
from grpo_doctor.analysis.parallel_layout import HINT_GROUP_LINKS, place
from grpo_doctor.analysis.probe_evidence import probe_findings
from grpo_doctor.analysis.views import RunView, View
from grpo_doctor.schema.ranks import format_ranks

ID = "straggler"
READS = {View.PROBE_RESULTS, View.RANK_LOGS, View.RANK_TABLES, View.RANKS}

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
HINT_HOST = ("Every rank of that host is slow and the other hosts are not: the machine, not the code. Drain it "
             "(Slurm: scontrol update nodename=HOST state=drain reason=slow; Kubernetes: kubectl cordon HOST) and "
             "rerun, or check it: nvidia-smi -q -d CLOCK,PERFORMANCE (throttling, power caps), other processes on "
             "its GPUs, its CPU load and governor, its PCIe / NIC link (nvidia-smi -q | grep -i -A2 'link width').")
HINT_LINKS = ("grpo-doctor probe measured slow links between these hosts: test the pair directly (ib_write_bw / "
              "nccl-tests between them), look at their NICs and switch ports, and run with NCCL_DEBUG=INFO "
              "NCCL_DEBUG_SUBSYS=NET to see the transport each pair uses.")
HINT_SCATTERED = ("The slow ranks are spread over hosts that also run fast ranks, so no machine explains them: look "
                  "at what those ranks do or get differently - longer prompts or completions (balance batches by "
                  "length, shuffle), a code path only they take (a reward model, evaluation, logging or checkpoint "
                  "rank), or their place in a parallel group.")
HINTS = (HINT_NODES, HINT_GPU, HINT_PHASES, HINT_HOST, HINT_LINKS, HINT_SCATTERED, HINT_GROUP_LINKS)


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


def check(run: RunView, cfg: Config) -> Iterator[Finding]:
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
    uneven = bool(differing_settings(run.headers, run.probe) & GPU_COUNT_SETTINGS)
    nodes_hint = (HINT_NODES,) if uneven else ()
    hints = nodes_hint + (HINT_GPU, HINT_PHASES)
    ranks_of_host = _ranks_by_host(done)
    host_of = {rank: host for host, ranks in ranks_of_host.items() for rank in ranks}
    whole = _whole_hosts(slow, ranks_of_host, host_of)
    if whole:
        yield _hosts_finding(run, whole, slow, ranks_of_host, nodes_hint)
    rest = {rank: phases for rank, phases in slow.items() if host_of.get(rank) not in whole}
    rest_hosts = {host_of.get(rank) for rank in rest}
    # Spread over hosts that also run fast ranks: no machine explains them.
    placed_hosts = {h for h in rest_hosts if h is not None}  # all of them where None is not one
    if len(rest) >= 2 and None not in rest_hosts and len(rest_hosts) >= 2 and all(
            ranks_of_host[h] - set(rest) for h in placed_hosts):
        placed = place(run, rest, host_of)
        if placed.domain is not None and placed.domain.kind == "group":  # one group across machines: its links
            yield _group_finding(rest, placed, nodes_hint)
        else:
            yield _scattered_finding(rest, host_of, nodes_hint, placed.evidence)
        return
    for rank, phases in sorted(rest.items()):
        worst = max(phases, key=lambda p: phases[p]["rank_median_s"] - phases[p]["others_median_s"])
        w = phases[worst]
        host = run.host_of(rank)
        placed = place(run, [rank], judge=False)
        yield Finding(
            id=ID, severity="warning",
            title=f"rank {rank} is a straggler in {worst}: median {w['rank_median_s']:.2f} s vs "
                  f"{w['others_median_s']:.2f} s for the other ranks, {w['rank_median_s'] - w['others_median_s']:.2f} s "
                  f"of every {w['step_median_s']:.2f} s step{placed.clause}",
            ranks=(rank,), hosts=(host,) if host else (), step=None, phase=worst,
            evidence={"phases": phases, **placed.evidence}, hints=hints,
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


def _ranks_by_host(done) -> dict[str, set[int]]:
    """host -> the ranks with phase records there (a rank without a known host is left out)."""
    pairs = done[["rank", "host"]].drop_duplicates()
    out: dict[str, set[int]] = {}
    for rank, host in zip(pairs["rank"], pairs["host"], strict=True):
        if isinstance(host, str) and host:
            out.setdefault(host, set()).add(int(rank))
    return out


def _whole_hosts(slow: dict[int, dict], ranks_of_host: dict[str, set[int]], host_of: dict[int, str]) -> list[str]:
    """The hosts all of whose ranks (two or more) are slow, while another host has fast ranks."""
    slow_of: dict[str, set[int]] = {}
    for rank in slow:
        if rank in host_of:
            slow_of.setdefault(host_of[rank], set()).add(rank)
    whole = [h for h, ranks in sorted(slow_of.items()) if len(ranks_of_host[h]) >= 2 and ranks == ranks_of_host[h]]
    fast_elsewhere = any(h not in whole and ranks - set(slow) for h, ranks in ranks_of_host.items())
    return whole if fast_elsewhere else []


def _combined(slow: dict[int, dict], ranks: list[int]) -> tuple[str, dict[str, dict], float | None]:
    """(the worst phase: the one most of `ranks` are slow in, then by extra time; {path: medians over the
    ranks slow in it, and num_ranks}; the median rank's ratio in the worst phase)."""
    paths: dict[str, list[dict]] = {}
    for rank in ranks:
        for path, stats in slow[rank].items():
            paths.setdefault(path, []).append(stats)
    phases: dict[str, dict] = {}
    for path, rows in paths.items():
        phases[path] = {key: round(float(np.median([r[key] for r in rows if r[key] is not None])), 3)
                        if any(r[key] is not None for r in rows) else None
                        for key in ("rank_median_s", "others_median_s", "all_median_s", "ratio", "late_s",
                                    "step_median_s")}
        phases[path]["num_samples"] = int(sum(r["num_samples"] for r in rows))
        phases[path]["num_ranks"] = len(rows)
    worst = max(phases, key=lambda p: (phases[p]["num_ranks"],
                                       phases[p]["rank_median_s"] - phases[p]["others_median_s"]))
    return worst, phases, phases[worst]["ratio"]


def _slower(ratio: float | None, count: int, total: int, phase: str) -> str:
    how = f"{ratio:.1f}x slower" if ratio is not None else "slower"
    return f"{how} in {phase}" if count == total else f"slower ({count} of them {how} in {phase})"


def _hosts_finding(run: RunView, whole: list[str], slow: dict[int, dict], ranks_of_host: dict[str, set[int]],
                   nodes_hint: tuple[str, ...]) -> Finding:
    ranks = sorted(r for h in whole for r in ranks_of_host[h])
    worst, phases, ratio = _combined(slow, ranks)
    speed = _slower(ratio, phases[worst]["num_ranks"], len(ranks), worst)
    evidence: dict = {"scope": "host" if len(whole) == 1 else "hosts", "phases": phases, "ratio": ratio,
                      "ranks": {r: slow[r] for r in ranks}, **place(run, ranks).evidence}
    if len(whole) == 1:
        evidence["host"] = whole[0]
        title = f"host {whole[0]}: all {len(ranks)} ranks {speed}: drain or check that machine"
        hints = nodes_hint + (HINT_HOST, HINT_GPU)
    else:
        links = _probe_links(run, whole)
        evidence["links"] = links
        names = ", ".join(whole)
        if links:
            title = (f"hosts {names}: all {len(ranks)} ranks {speed}; grpo-doctor probe measured slow links between "
                     f"them: check the links between {names}")
            hints = nodes_hint + (HINT_LINKS, HINT_HOST)
        else:
            title = f"hosts {names}: all {len(ranks)} ranks {speed}: drain or check those machines"
            hints = nodes_hint + (HINT_HOST, HINT_GPU)
    return Finding(id=ID, severity="warning", title=title, ranks=tuple(ranks), hosts=tuple(whole), step=None,
                   phase=worst, evidence=evidence, hints=hints)


def _group_finding(rest: dict[int, dict], placed, nodes_hint: tuple[str, ...]) -> Finding:
    """Slow ranks on several hosts that share one process group spanning machines: that group's links."""
    ranks = sorted(rest)
    worst, phases, ratio = _combined(rest, ranks)
    speed = _slower(ratio, phases[worst]["num_ranks"], len(ranks), worst)
    domain = placed.domain
    title = f"ranks {format_ranks(ranks)} on {len(domain.hosts)} hosts are {speed}{placed.clause}"
    return Finding(id=ID, severity="warning", title=title, ranks=tuple(ranks), hosts=domain.hosts, step=None,
                   phase=worst,
                   evidence={"scope": "group", "phases": phases, "ratio": ratio,
                             "ranks_per_host": domain.ranks_per_host, "ranks": {r: rest[r] for r in ranks},
                             **placed.evidence},
                   hints=nodes_hint + (HINT_GROUP_LINKS, HINT_LINKS, HINT_GPU))


def _scattered_finding(rest: dict[int, dict], host_of: dict[int, str], nodes_hint: tuple[str, ...],
                       placed: dict | None = None) -> Finding:
    ranks = sorted(rest)
    worst, phases, ratio = _combined(rest, ranks)
    per_host: dict[str, list[int]] = {}
    for rank in ranks:
        per_host.setdefault(host_of[rank], []).append(rank)
    speed = _slower(ratio, phases[worst]["num_ranks"], len(ranks), worst)
    title = (f"ranks {format_ranks(ranks)} on {len(per_host)} hosts are {speed}, beside fast ranks on the same "
             "hosts: a code path or data imbalance, not the hardware")
    return Finding(id=ID, severity="warning", title=title, ranks=tuple(ranks), hosts=tuple(sorted(per_host)),
                   step=None, phase=worst,
                   evidence={"scope": "scattered", "phases": phases, "ratio": ratio,
                             "ranks_per_host": dict(sorted(per_host.items())), "ranks": {r: rest[r] for r in ranks},
                             **(placed or {})},
                   hints=nodes_hint + (HINT_SCATTERED, HINT_PHASES))


def _probe_links(run: RunView, hosts: list[str]) -> list[str]:
    """The messages of `grpo-doctor probe`'s slow-network problems that name two or more of `hosts`."""
    if run.probe is None:
        return []
    return [problem.message for _, problem in run.probe.problems()
            if problem.id == ID and len(set(problem.hosts) & set(hosts)) >= 2]
