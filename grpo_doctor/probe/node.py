"""The probe on one node, before torchrun: its own checks (preflight), then a node rendezvous
on MASTER_ADDR:MASTER_PORT that names the nodes that never come, and the comparison of every
node's settings and versions.

Node 0 serves the rendezvous store on MASTER_PORT and closes it when every node has read the
others' reports, so torchrun can take the port next. Every node sees the same reports and so
makes the same decision whether to go on to the collectives.

Typical use:
    report = run_node_checks(NodeSpec(node_rank=1, nnodes=2, nproc_per_node=8, master_addr="10.0.0.1",
                                      master_port=29500), opts, say=print)
"""
from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from grpo_doctor.host.environment import collect_versions
from grpo_doctor.host.nvml import Nvml
from grpo_doctor.probe.consistency import compare_nodes
from grpo_doctor.probe.options import ProbeOptions
from grpo_doctor.probe.preflight import run_preflight
from grpo_doctor.probe.results import PORT_FREE, REACHABLE, NodeReport, Problem
from grpo_doctor.probe.settings import node_settings
from grpo_doctor.probe.store_gather import finish_together, gather_over_store
from grpo_doctor.schema.ranks import format_ranks

PREFIX = "grpo-doctor-probe/node"
# Settings whose difference means torchrun itself cannot form the job: no collectives then.
BLOCKING = ("NNODES", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class NodeSpec:
    node_rank: int
    nnodes: int
    nproc_per_node: int
    master_addr: str
    master_port: int


def run_node_checks(spec: NodeSpec, opts: ProbeOptions, say: Callable[[str], None]) -> NodeReport:
    started = opts.started_mono
    deadline = started + opts.rdzv_timeout_s
    host = socket.gethostname()
    nvml = Nvml()
    is_master = spec.node_rank == 0
    if not is_master:
        say(f"grpo-doctor probe: node {spec.node_rank} ({host}): connecting to {spec.master_addr}:{spec.master_port} "
            f"(up to {opts.rdzv_timeout_s:g} s)")
    pre = run_preflight(spec.master_addr, spec.master_port, is_master=is_master,
                        nproc_per_node=spec.nproc_per_node, environ=os.environ, deadline_mono=deadline, nvml=nvml)
    settings = node_settings(os.environ, nnodes=spec.nnodes, nproc_per_node=spec.nproc_per_node,
                             gpus=pre.gpus_visible, expect=opts.expect, args=opts.args)
    settings["MASTER_ADDR"], settings["MASTER_PORT"] = spec.master_addr, spec.master_port
    base = dict(node_rank=spec.node_rank, host=host, nnodes=spec.nnodes, nproc_per_node=spec.nproc_per_node,
                preflight=pre, settings=settings, versions=collect_versions(nvml), t=time.time(),
                rdzv_timeout_s=opts.rdzv_timeout_s)
    problems = list(pre.problems)
    if pre.connect not in (REACHABLE, PORT_FREE):
        return NodeReport(**base, problems=problems, waited_s=time.monotonic() - started)
    try:
        store = _open_store(spec, max(1.0, deadline - time.monotonic()))
    except Exception as exc:  # noqa: BLE001 - DistNetworkError, DistStoreError, TimeoutError
        problems.append(Problem(
            id="rendezvous-failure", severity="critical",
            message=f"the node rendezvous store at {spec.master_addr}:{spec.master_port} failed: "
                    f"{str(exc).splitlines()[0]}",
            hint="Check that node 0 is running and that MASTER_PORT is free there.", nodes=[spec.node_rank],
            hosts=[host]))
        return NodeReport(**base, problems=problems, waited_s=time.monotonic() - started)

    def note_wait(missing: list[int], left_s: float) -> None:
        say(f"grpo-doctor probe: waiting for node(s) {format_ranks(missing)} ({left_s:.0f} s left)")

    payload = {**{k: base[k] for k in ("host", "nnodes", "nproc_per_node", "settings", "versions")},
               "preflight": pre.to_dict()}
    got = gather_over_store(store, PREFIX, me=spec.node_rank, expected=range(spec.nnodes), payload=payload,
                            deadline_mono=deadline, on_wait=note_wait)
    finish_together(store, PREFIX, me=spec.node_rank, members=sorted(got.payloads), is_server=is_master)
    del store  # node 0: the server stops, and torchrun can listen on the port
    posts = got.first()
    problems += _rendezvous_problems(spec, got.missing, got.duplicated(), posts, opts.rdzv_timeout_s)
    problems += [Problem.from_dict(p) for node, post in posts.items() if node != spec.node_rank
                 for p in post["preflight"].get("problems", [])]
    problems += compare_nodes([(n, p["host"], p["settings"], p["versions"]) for n, p in posts.items()])
    problems = list({(p.id, p.message): p for p in problems}.values())
    return NodeReport(**base, arrived={str(n): p["host"] for n, p in posts.items()}, missing_nodes=got.missing,
                      missing_ranks=_ranks_of(got.missing, spec.nproc_per_node), waited_s=got.waited_s,
                      problems=problems)


def blocks_collectives(report: NodeReport) -> bool:
    """True when torchrun could not form the job: a node missing or unreachable, or settings
    that decide the rendezvous differ."""
    for p in report.problems:
        if p.severity != "critical":
            continue
        if p.id == "rendezvous-failure" or (p.id == "config-mismatch" and p.message.startswith(BLOCKING)):
            return True
    return False


def _open_store(spec: NodeSpec, timeout_s: float) -> Any:
    import torch.distributed as dist

    is_master = spec.node_rank == 0
    return dist.TCPStore(spec.master_addr, spec.master_port, spec.nnodes if is_master else None, is_master,
                         timeout=timedelta(seconds=timeout_s), wait_for_workers=False)


def _ranks_of(nodes: list[int], nproc_per_node: int) -> list[int]:
    return [n * nproc_per_node + i for n in nodes for i in range(nproc_per_node)]


def _rendezvous_problems(spec: NodeSpec, missing: list[int], duplicated: dict[int, list[dict]],
                         posts: dict[int, dict], timeout_s: float) -> list[Problem]:
    problems = []
    if missing:
        ranks = _ranks_of(missing, spec.nproc_per_node)
        joined = ", ".join(f"{n} ({p['host']})" for n, p in posts.items())
        problems.append(Problem(
            id="rendezvous-failure", severity="critical",
            message=f"node(s) {format_ranks(missing)} never joined within {timeout_s:g} s: rank(s) "
                    f"{format_ranks(ranks)} missing ({len(posts)} of {spec.nnodes} nodes joined: "
                    f"{joined})",
            hint="Start the missing node(s) with NODE_RANK set and the same MASTER_ADDR, MASTER_PORT and NNODES; if "
                 "they were started, read their output (an unreachable MASTER_ADDR or a crash before the "
                 "rendezvous), and start every node within --rdzv-timeout.",
            nodes=missing, ranks=ranks))
    extra = sorted(n for n in posts if n >= spec.nnodes)
    if extra:
        problems.append(Problem(
            id="config-mismatch", severity="critical",
            message=f"node(s) {format_ranks(extra)} joined but NNODES={spec.nnodes} here: NODE_RANK must be below NNODES",
            hint="Give every node the same NNODES and a NODE_RANK from 0 to NNODES-1.", nodes=extra,
            hosts=[posts[n]["host"] for n in extra]))
    for node, dup in duplicated.items():
        hosts = [p["host"] for p in dup]
        problems.append(Problem(
            id="config-mismatch", severity="critical",
            message=f"NODE_RANK={node} was given to {len(dup)} nodes ({', '.join(hosts)})",
            hint="Give every node its own NODE_RANK (0 .. NNODES-1).", nodes=[node], hosts=hosts))
    return problems
