"""The job's parallel layout read from its rank files, and the ranks a finding names placed in it.

The layout is each rank's header (host, local rank, GPU index, PCI bus id and UUID) and the
`parallel_group` records written after it (rank/auto/groups.py, or the rank API), built into a
`checks.layout.Layout` once per loaded run. `place(run, ranks)` is what the hang, straggler and
rank-crash rules add to a finding about those ranks (docs/findings.md, "Where the ranks are"):
  - evidence `coordinates` ({rank: {"host", "local_rank", "gpu_index", "gpu_pci_bus_id", "gpu_uuid",
    "groups": {label: {"index", "ranks", "size", "position", ...}}}}, the first MAX_COORDINATES ranks),
    `fault_domain` ("rank", "host", "group" or "scattered"), `fault_hosts` (the ranks' hosts) and
    `fault_group` (the group they share across machines: label, index, ranks, hosts);
  - a title clause: the first rank's place ("rank 537: host gpu-a67, GPU 1, tp group 67 (ranks
    536-543), pp stage 2") and the verdict ("all 8 ranks of host gpu-a67: drain host gpu-a67");
  - the remedy for that verdict.
A run without headers or groups gets nothing added.

Typical use (in a rule):
    placed = place(run, culprits, host_of={r: report.host_of(r) for r in report.ranks})
    title += placed.clause
    evidence.update(placed.evidence)
    hints = placed.hints + hints
"""
from __future__ import annotations

import functools
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from grpo_doctor.analysis.views import RunView, loaded_run
from grpo_doctor.checks.layout import FaultDomain, Layout, Membership, Place, build_layout, fault_domain
from grpo_doctor.schema import Header, ParallelGroup

MAX_COORDINATES = 16  # ranks whose coordinates a finding carries

HINT_DRAIN = ("The ranks that stand out all run on one machine and share nothing else: the machine, not the code "
              "(ByteRobust's rule). Drain it and rerun without it (Slurm: scontrol update nodename=HOST state=drain "
              "reason=grpo-doctor; Kubernetes: kubectl cordon HOST), then check it: nvidia-smi -q -d "
              "CLOCK,PERFORMANCE,ECC (throttling, ECC, row remapping), dmesg -T | grep -i xid, its NICs.")
HINT_GROUP_LINKS = ("The ranks that stand out share one process group whose ranks run on several machines: the "
                    "links between those machines, not one machine. Test that group's links directly (nccl-tests "
                    "all_reduce_perf or ib_write_bw between its hosts, grpo-doctor probe on those nodes), look at "
                    "their NICs and switch ports, and run with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET to see the "
                    "transport each pair uses.")
HINT_CODE_PATH = ("The ranks that stand out are spread over machines and share no process group, so no machine and "
                  "no link explains them: a code path or the data. Look at what only those ranks do or get (a "
                  "rank-conditional branch, longer sequences, a logging, evaluation or checkpoint rank), not at the "
                  "hardware.")
DOMAIN_HINTS = {"host": HINT_DRAIN, "group": HINT_GROUP_LINKS, "scattered": HINT_CODE_PATH}
HINTS = (HINT_DRAIN, HINT_GROUP_LINKS, HINT_CODE_PATH)

_cache: dict[int, tuple[weakref.ref, Layout]] = {}


@dataclass(frozen=True)
class Placement:
    evidence: dict[str, Any] = field(default_factory=dict)
    clause: str = ""  # "; rank 537: host ...; all 8 ranks of host X: drain host X", or ""
    hints: tuple[str, ...] = ()
    domain: FaultDomain | None = None


def layout_of(run: RunView) -> Layout:
    """Every rank's place and groups, from its latest header and the groups recorded after it (cached per run)."""
    owner = loaded_run(run)  # one layout for every rule's view of the run
    hit = _cache.get(id(owner))
    if hit is not None and hit[0]() is owner:
        return hit[1]
    places: dict[int, Place] = {}
    memberships: list[Membership] = []
    for rank, log in sorted(run.rank_logs.items()):
        groups: list[Membership] = []
        header = None
        for record in log.records:
            if type(record) is ParallelGroup:
                groups.append(Membership(ranks=tuple(record.ranks), dim=record.dim, name=record.name,
                                         pg_name=record.pg_name))
            elif type(record) is Header:
                header, groups = record, []  # a restarted rank made its groups again
        memberships.extend(groups)
        if header is not None:
            places[rank] = Place(host=header.host or None, local_rank=header.local_rank,
                                 gpu_index=header.gpu_index, gpu_pci_bus_id=header.gpu_pci_bus_id,
                                 gpu_uuid=header.gpu_uuid)
        elif log.host:
            places[rank] = Place(host=log.host)
    layout = build_layout(places, memberships)
    key = id(owner)
    _cache[key] = (weakref.ref(owner, functools.partial(_forget, key)), layout)
    return layout


def _forget(key: int, ref: weakref.ref) -> None:
    """A run was freed: its layout goes (its id may be another run's later)."""
    if key in _cache and _cache[key][0] is ref:
        del _cache[key]


def place(run: RunView, ranks: Iterable[int], host_of: Mapping[int, str | None] | None = None,
          judge: bool = True) -> Placement:
    """Where `ranks` are and what they share (module docstring); `host_of` fills in hosts the rank files
    lack (a hang report's). judge=False: coordinates only, no verdict (ranks that are not outliers)."""
    ranks = sorted(set(ranks))
    layout = layout_of(run)
    if not ranks or not (layout or host_of):
        return Placement()
    evidence: dict[str, Any] = {}
    told = [r for r in ranks if layout.groups_of(r) or _gpu_known(layout, r)]
    if told:
        evidence["coordinates"] = {r: layout.coordinates(r) for r in ranks[:MAX_COORDINATES]}
    clause = f"; {layout.describe(told[0])}" if told else ""
    domain = fault_domain(layout, ranks, host_of) if judge else None
    if domain is None or (domain.kind == "rank" and not told):  # one rank, placed nowhere: nothing to say
        return Placement(evidence, clause)
    evidence.update(domain.to_evidence())
    verdict = domain.verdict()
    hint = DOMAIN_HINTS.get(domain.kind)
    return Placement(evidence, clause + (f"; {verdict}" if verdict else ""), (hint,) if hint else (), domain)


def _gpu_known(layout: Layout, rank: int) -> bool:
    place = layout.places.get(rank)
    return place is not None and (place.gpu_index is not None or place.gpu_pci_bus_id is not None)
