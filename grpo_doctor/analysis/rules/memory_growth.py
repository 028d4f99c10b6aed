"""`memory-growth`: memory that grows step after step toward an out-of-memory: a warning while the
projected OOM is far, critical when it is near (under `critical_within_s`, or `critical_within_steps`
steps where step times are unknown).

From the ranks' memory snapshots (per step: the largest value of each figure among the step's
snapshots) and, for hosts whose ranks recorded none (uninstrumented jobs), from watch's samples
(supervisor/<host>/samples.jsonl: every GPU's used memory and its processes, every rank's RSS, taken
each second and reduced to the largest value of each interval of `sample_interval_s`). The trend is
`checks/memory_trend.py`'s: warm-up dropped, a Theil-Sen slope over the last points, rises in most
changes from one block of steps to the next, growing in both halves of the window, at least
`min_growth_bytes` (and `min_growth_noise_ratio` times the noise) over the window (where the whole window shows none, its later half, quarter, ...).
A healthy run's first steps, or memory that rose once and stays flat, is no finding.

Split by where the memory goes:
- a GPU (`memory` "gpu"): the card's used memory (total - free), against its total. Split into the
  trainer's allocator (`component` "allocated": allocated grows, tensors kept alive; "reserved":
  reserved grows with allocated flat, cached blocks, not a tensor leak) and everything else on the
  card (`component` "other-processes": the rollout engine, or memory outside PyTorch's allocator).
  From samples: the process whose used memory grows most (`pid`; a rank's process or another one).
  `component` "gpu-used" where the split is unknown. Allocation retries that climb step after step
  (the allocator freeing its cache to retry, at the card's limit) are said with it, or alone.
- host memory (`memory` "host"): the RSS of the host's ranks together against the tightest of its
  physical RAM and the ranks' memory cgroup limit, and each rank's virtual size against its RLIMIT_AS
  (`component` "host-rss" / "address-space"), each as recorded when the rank started; the capacity
  met first is the one named (`capacity_kind`). Without a recorded capacity the rate alone is said.

Evidence keys: `memory` ("gpu" | "host"), `component` (above), `source` ("event-log" | "watch-samples"),
`gpu` (the CUDA device index; from samples the NVML index), `capacity_kind` ("gpu-total", "ram",
"cgroup-memory-max", "rlimit-as", None), `slope_bytes_per_step`, `slope_bytes_per_s`, `level_bytes`
(the fitted line at the last point), `last_bytes`, `capacity_bytes`, `headroom_bytes`, `first_step`,
`last_step`, `projected_step` (the step at which the line meets the capacity), `steps_left`,
`time_left_s`, `window_s`, `num_points`, `rising_frac` (share of the window's block-to-block changes that
rise),
`growth_bytes` (over the window), `allocated_slope_bytes_per_step`, `reserved_slope_bytes_per_step`,
`other_slope_bytes_per_step` (the split; per second from samples: `process_slopes_bytes_per_s`
{pid: slope} with `pid` the process growing most and `pid_rank` its rank, None for a process that is
no rank), `rank_slopes_bytes_per_step` ({rank: slope} of the ranks' RSS or virtual size; from samples
`rank_slopes_bytes_per_s`),
`alloc_retries` (the allocator's retries so far), `alloc_retry_steps` (the window's steps in which they
rose), `alloc_retry_window_steps` (the steps looked at).
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd

from grpo_doctor.analysis import remedies
from grpo_doctor.analysis.finding_facts import GrowthFacts
from grpo_doctor.analysis.findings import Finding
from grpo_doctor.analysis.views import RunView, View
from grpo_doctor.checks.memory_trend import (
    CAPACITY_NAMES,
    WHERE,
    TrendConfig,
    gpu_component,
    memory_growth_check,
    projection_text,
    rate_text,
    sampled_gpu_component,
    window,
    window_slope,
)
from grpo_doctor.checks.memory_trend import MemoryGrowthConfig as Config  # watch's live rule reads it too

ID = "memory-growth"
READS = {View.RANK_TABLES, View.RANKS, View.WATCH_ARTIFACTS}

HINT_CACHED = ("Reserved memory grows while allocated memory stays flat: PyTorch's caching allocator keeps the "
               "blocks it freed (cached, not leaked), split by changing sequence lengths and by memory handed "
               "between generation and training. Give them back once a step: torch.cuda.empty_cache() after "
               "generation (or the framework's switch for it: "
               + remedies.flags(remedies.VERL, "actor_rollout_ref.rollout.free_cache_engine")
               + " frees the engine's cache after each rollout), and pad or bucket lengths so blocks are reused.")
HINT_ENGINE = ("Memory outside the trainer's allocator grows: the rollout engine on the same GPU (a vLLM KV cache, "
               "CUDA graphs, memory its sleep mode leaves behind after each wake-up) or a library allocating outside "
               "PyTorch. Cap the engine (below), reset its prefix cache between steps, and put it to sleep while the "
               "trainer steps at the level that releases most (" + remedies.flags(remedies.SWIFT, "sleep_level")
               + " level 2 drops its weights too); growth that survives sleep and a restart of the engine is an "
               "engine bug: update vLLM.")
HINT_LEAK = ("Allocated memory grows: tensors stay referenced from one step to the next, a leak in the training "
             "code, not in the allocator: losses, logits or rollouts appended to a list without .detach() / .item() "
             "/ .cpu(), outputs kept for logging, a cache dict that is never trimmed. Compare the allocator history "
             "of two steps (GRPO_DOCTOR_MEMORY_HISTORY=1, or torch.cuda.memory._record_memory_history and a "
             "snapshot each step, viewed at https://pytorch.org/memory_viz) to see which call sites keep memory.")
HINT_HOST = ("Host memory grows: Python objects or CPU tensors kept from step to step (rollouts, completions tables, "
             "metric histories, offloaded copies that are never freed, pinned buffers, dataloader workers' copies). "
             "tracemalloc snapshots taken two steps apart (tracemalloc.take_snapshot().compare_to(...)) name the "
             "lines that allocate what stays; a leak in native code shows in RSS but not there. Raising the limit "
             "(the container's memory limit, Slurm --mem, ulimit -v) only moves the OOM later.")
HINT_RETRIES = ("The CUDA allocator retries step after step (num_alloc_retries: it freed its whole cache and tried "
                "again, which synchronizes the GPU and slows every step): the card is at its limit. Lower the peak "
                "(micro batch, completion length, activation checkpointing) or the engine's share.")
HINTS = (HINT_CACHED, HINT_ENGINE, HINT_LEAK, HINT_HOST, HINT_RETRIES, remedies.VLLM_SHARE, remedies.SLEEP_AND_OFFLOAD)


def check(run: RunView, cfg: Config) -> Iterator[Finding]:
    steps, hosts = _per_step(run)
    gpu_hosts = {hosts[r] for r, frame in steps.items() if frame["card_used"].notna().any()}
    host_hosts = {hosts[r] for r, frame in steps.items() if frame["host_rss_bytes"].notna().any()}
    for rank, frame in sorted(steps.items()):
        yield from _gpu_from_records(rank, hosts[rank], frame, cfg)
    yield from _host_from_records(run, steps, hosts, cfg)
    yield from _from_samples(run, gpu_hosts, host_hosts, cfg)


# --- the ranks' memory records

_NUMBERS = ("t", "host_rss_bytes", "host_vms_bytes", "allocated_bytes", "reserved_bytes", "free_bytes", "total_bytes",
            "num_alloc_retries", "device")


def _per_step(run: RunView) -> tuple[dict[int, pd.DataFrame], dict[int, str | None]]:
    """rank -> one row per step: the largest of each figure among the step's snapshots (its peak); and
    rank -> its host."""
    memory = run.memory
    if memory.empty or "step" not in memory:
        return {}, {}
    frame = memory[memory["step"].notna()]
    if frame.empty:
        return {}, {}
    frame = pd.DataFrame({"rank": frame["rank"].astype(int), "step": frame["step"],
                          **{name: pd.to_numeric(frame[name], errors="coerce") if name in frame else np.nan
                             for name in _NUMBERS}})
    frame["card_used"] = frame["total_bytes"] - frame["free_bytes"]
    frame["others"] = frame["card_used"] - frame["reserved_bytes"]
    per = frame.groupby(["rank", "step"], sort=True).max()
    ranks = per.index.get_level_values(0).to_numpy()
    bounds = np.flatnonzero(np.diff(ranks)) + 1
    out = {}
    for start, end in zip(np.r_[0, bounds], np.r_[bounds, len(ranks)], strict=True):
        part = per.iloc[start:end]
        out[int(ranks[start])] = part.set_axis(part.index.get_level_values(1))
    last_host = memory.dropna(subset=["host"]).groupby("rank")["host"].last() if "host" in memory else {}
    hosts = {r: run.host_of(r) or (str(last_host[r]) if r in last_host else None) for r in out}
    return out, hosts


def _gpu_from_records(rank: int, host: str | None, frame: pd.DataFrame, cfg: Config) -> Iterator[Finding]:
    trend = cfg.trend()
    steps, times = frame.index.to_numpy(dtype=float), frame["t"].to_numpy(dtype=float)
    used = frame["card_used"].to_numpy(dtype=float)
    total = frame["total_bytes"].dropna()
    found = None
    if np.isfinite(used).sum() >= trend.min_points:
        found = memory_growth_check(used, float(total.median()) if len(total) else None, steps=steps,
                                    times_s=times, config=trend, what="GPU memory")
    retries = _climbing_retries(frame, cfg)
    device = frame["device"].dropna()
    gpu = int(device.iloc[-1]) if len(device) else None
    if found is None:
        if retries:
            yield Finding(
                id=ID, severity="warning", ranks=(rank,), hosts=(host,) if host else (), step=int(steps[-1]),
                title=(f"the CUDA allocator retried an allocation in {len(retries['alloc_retry_steps'])} of the last "
                       f"{retries['alloc_retry_window_steps']} steps on rank {rank}"
                       + (f" (GPU {gpu})" if gpu is not None else "") + ": memory is at the card's limit"),
                facts=GrowthFacts(memory="gpu"),
                evidence={"memory": "gpu", "component": "gpu-used", "source": "event-log", "gpu": gpu, **retries},
                hints=(HINT_RETRIES, remedies.VLLM_SHARE, remedies.SLEEP_AND_OFFLOAD))
        return
    ev = found["evidence"]
    split = {name: window_slope(steps, frame[column].to_numpy(dtype=float), trend, ev["num_points"])
             for name, column in (("allocated", "allocated_bytes"), ("reserved", "reserved_bytes"),
                                  ("other", "others"))}
    component = gpu_component(ev["slope_bytes_per_step"], split, cfg.component_share)
    where = f"GPU {gpu} of rank {rank}" if gpu is not None else f"the GPU of rank {rank}"
    retry_text = (f"; the allocator retried in {len(retries['alloc_retry_steps'])} of the last "
                  f"{retries['alloc_retry_window_steps']} steps" if retries else "")
    yield Finding(
        id=ID, severity=found["severity"], ranks=(rank,), hosts=(host,) if host else (), step=ev["last_step"],
        title=(f"memory grows {rate_text(ev)} on {where} ({WHERE[component]})"
               f"{projection_text(ev, CAPACITY_NAMES['gpu-total'])}{retry_text}"),
        facts=GrowthFacts(memory="gpu"),
        evidence={"memory": "gpu", "component": component, "source": "event-log", "gpu": gpu,
                  "capacity_kind": "gpu-total" if ev["capacity_bytes"] else None, **ev,
                  "allocated_slope_bytes_per_step": split["allocated"],
                  "reserved_slope_bytes_per_step": split["reserved"],
                  "other_slope_bytes_per_step": split["other"], **(retries or {})},
        hints=_gpu_hints(component, bool(retries)))


def _gpu_hints(component: str, retries: bool) -> tuple[str, ...]:
    first = {"allocated": (HINT_LEAK,), "reserved": (HINT_CACHED, remedies.EXPANDABLE_SEGMENTS),
             "other-processes": (HINT_ENGINE, remedies.VLLM_SHARE, remedies.SLEEP_AND_OFFLOAD),
             "gpu-used": (HINT_LEAK, HINT_CACHED, HINT_ENGINE)}[component]
    return first + ((HINT_RETRIES,) if retries else ())


def _climbing_retries(frame: pd.DataFrame, cfg: Config) -> dict[str, Any] | None:
    """The allocator's retry count when it rose in most of the window's steps, else None."""
    trend = cfg.trend()
    if not frame["num_alloc_retries"].max() > frame["num_alloc_retries"].min():
        return None
    steps, counts = window(frame.index.to_numpy(dtype=float), frame["num_alloc_retries"].to_numpy(dtype=float), trend)
    if counts.size < trend.min_points:
        return None
    rose = np.flatnonzero(np.diff(counts) > 0) + 1
    if rose.size < cfg.min_retry_rises or rose.size < cfg.min_retry_frac * (counts.size - 1):
        return None
    return {"alloc_retries": int(counts[-1]), "alloc_retry_steps": [int(s) for s in steps[rose]],
            "alloc_retry_window_steps": int(counts.size)}


def _host_from_records(run: RunView, steps: dict[int, pd.DataFrame], hosts: dict[int, str | None],
                       cfg: Config) -> Iterator[Finding]:
    """Per host: its ranks' RSS together against RAM / the cgroup limit, each rank's virtual size against its
    RLIMIT_AS; the capacity met first is reported."""
    trend = cfg.trend()
    headers = run.headers
    by_host: dict[str | None, list[int]] = {}
    for rank, frame in steps.items():
        if frame["host_rss_bytes"].notna().any() or frame["host_vms_bytes"].notna().any():
            by_host.setdefault(hosts[rank], []).append(rank)
    for host, ranks in sorted(by_host.items(), key=lambda item: (item[0] is None, item[0] or "")):
        candidates = []
        rss = pd.concat([steps[r]["host_rss_bytes"].rename(r) for r in ranks], axis=1, join="inner").dropna()
        times = pd.concat([steps[r]["t"].rename(r) for r in ranks], axis=1, join="inner").max(axis=1)
        if len(rss) >= trend.min_points:
            total = rss.sum(axis=1)
            caps = [(kind, _min_of(headers, ranks, attr)) for kind, attr in
                    (("ram", "ram_bytes"), ("cgroup-memory-max", "cgroup_memory_max_bytes"))]
            known = [(kind, cap) for kind, cap in caps if cap]
            kind, cap = min(known, key=lambda kc: kc[1]) if known else (None, None)
            found = memory_growth_check(total.to_numpy(dtype=float), cap, steps=total.index.to_numpy(dtype=float),
                                        times_s=times.reindex(total.index).to_numpy(dtype=float), config=trend)
            if found:
                slopes = {r: window_slope(rss.index.to_numpy(dtype=float), rss[r].to_numpy(dtype=float), trend,
                                          found["evidence"]["num_points"]) for r in ranks}
                candidates.append(("host-rss", kind, found, slopes))
        for rank in ranks:
            limit = getattr(headers.get(rank), "rlimit_as_bytes", None)
            vms = steps[rank]["host_vms_bytes"].dropna()
            if not limit or len(vms) < trend.min_points:
                continue
            found = memory_growth_check(vms.to_numpy(dtype=float), limit, steps=vms.index.to_numpy(dtype=float),
                                        times_s=steps[rank]["t"].reindex(vms.index).to_numpy(dtype=float),
                                        config=trend)
            if found:
                candidates.append(("address-space", "rlimit-as", found, {rank: found["evidence"]["slope_bytes_per_step"]}))
        if candidates:
            yield _host_finding(host, min(candidates, key=_urgency), cfg)


def _min_of(headers: dict, ranks: list[int], attr: str) -> int | None:
    values = [v for r in ranks if (v := getattr(headers.get(r), attr, None))]
    return min(values) if values else None


def _urgency(candidate: tuple) -> tuple:
    """Sort key: the capacity met first (by time, else by steps), then any capacity, then none."""
    ev = candidate[2]["evidence"]
    return (ev["time_left_s"] is None and ev["steps_left"] is None,
            ev["time_left_s"] if ev["time_left_s"] is not None else float("inf"),
            ev["steps_left"] if ev["steps_left"] is not None else float("inf"))


def _host_finding(host: str | None, candidate: tuple, cfg: Config) -> Finding:
    component, kind, found, slopes = candidate
    ev = found["evidence"]
    growing = {r: s for r, s in slopes.items() if s is not None and s > 0}
    top = max(growing.values(), default=0.0)
    ranks = tuple(sorted(r for r, s in growing.items() if s >= 0.25 * top)) or tuple(sorted(slopes))
    who = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"
    what = "virtual size (address space)" if component == "address-space" else "host memory (RSS)"
    on = f" on {host}" if host else ""
    capacity = CAPACITY_NAMES.get(kind or "", "capacity")
    return Finding(
        id=ID, severity=found["severity"], ranks=ranks, hosts=(host,) if host else (), step=ev["last_step"],
        title=f"{what} of {who}{on} grows {rate_text(ev)}{projection_text(ev, capacity)}",
        facts=GrowthFacts(memory="host"),
        evidence={"memory": "host", "component": component, "source": "event-log", "gpu": None,
                  "capacity_kind": kind if ev["capacity_bytes"] else None, **ev,
                  "rank_slopes_bytes_per_step": {str(r): s for r, s in sorted(slopes.items())}},
        hints=(HINT_HOST,))


# --- watch's samples (uninstrumented jobs)


def _from_samples(run: RunView, gpu_hosts: set[str | None], host_hosts: set[str | None],
                  cfg: Config) -> Iterator[Finding]:
    samples = run.samples
    if samples.empty or "kind" not in samples or "host" not in samples:
        return
    procs = samples[samples["kind"] == "proc"]
    rank_of_pid: dict[tuple[str, int], int] = {}
    if {"pid", "rank"} <= set(procs):
        for host, pid, rank in procs[["host", "pid", "rank"]].dropna().drop_duplicates().itertuples(index=False):
            rank_of_pid[(host, int(pid))] = int(rank)
    gpus = samples[samples["kind"] == "gpu"]
    if {"index", "mem_used_bytes", "t"} <= set(gpus):
        for (host, index), group in gpus.groupby(["host", "index"], sort=True):
            if host not in gpu_hosts:
                yield from _gpu_from_samples(str(host), int(index), group, rank_of_pid, cfg)
    if {"rank", "rss_bytes", "t"} <= set(procs):
        for host, group in procs.groupby("host", sort=True):
            if host not in host_hosts:
                yield from _host_from_samples(run, str(host), group, cfg)


def _intervals(t: pd.Series, cfg: Config) -> pd.Series:
    """The interval of each sample: `sample_interval_s` long, or longer so that a long run has at most
    twice the trend's window of them."""
    span = float(t.max() - t.min()) if len(t) else 0.0
    width = max(cfg.sample_interval_s, span / (2 * cfg.window_points))
    return ((t - t.min()) // width).astype(int)


def _gpu_from_samples(host: str, index: int, group: pd.DataFrame, rank_of_pid: dict[tuple[str, int], int],
                      cfg: Config) -> Iterator[Finding]:
    trend = cfg.trend()
    group = group.assign(used=pd.to_numeric(group["mem_used_bytes"], errors="coerce"),
                         bin=_intervals(group["t"], cfg))
    per = group.groupby("bin").agg(t=("t", "max"), used=("used", "max"))
    totals = pd.to_numeric(group.get("mem_total_bytes"), errors="coerce").dropna() if "mem_total_bytes" in group else []
    capacity = float(np.median(totals)) if len(totals) else None
    found = memory_growth_check(per["used"].to_numpy(dtype=float), capacity, times_s=per["t"].to_numpy(dtype=float),
                                config=trend, what="GPU memory")
    if found is None:
        return
    ev = found["evidence"]
    slopes = _process_slopes(group, per, trend, ev["num_points"])
    pid = max(slopes, key=lambda p: slopes[p]) if slopes else None
    pid_rank = rank_of_pid.get((host, pid)) if pid is not None else None
    component, who = sampled_gpu_component(pid, pid_rank)
    ranks = tuple(sorted({r for (h, _), r in rank_of_pid.items() if h == host and _ in slopes}))
    yield Finding(
        id=ID, severity=found["severity"], ranks=ranks, hosts=(host,), step=None,
        title=(f"memory grows {rate_text(ev)} on GPU {index} of {host}{who}"
               f"{projection_text(ev, CAPACITY_NAMES['gpu-total'])}"),
        facts=GrowthFacts(memory="gpu"),
        evidence={"memory": "gpu", "component": component, "source": "watch-samples", "gpu": index,
                  "capacity_kind": "gpu-total" if ev["capacity_bytes"] else None, **ev,
                  "process_slopes_bytes_per_s": {str(p): s for p, s in sorted(slopes.items())}, "pid": pid,
                  "pid_rank": pid_rank},
        hints=(HINT_ENGINE, remedies.VLLM_SHARE, remedies.SLEEP_AND_OFFLOAD) if component == "other-processes"
        else (HINT_LEAK, HINT_CACHED, HINT_ENGINE))


def _process_slopes(group: pd.DataFrame, per: pd.DataFrame, trend: TrendConfig, points: int) -> dict[int, float]:
    """pid -> the slope (bytes per s) of its used memory on this GPU over the trend's window."""
    rows = []
    for b, processes in zip(group["bin"], group.get("processes", pd.Series([None] * len(group))), strict=False):
        for p in processes if isinstance(processes, list) else ():
            if isinstance(p, dict) and isinstance(p.get("pid"), int) and isinstance(p.get("used_bytes"), int | float):
                rows.append((b, p["pid"], p["used_bytes"]))
    if not rows:
        return {}
    table = pd.DataFrame(rows, columns=["bin", "pid", "used"]).groupby(["bin", "pid"])["used"].max().unstack()
    table = table.reindex(per.index)
    slopes = {}
    for pid in table.columns:
        values = table[pid].fillna(0.0).to_numpy(dtype=float)  # a process not yet started holds nothing
        slope = window_slope(per["t"].to_numpy(dtype=float), values, trend, points)
        if slope is not None:
            slopes[int(pid)] = slope
    return slopes


def _host_from_samples(run: RunView, host: str, group: pd.DataFrame, cfg: Config) -> Iterator[Finding]:
    trend = cfg.trend()
    group = group.assign(rss=pd.to_numeric(group["rss_bytes"], errors="coerce"), bin=_intervals(group["t"], cfg))
    table = group.groupby(["bin", "rank"])["rss"].max().unstack().dropna()
    if len(table) < trend.min_points:
        return
    times = group.groupby("bin")["t"].max().reindex(table.index).to_numpy(dtype=float)
    ranks = [int(r) for r in table.columns]
    headers = run.headers
    caps = [(kind, _min_of(headers, ranks, attr)) for kind, attr in
            (("ram", "ram_bytes"), ("cgroup-memory-max", "cgroup_memory_max_bytes"))]
    known = [(kind, cap) for kind, cap in caps if cap]
    kind, cap = min(known, key=lambda kc: kc[1]) if known else (None, None)
    found = memory_growth_check(table.sum(axis=1).to_numpy(dtype=float), cap, times_s=times, config=trend)
    if found is None:
        return
    ev = found["evidence"]
    slopes = {r: window_slope(times, table[r].to_numpy(dtype=float), trend, ev["num_points"]) for r in table.columns}
    growing = {int(r): s for r, s in slopes.items() if s is not None and s > 0}
    top = max(growing.values(), default=0.0)
    named = tuple(sorted(r for r, s in growing.items() if s >= 0.25 * top)) or tuple(ranks)
    who = f"rank {named[0]}" if len(named) == 1 else f"ranks {', '.join(map(str, named))}"
    yield Finding(
        id=ID, severity=found["severity"], ranks=named, hosts=(host,), step=None,
        title=f"host memory (RSS) of {who} on {host} grows {rate_text(ev)}"
              f"{projection_text(ev, CAPACITY_NAMES.get(kind or '', 'capacity'))}",
        facts=GrowthFacts(memory="host"),
        evidence={"memory": "host", "component": "host-rss", "source": "watch-samples", "gpu": None,
                  "capacity_kind": kind if ev["capacity_bytes"] else None, **ev,
                  "rank_slopes_bytes_per_s": {str(int(r)): s for r, s in sorted(slopes.items())}},
        hints=(HINT_HOST,))
