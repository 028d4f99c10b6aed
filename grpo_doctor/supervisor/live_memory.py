"""`memory-growth` judged while the job runs (watch's sentinels.py): memory creeping toward an OOM, said
before the OOM.

The report's rule (analysis/rules/memory_growth.py) made incremental, with its thresholds
(checks/memory_trend.MemoryGrowthConfig) and its check (`memory_growth_check`) on the same points:
- from the ranks' Memory records as watch's tracker reads them: per rank and step the largest value of
  each figure among the step's snapshots (a step is complete once the rank records a later step, its
  Step record, or its end): the card's used memory against its total, split into the trainer's
  allocator and the rest; per host, its ranks' RSS together against the tightest of RAM and the memory
  cgroup, and each rank's virtual size against its RLIMIT_AS (the capacities its header recorded), the
  one met first said;
- for a host whose ranks record no memory (an uninstrumented job), from watch's own samples: each GPU's
  used memory and the ranks' RSS, the largest of each `sample_interval_s` being one point.

Each series keeps its last `warmup_points + window_points` points, exactly what the report's window
takes of the whole run, so the answer is the report's for the run so far. A series is judged when it got
a point since it was last judged, at most once a round of watch's loop, and a round judges for at most
`JUDGE_BUDGET_S` (the rest go first next round): bounded work whatever the run's length or its ranks.

Typical use:
    memory = LiveMemory("node-0")
    if memory.add_records(records) | memory.add_samples(samples):   # each round
        memory.standing()   # {key: finding dict (findings.json's shape)}
"""
from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from grpo_doctor.checks.memory_trend import (
    CAPACITY_NAMES,
    ID,
    WHERE,
    MemoryGrowthConfig,
    gpu_component,
    memory_growth_check,
    projection_text,
    rate_text,
    sampled_gpu_component,
    window_slope,
)
from grpo_doctor.schema import End, Error, Header, Memory, Step

MEMORY_SOURCE = "memory"  # the sentinels' source of these findings
# Judging one series costs about 8-15 ms (a robust fit of 205 points): a shared run directory's 256 ranks
# would take seconds of watch's loop a step, which its hang checks need. So a poll judges for this long,
# and the rest waits a poll or a few: memory grows over minutes.
JUDGE_BUDGET_S = 0.05
MAX_OPEN_STEPS = 16  # steps of a host's ranks waiting for the host's last rank (its RSS together)
HINTS = {
    "allocated": "Tensors stay referenced from step to step (losses, logits or rollouts kept without .detach() / "
                 ".item()): compare the allocator history of two steps (GRPO_DOCTOR_MEMORY_HISTORY=1).",
    "reserved": "Cached blocks, not a leak: torch.cuda.empty_cache() after generation (or the framework's switch "
                "for it), pad or bucket lengths so blocks are reused.",
    "other-processes": "The rollout engine on the same GPU: cap its memory share, reset its prefix cache, put it "
                       "to sleep while the trainer steps.",
    "gpu-used": "Find what holds the memory: the trainer's tensors, its allocator's cache, or the rollout engine.",
    "host": "Python objects or CPU tensors kept from step to step: compare two tracemalloc snapshots taken steps "
            "apart. Raising the limit only moves the OOM later.",
}
_FIGURES = ("t", "card_used", "allocated", "reserved", "others", "total", "rss", "vms")


@dataclass
class _Series:
    """One judged series: its last points (x: a step or a time; t: wall time; figures by name)."""

    size: int
    points: deque = field(init=False)
    fresh: bool = False  # a point came since it was last judged

    def __post_init__(self) -> None:
        self.points = deque(maxlen=self.size)

    def add(self, x: float, **figures: float) -> None:
        self.points.append((x, figures))
        self.fresh = True

    def column(self, name: str) -> np.ndarray:
        return np.array([f.get(name, np.nan) for _, f in self.points], dtype=float)

    @property
    def x(self) -> np.ndarray:
        return np.array([x for x, _ in self.points], dtype=float)


class LiveMemory:
    def __init__(self, host: str, config: MemoryGrowthConfig | None = None) -> None:
        self.host = host
        self.cfg = config or MemoryGrowthConfig()
        self._size = self.cfg.warmup_points + self.cfg.window_points
        self.headers: dict[int, Header] = {}
        self.hosts: dict[int, str] = {}  # rank -> its host
        self._open: dict[int, tuple[int, dict[str, float]]] = {}  # rank -> (step, its figures so far)
        self._closed: dict[int, int] = {}  # rank -> the last step handed on
        self._gpu: dict[int, _Series] = {}  # rank -> its card's used memory, per step
        self._vms: dict[int, _Series] = {}  # rank -> its virtual size, per step
        self._rss: dict[str, _Series] = {}  # host -> its ranks' RSS together (each rank's too), per step
        self._host_steps: dict[str, dict[int, dict[int, tuple[float, float]]]] = {}  # host -> step -> rank -> (t, rss)
        self._rss_ranks: dict[str, set[int]] = {}  # host -> its ranks that record their RSS
        self._bins: dict[tuple, tuple[int, dict[str, float]]] = {}  # a samples series -> (its open interval, figures)
        self._sampled: dict[tuple, _Series] = {}  # ("gpu", index) | ("host",) -> per interval
        self._t0: float | None = None  # the first sample's time: intervals count from it
        self._pid_rank: dict[int, int] = {}  # a rank's process, as the sampler found it
        self._recorded: dict[str, set] = {"gpu": set(), "host": set()}  # hosts whose ranks record that memory
        self._found: dict[tuple, dict[str, Any]] = {}  # key -> finding, as last judged
        self._last_judged: tuple = ()  # the order of the key judged last: a budgeted round goes on after it
        self.last_step: int | None = None

    # -- the ranks' records ---------------------------------------------------------------------------

    def add_records(self, records: Iterable[object]) -> bool:
        """Fold in the new records; whether a series got a point."""
        for rec in records:
            if isinstance(rec, Header):
                self.headers[rec.rank] = rec
                self.hosts[rec.rank] = rec.host
            elif isinstance(rec, Memory) and rec.step is not None:
                self._snapshot(rec)
            elif isinstance(rec, Step) and rec.step is not None:
                if rec.rank in self._open and self._open[rec.rank][0] <= rec.step:
                    self._close(rec.rank)
            elif isinstance(rec, (End, Error)):
                self._close(rec.rank)
        return self._any_fresh()

    def finish(self) -> bool:
        """At the end of the job: every rank's open step handed on."""
        for rank in list(self._open):
            self._close(rank)
        return self._any_fresh()

    def _snapshot(self, rec: Memory) -> None:
        rank, step = rec.rank, int(rec.step)
        if step <= self._closed.get(rank, -1) or (rank in self._open and step < self._open[rank][0]):
            return  # a snapshot of a step already handed on, or older than the one open
        self.hosts.setdefault(rank, rec.host)
        if rank in self._open and self._open[rank][0] < step:
            self._close(rank)
        card = rec.total_bytes - rec.free_bytes if rec.total_bytes is not None and rec.free_bytes is not None else None
        now = {"t": rec.t, "card_used": card, "allocated": rec.allocated_bytes, "reserved": rec.reserved_bytes,
               "others": card - rec.reserved_bytes if card is not None and rec.reserved_bytes is not None else None,
               "total": rec.total_bytes, "rss": rec.host_rss_bytes, "vms": rec.host_vms_bytes}
        _, peak = self._open.setdefault(rank, (step, {}))
        for name in _FIGURES:
            if now[name] is not None:
                peak[name] = max(peak.get(name, now[name]), float(now[name]))

    def _close(self, rank: int) -> None:
        """Hand on the rank's open step: a point of its series."""
        if rank not in self._open:
            return
        step, peak = self._open.pop(rank)
        self._closed[rank] = step
        self.last_step = step if self.last_step is None else max(self.last_step, step)
        host = self.hosts.get(rank)
        if "card_used" in peak:
            self._recorded["gpu"].add(host)
            self._gpu.setdefault(rank, _Series(self._size)).add(step, **peak)
        if "vms" in peak:
            self._vms.setdefault(rank, _Series(self._size)).add(step, t=peak["t"], vms=peak["vms"])
        if "rss" in peak:
            self._recorded["host"].add(host)
            self._rss_ranks.setdefault(host, set()).add(rank)
            self._host_step(host, rank, step, peak["t"], peak["rss"])

    def _host_step(self, host: str | None, rank: int, step: int, t: float, rss: float) -> None:
        """A host's RSS together at the steps every one of its ranks recorded (the report's inner join)."""
        waiting = self._host_steps.setdefault(host, {})
        waiting.setdefault(step, {})[rank] = (t, rss)
        ranks = self._rss_ranks[host]
        for s in sorted(waiting):
            if not ranks <= set(waiting[s]):
                continue
            got = waiting[s]
            series = self._rss.setdefault(host, _Series(self._size))
            series.add(s, t=max(t for t, _ in got.values()), rss=sum(v for _, v in got.values()),
                       **{f"rss{r}": v for r, (_, v) in got.items()})
            for old in [o for o in waiting if o <= s]:
                del waiting[old]  # a step some rank never recorded is left out, as the report's join does
        for old in sorted(waiting)[:-MAX_OPEN_STEPS]:
            del waiting[old]

    # -- watch's samples -------------------------------------------------------------------------------

    def add_samples(self, samples: Iterable[object]) -> bool:
        """Fold in the sampler's new rounds (supervisor/sampler.py's GpuSample / ProcSample); whether a
        series got a point (an interval closed)."""
        for s in samples:
            self._t0 = s.t if self._t0 is None else self._t0
            slot = int((s.t - self._t0) // self.cfg.sample_interval_s)
            if getattr(s, "KIND", None) == "gpu" and s.mem_used_bytes is not None:
                figures = {"used": s.mem_used_bytes, "total": s.mem_total_bytes,
                           **{f"pid{p}": u for p, u in s.processes if u is not None}}
                self._sample(("gpu", s.index), slot, s.t, figures)
            elif getattr(s, "KIND", None) == "proc" and s.rss_bytes is not None:
                self._pid_rank[s.pid] = s.rank
                self._sample(("host",), slot, s.t, {f"rss{s.rank}": s.rss_bytes})
        return self._any_fresh()

    def _sample(self, key: tuple, slot: int, t: float, figures: dict[str, float | None]) -> None:
        current = self._bins.get(key)
        if current is not None and current[0] < slot:
            self._close_bin(key)
            current = None
        if current is None:
            current = self._bins[key] = (slot, {})
        peak = current[1]
        peak["t"] = max(peak.get("t", t), t)
        for name, value in figures.items():
            if value is not None:
                peak[name] = max(peak.get(name, value), float(value))

    def _close_bin(self, key: tuple) -> None:
        _, peak = self._bins.pop(key)
        if key == ("host",):
            ranks = [v for name, v in peak.items() if name.startswith("rss")]
            peak["rss"] = sum(ranks)
        self._sampled.setdefault(key, _Series(self._size)).add(peak["t"], **peak)

    # -- the verdict ------------------------------------------------------------------------------------

    def standing(self, budget_s: float | None = JUDGE_BUDGET_S) -> dict[tuple, dict[str, Any]]:
        """The findings the report would make of the points so far: {key: finding}; each series that got a
        point since it was last judged is judged again, the others stand as they were. At most `budget_s`
        of judging a call (None: all that is due, at the job's end); what is left waits for the next call,
        taken up where this one stopped, so that no series waits for ever behind others."""
        start = time.perf_counter()
        due = self._due()  # in one order every call: gpu series by rank, then hosts, then samples
        if due:
            # Start after the key judged last: the ones it skipped come first, however many became fresh since.
            turn = next((i for i, (key, _, _) in enumerate(due) if _order(key) > self._last_judged), 0)
            for n, (key, judge, series) in enumerate(due[turn:] + due[:turn]):
                if budget_s is not None and n and time.perf_counter() - start > budget_s:
                    break
                self._set(key, judge())
                self._last_judged = _order(key)
                for s in series:
                    s.fresh = False
        return {("memory-growth", MEMORY_SOURCE, *key): f for key, f in self._found.items()}

    def _due(self) -> list[tuple[tuple, Callable[[], dict[str, Any] | None], list[_Series]]]:
        """(key, its judgement, the series it reads) for every key with a series that got a point."""
        due: list[tuple[tuple, Callable[[], dict[str, Any] | None], list[_Series]]] = []
        for rank, series in sorted(self._gpu.items()):
            if series.fresh:
                due.append((("gpu", rank), partial(self._gpu_finding, rank, series), [series]))
        for host in sorted({*self._rss, *(self.hosts.get(r) for r in self._vms)}, key=str):
            mine = [s for s in [self._rss.get(host)] + [s for r, s in self._vms.items() if self.hosts.get(r) == host]
                    if s is not None]
            if any(s.fresh for s in mine):
                due.append((("host", host), partial(self._host_finding, host), mine))
        for key, series in sorted(self._sampled.items(), key=lambda kv: str(kv[0])):
            if series.fresh:  # the report reads samples only for a host whose ranks recorded none
                covered = self.host in self._recorded[key[0]]
                judge = (lambda: None) if covered else partial(self._sampled_finding, key, series)
                due.append((("samples", *key), judge, [series]))
        return sorted(due, key=lambda d: _order(d[0]))

    def _set(self, key: tuple, finding: dict[str, Any] | None) -> None:
        if finding is None:
            self._found.pop(key, None)
        else:
            self._found[key] = finding

    def _any_fresh(self) -> bool:
        return any(s.fresh for group in (self._gpu, self._vms, self._rss, self._sampled) for s in group.values())

    def _gpu_finding(self, rank: int, series: _Series) -> dict[str, Any] | None:
        trend, steps = self.cfg.trend(), series.x
        used, totals = series.column("card_used"), series.column("total")
        totals = totals[np.isfinite(totals)]
        found = memory_growth_check(used, float(np.median(totals)) if totals.size else None, steps=steps,
                                    times_s=series.column("t"), config=trend, what="GPU memory")
        if found is None:
            return None
        ev = found["evidence"]
        split = {name: window_slope(steps, series.column(column), trend, ev["num_points"])
                 for name, column in (("allocated", "allocated"), ("reserved", "reserved"), ("other", "others"))}
        component = gpu_component(ev["slope_bytes_per_step"], split, self.cfg.component_share)
        device = getattr(self.headers.get(rank), "gpu_index", None)
        where = f"GPU {device} of rank {rank}" if device is not None else f"the GPU of rank {rank}"
        return _finding(found["severity"], f"memory grows {rate_text(ev)} on {where} ({WHERE[component]})"
                        f"{projection_text(ev, CAPACITY_NAMES['gpu-total'])}", (rank,), self.hosts.get(rank),
                        ev["last_step"], {"memory": "gpu", "component": component, "source": "event-log",
                                          "capacity_kind": "gpu-total" if ev["capacity_bytes"] else None, **ev,
                                          "allocated_slope_bytes_per_step": split["allocated"],
                                          "reserved_slope_bytes_per_step": split["reserved"],
                                          "other_slope_bytes_per_step": split["other"]}, HINTS[component])

    def _host_finding(self, host: str | None) -> dict[str, Any] | None:
        """The host's RSS against RAM / the cgroup, each rank's virtual size against its RLIMIT_AS: the
        capacity met first (the report's _host_from_records)."""
        trend, candidates = self.cfg.trend(), []
        ranks = sorted(r for r, h in self.hosts.items() if h == host)
        rss = self._rss.get(host)
        if rss is not None and len(rss.points) >= trend.min_points:
            caps = [(kind, _smallest(self.headers, ranks, attr)) for kind, attr in
                    (("ram", "ram_bytes"), ("cgroup-memory-max", "cgroup_memory_max_bytes"))]
            kind, cap = min(((k, c) for k, c in caps if c), key=lambda kc: kc[1], default=(None, None))
            found = memory_growth_check(rss.column("rss"), cap, steps=rss.x, times_s=rss.column("t"), config=trend)
            if found:
                slopes = {r: window_slope(rss.x, rss.column(f"rss{r}"), trend, found["evidence"]["num_points"])
                          for r in ranks}
                candidates.append(("host-rss", kind, found, slopes))
        for rank in ranks:
            limit, vms = getattr(self.headers.get(rank), "rlimit_as_bytes", None), self._vms.get(rank)
            if not limit or vms is None or len(vms.points) < trend.min_points:
                continue
            found = memory_growth_check(vms.column("vms"), limit, steps=vms.x, times_s=vms.column("t"), config=trend)
            if found:
                candidates.append(("address-space", "rlimit-as", found, {rank: found["evidence"]["slope_bytes_per_step"]}))
        if not candidates:
            return None
        component, kind, found, slopes = min(candidates, key=_urgency)
        ev = found["evidence"]
        named = _growing(slopes)
        what = "virtual size (address space)" if component == "address-space" else "host memory (RSS)"
        title = (f"{what} of {_who(named)}{f' on {host}' if host else ''} grows {rate_text(ev)}"
                 f"{projection_text(ev, CAPACITY_NAMES.get(kind or '', 'capacity'))}")
        return _finding(found["severity"], title, named, host, ev["last_step"],
                        {"memory": "host", "component": component, "source": "event-log", "gpu": None,
                         "capacity_kind": kind if ev["capacity_bytes"] else None, **ev,
                         "rank_slopes_bytes_per_step": {str(r): s for r, s in sorted(slopes.items())}}, HINTS["host"])

    def _sampled_finding(self, key: tuple, series: _Series) -> dict[str, Any] | None:
        """An uninstrumented host: a GPU's used memory (the process growing most named), or its ranks' RSS
        together, per interval of watch's samples (the report's _from_samples)."""
        trend, times = self.cfg.trend(), series.x
        names = {name for _, figures in series.points for name in figures}
        if key[0] == "gpu":
            totals = series.column("total")
            totals = totals[np.isfinite(totals)]
            found = memory_growth_check(series.column("used"), float(np.median(totals)) if totals.size else None,
                                        times_s=times, config=trend, what="GPU memory")
            if found is None:
                return None
            ev = found["evidence"]
            slopes = {int(n[3:]): window_slope(times, np.nan_to_num(series.column(n)), trend, ev["num_points"])
                      for n in sorted(names) if n.startswith("pid")}  # a process not yet started holds nothing
            slopes = {p: s for p, s in slopes.items() if s is not None}
            pid = max(slopes, key=lambda p: slopes[p]) if slopes else None
            pid_rank = self._pid_rank.get(pid) if pid is not None else None
            component, who = sampled_gpu_component(pid, pid_rank)
            ranks = tuple(sorted(r for p, r in self._pid_rank.items() if p in slopes))
            title = (f"memory grows {rate_text(ev)} on GPU {key[1]} of {self.host}{who}"
                     f"{projection_text(ev, CAPACITY_NAMES['gpu-total'])}")
            return _finding(found["severity"], title, ranks, self.host, None,
                            {"memory": "gpu", "component": component, "source": "watch-samples", "gpu": key[1],
                             "capacity_kind": "gpu-total" if ev["capacity_bytes"] else None, **ev,
                             "process_slopes_bytes_per_s": {str(p): s for p, s in slopes.items()}, "pid": pid,
                             "pid_rank": pid_rank}, HINTS[component])
        ranks = sorted(int(n[3:]) for n in names if n.startswith("rss") and n != "rss")
        caps = [(kind, _smallest(self.headers, ranks, attr)) for kind, attr in
                (("ram", "ram_bytes"), ("cgroup-memory-max", "cgroup_memory_max_bytes"))]
        kind, cap = min(((k, c) for k, c in caps if c), key=lambda kc: kc[1], default=(None, None))
        found = memory_growth_check(series.column("rss"), cap, times_s=times, config=trend)
        if found is None:
            return None
        ev = found["evidence"]
        slopes = {r: window_slope(times, series.column(f"rss{r}"), trend, ev["num_points"]) for r in ranks}
        named = _growing(slopes)
        title = (f"host memory (RSS) of {_who(named)} on {self.host} grows {rate_text(ev)}"
                 f"{projection_text(ev, CAPACITY_NAMES.get(kind or '', 'capacity'))}")
        return _finding(found["severity"], title, named, self.host, None,
                        {"memory": "host", "component": "host-rss", "source": "watch-samples", "gpu": None,
                         "capacity_kind": kind if ev["capacity_bytes"] else None, **ev,
                         "rank_slopes_bytes_per_s": {str(r): s for r, s in sorted(slopes.items())}}, HINTS["host"])


def _finding(severity: str, title: str, ranks: tuple[int, ...], host: str | None, step: int | None,
             evidence: dict[str, Any], hint: str) -> dict[str, Any]:
    return {"id": ID, "severity": severity, "title": title, "ranks": list(ranks), "hosts": [host] if host else [],
            "step": step, "phase": None, "evidence": evidence, "hints": [hint], "role": None, "caused_by": None}


def _smallest(headers: dict[int, Header], ranks: list[int], attr: str) -> int | None:
    values = [v for r in ranks if (v := getattr(headers.get(r), attr, None))]
    return min(values) if values else None


def _order(key: tuple) -> tuple:
    """A key's place in the order `_due` lists them (gpu series by rank, hosts, samples)."""
    group = ("gpu", "host", "samples").index(key[0])
    return (group, key[1]) if group == 0 else (group, str(key[1:]))


def _urgency(candidate: tuple) -> tuple:
    """The capacity met first (by time, else by steps), then any capacity, then none."""
    ev = candidate[2]["evidence"]
    return (ev["time_left_s"] is None and ev["steps_left"] is None,
            ev["time_left_s"] if ev["time_left_s"] is not None else float("inf"),
            ev["steps_left"] if ev["steps_left"] is not None else float("inf"))


def _growing(slopes: dict[int, float | None]) -> tuple[int, ...]:
    """The ranks that grow at least a quarter as fast as the fastest (all of them when none grows)."""
    growing = {r: s for r, s in slopes.items() if s is not None and s > 0}
    top = max(growing.values(), default=0.0)
    return tuple(sorted(r for r, s in growing.items() if s >= 0.25 * top)) or tuple(sorted(slopes))


def _who(ranks: tuple[int, ...]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"

