"""Where ranks sit, and what the ranks that stand out have in common: one machine, one group, or nothing.

A job's layout is each rank's place (host, local rank, GPU index and PCI bus id as NVML numbers them)
and the process groups it is in (the `parallel_group` records: tp, pp, dp, a DeviceMesh's dimensions,
unnamed groups). `Layout.describe(rank)` says where a rank is in one line:
    rank 537: host gpu-a67, GPU 1, tp group 67 (ranks 536-543), pp stage 2
and `fault_domain(layout, outliers)` judges the ranks that stand out (hung, slow, crashed) the way
ByteRobust does (SOSP '25: aggregate the stacks, then isolate by where the outliers are):
  - "host": they all run on one machine (at least two of them), or they are every rank of several
    machines: the machine, not the code -> drain that host;
  - "group": they share one process group whose ranks run on several machines (a pp stage chain, a dp
    group): the links between those machines -> test that group's links;
  - "scattered": on several machines with no group in common: a code path or the data, not the hardware;
  - "rank": a single rank: its coordinates say where; one outlier cannot tell its GPU from its code.
Groups that span every known rank (the world) or one rank say nothing and are left out.

Pure: numbers and strings in, numbers and strings out. Judging 1,024 ranks takes milliseconds
(benchmarks/bench_fleet_layout.py).

Typical use:
    layout = build_layout({r: Place(host=...) for r in ...}, [Membership(ranks=(0, 1), dim="tp"), ...])
    layout.describe(537)
    domain = fault_domain(layout, [536, 537, 538])
    domain.kind, domain.verdict()          # "host", "all 3 on host gpu-a67: drain host gpu-a67"
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from grpo_doctor.schema.ranks import format_ranks

# Dimensions in the order a rank's place is told: the innermost (within a machine) first.
DIM_ORDER = ("tp", "sp", "cp", "ep", "pp", "dp")
STAGE_DIMS = frozenset({"pp"})  # a rank's position in such a group is its stage
MAX_GROUPS_TOLD = 4  # groups named in one rank's line; the rest are in its coordinates
MAX_RANKS_LISTED = 8  # a group larger than this is told by its size
MAX_HOSTS_TOLD = 4


@dataclass(frozen=True)
class Place:
    """Where one rank runs (its header): None where unknown (a CPU job has no GPU index)."""

    host: str | None
    local_rank: int | None = None
    gpu_index: int | None = None
    gpu_pci_bus_id: str | None = None
    gpu_uuid: str | None = None


@dataclass(frozen=True)
class Membership:
    """One group as one rank recorded it (schema ParallelGroup)."""

    ranks: tuple[int, ...]
    dim: str | None = None
    name: str | None = None
    pg_name: str | None = None


@dataclass(frozen=True)
class Group:
    """A process group of the job: `label` is its dimension, else its name, else "group N" (N torch's
    group name); `index` its number among the groups of that label, ordered by their lowest rank (an
    unnamed group's is N)."""

    label: str
    ranks: tuple[int, ...]  # group-rank order: a rank's position is its stage in a pipeline group
    index: int
    dim: str | None = None
    name: str | None = None

    @property
    def is_stage_chain(self) -> bool:
        return self.dim in STAGE_DIMS

    def ranks_text(self) -> str:
        return f"ranks {format_ranks(self.ranks)}" if len(self.ranks) <= MAX_RANKS_LISTED \
            else f"{len(self.ranks)} ranks"

    @property
    def unnamed(self) -> bool:
        return self.dim is None and self.name is None

    def title(self) -> str:
        """"tp group 67 (ranks 536-543)"; an unnamed one "group 6 (ranks 0,3)"."""
        return f"{self.label} ({self.ranks_text()})" if self.unnamed else \
            f"{self.label} group {self.index} ({self.ranks_text()})"

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "dim": self.dim, "name": self.name, "index": self.index,
                "ranks": format_ranks(self.ranks), "size": len(self.ranks)}


@dataclass
class Layout:
    places: dict[int, Place] = field(default_factory=dict)
    groups: list[Group] = field(default_factory=list)
    _of_rank: dict[int, list[Group]] = field(default_factory=dict, repr=False)
    _ranks_of_host: dict[str, set[int]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        for group in self.groups:
            for rank in group.ranks:
                self._of_rank.setdefault(rank, []).append(group)
        for rank, place in self.places.items():
            if place.host:
                self._ranks_of_host.setdefault(place.host, set()).add(rank)
        for groups in self._of_rank.values():
            groups.sort(key=_told_order)

    def __bool__(self) -> bool:
        return bool(self.places or self.groups)

    def host_of(self, rank: int) -> str | None:
        place = self.places.get(rank)
        return place.host if place is not None else None

    def ranks_of_host(self, host: str) -> set[int]:
        return self._ranks_of_host.get(host, set())

    def groups_of(self, rank: int) -> list[Group]:
        """The groups of `rank`, innermost dimension first (tp before pp before dp), unnamed ones last."""
        return self._of_rank.get(rank, [])

    def coordinates(self, rank: int) -> dict[str, Any]:
        """Evidence form: {"host", "local_rank", "gpu_index", "gpu_pci_bus_id", "gpu_uuid", "groups":
        {label: {"index", "ranks", "size", "position", "dim", "name"}}}."""
        place = self.places.get(rank, Place(host=None))
        groups = {}
        for group in self.groups_of(rank):
            groups.setdefault(group.label, {**group.to_dict(), "position": group.ranks.index(rank)})
        return {"host": place.host, "local_rank": place.local_rank, "gpu_index": place.gpu_index,
                "gpu_pci_bus_id": place.gpu_pci_bus_id, "gpu_uuid": place.gpu_uuid, "groups": groups}

    def describe(self, rank: int) -> str:
        """"rank 537: host gpu-a67, GPU 1, tp group 67 (ranks 536-543), pp stage 2"."""
        place = self.places.get(rank, Place(host=None))
        parts = [f"host {place.host}"] if place.host else []
        if place.gpu_index is not None:
            parts.append(f"GPU {place.gpu_index}")
        elif place.local_rank is not None and self.groups_of(rank):
            parts.append(f"local rank {place.local_rank}")
        seen: set[str] = set()
        for group in self.groups_of(rank):
            if group.label in seen or len(seen) >= MAX_GROUPS_TOLD:
                continue
            seen.add(group.label)
            parts.append(f"{group.label} stage {group.ranks.index(rank)}" if group.is_stage_chain else group.title())
        return f"rank {rank}: " + ", ".join(parts) if parts else f"rank {rank}"


def build_layout(places: Mapping[int, Place], memberships: Iterable[Membership]) -> Layout:
    """The job's layout from every rank's place and the groups the ranks recorded (each group once,
    however many members recorded it; a group of one rank, or of every known rank, is left out)."""
    known = set(places)
    by_key: dict[tuple, Membership] = {}
    for m in memberships:
        ranks = tuple(m.ranks)
        if len(ranks) >= 2:
            known.update(ranks)
            by_key.setdefault((m.dim or m.name, ranks), m)
    named_sets = {ranks for (label, ranks) in by_key if label is not None}
    world = len(known)
    labelled: dict[str, list[Membership]] = {}
    for (label, ranks), m in by_key.items():
        if len(set(ranks)) >= world or (label is None and ranks in named_sets):
            continue  # the world says nothing; an unnamed copy of a named group adds nothing
        labelled.setdefault(label if label is not None else f"group {m.pg_name or '?'}", []).append(m)
    groups = []
    for label, members in labelled.items():
        members.sort(key=lambda m: (min(m.ranks), m.ranks))
        for index, m in enumerate(members):
            unnamed = m.dim is None and m.name is None
            groups.append(Group(label=label, ranks=tuple(m.ranks), index=index if not unnamed else
                                _pg_number(m.pg_name, index), dim=m.dim, name=m.name))
    return Layout(places=dict(places), groups=groups)


@dataclass(frozen=True)
class FaultDomain:
    """What the outliers share (module docstring). `hosts`: theirs; `whole_hosts`: those all of whose
    ranks are outliers; `group` / `group_hosts`: the group they share across machines and its hosts."""

    kind: str  # "rank" | "host" | "group" | "scattered"
    ranks: tuple[int, ...]
    hosts: tuple[str, ...]
    whole_hosts: tuple[str, ...] = ()
    group: Group | None = None
    group_hosts: tuple[str, ...] = ()
    ranks_per_host: dict[str, list[int]] = field(default_factory=dict)

    def verdict(self) -> str:
        """The title's clause: what it is and what to do."""
        n = len(self.ranks)
        if self.kind == "host" and len(self.hosts) == 1:
            what = f"all {n} ranks of host" if self.whole_hosts else f"{n} ranks, all on host"
            return f"{what} {self.hosts[0]}: drain host {self.hosts[0]}"
        if self.kind == "host":
            names = _hosts_text(self.hosts)
            return f"every rank of hosts {names}: drain hosts {names}"
        if self.kind == "group":
            return (f"they share {self.group.title()} across hosts {_hosts_text(self.group_hosts)}: "
                    f"check that group's links")
        if self.kind == "scattered":
            return f"scattered over {len(self.hosts)} hosts with no group in common: a code path, not the hardware"
        return ""

    def to_evidence(self) -> dict[str, Any]:
        """The `fault_domain` key and what backs it (docs/findings.md)."""
        out: dict[str, Any] = {"fault_domain": self.kind, "fault_hosts": list(self.hosts)}
        if self.group is not None:
            out["fault_group"] = {**self.group.to_dict(), "hosts": list(self.group_hosts)}
        return out


def fault_domain(layout: Layout, outliers: Iterable[int], host_of: Mapping[int, str | None] | None = None
                 ) -> FaultDomain | None:
    """Judge the outliers (module docstring). None where nothing can be told: no outlier's host is known,
    every known rank is an outlier, or several outliers share the job's only host. `host_of` fills in
    hosts (and ranks) the layout lacks: a hang report's, the ranks that recorded phases."""
    ranks = tuple(sorted(set(outliers)))
    if not ranks:
        return None
    host_of = host_of or {}
    hosts_of = {r: layout.host_of(r) or host_of.get(r) for r in ranks}
    if all(h is None for h in hosts_of.values()):
        return None
    per_host: dict[str, list[int]] = {}
    for rank, host in hosts_of.items():
        per_host.setdefault(host or "?", []).append(rank)
    hosts = tuple(sorted(per_host, key=natural))
    out = set(ranks)
    others = (set(layout.places) | set(layout._of_rank) | set(host_of)) - out
    if not others:
        return None  # every rank stands out: nothing to tell them from
    whole = tuple(h for h in hosts if h != "?" and (ranks_there := _ranks_there(layout, h, host_of))
                  and len(ranks_there) >= 2 and ranks_there <= out)
    common = {"ranks_per_host": {h: per_host[h] for h in hosts}}
    if len(ranks) == 1:
        return FaultDomain("rank", ranks, hosts, whole, **common)
    if len(hosts) == 1:
        elsewhere = any((layout.host_of(r) or host_of.get(r)) not in (None, hosts[0]) for r in others)
        # A machine stands out only beside others that do not: on a one-host job, no verdict.
        return FaultDomain("host", ranks, hosts, whole, **common) if elsewhere and hosts[0] != "?" else None
    shared = _shared_group(layout, ranks)
    if shared is not None:
        group_hosts = tuple(sorted({h for r in shared.ranks if (h := layout.host_of(r) or host_of.get(r))}, key=natural))
        if len(group_hosts) >= 2:
            return FaultDomain("group", ranks, hosts, whole, shared, group_hosts, **common)
    if whole and set(whole) == set(hosts):
        return FaultDomain("host", ranks, hosts, whole, **common)
    return FaultDomain("scattered", ranks, hosts, whole, **common)


def _shared_group(layout: Layout, ranks: tuple[int, ...]) -> Group | None:
    """The smallest group holding every one of `ranks`."""
    members = set(ranks)
    found = [g for g in layout.groups_of(ranks[0]) if members <= set(g.ranks)]
    return min(found, key=lambda g: (len(g.ranks), _told_order(g))) if found else None


def _ranks_there(layout: Layout, host: str, host_of: Mapping[int, str | None]) -> set[int]:
    there = set(layout.ranks_of_host(host))
    there.update(r for r, h in host_of.items() if h == host)
    return there


def _told_order(group: Group) -> tuple:
    """Known dimensions innermost first, then other dimensions, then named groups, then unnamed ones."""
    dim = group.dim.split("-")[0] if group.dim else None
    rank = DIM_ORDER.index(dim) if dim in DIM_ORDER else len(DIM_ORDER) + (group.dim is None) + group.unnamed
    return (rank, natural(group.label), group.index)


def _pg_number(pg_name: str | None, index: int) -> int:
    return int(pg_name) if pg_name is not None and pg_name.isdigit() else index


def natural(text: str) -> tuple:
    """Sort key: "gpu-a3" before "gpu-a35", as people number machines."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", text))


def _hosts_text(hosts: Iterable[str]) -> str:
    hosts = list(hosts)
    shown = ", ".join(hosts[:MAX_HOSTS_TOLD])
    return shown + (f" and {len(hosts) - MAX_HOSTS_TOLD} more" if len(hosts) > MAX_HOSTS_TOLD else "")
