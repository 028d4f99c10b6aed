"""Point-to-point bandwidth between ranks, to find the one slow or broken link or node that a
collective's single figure hides.

Rounds: a ring (every rank sends to rank+1 while receiving from rank-1), and for 4 ranks or
more a bisection (rank r exchanges with r + n/2). In a round all links carry data at once, and
each receiver times its own receive, so a slow link delays only its own figure. Each round
repeats `repeats` times after one untimed warm-up; a link's figure is its median.

Typical use (inside an initialised process group):
    links = measure_links(device, num_bytes=16 * 2**20, repeats=3, op_timeout_s=30)
    slow = slow_links(all_links, ratio=0.5)     # on the gathered links of every rank
"""
from __future__ import annotations

import statistics
import time
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from grpo_doctor.probe.collectives import CollectiveTimeout


def rounds(world_size: int) -> list[list[tuple[int, int]]]:
    """Each round's (src, dst) links; every rank sends once and receives once in a round (both
    shifts are permutations of the ranks)."""
    n = world_size
    if n < 2:
        return []
    shifts = [1] + ([n // 2] if n >= 4 else [])
    return [[(r, (r + shift) % n) for r in range(n)] for shift in shifts]


def measure_links(device: torch.device, *, num_bytes: int, repeats: int, op_timeout_s: float) -> list[dict[str, Any]]:
    """This rank's incoming links: src, dst (this rank), seconds, gbps (GB/s) or error."""
    rank, n = dist.get_rank(), dist.get_world_size()
    numel = max(1, num_bytes // 4)
    send = torch.ones(numel, device=device)
    recv = torch.empty(numel, device=device)
    results = []
    for links in rounds(n):
        dst = next(d for s, d in links if s == rank)
        src = next(s for s, d in links if d == rank)
        times = []
        error = None
        for attempt in range(repeats + 1):  # the first is a warm-up: the first send on a pair is slower
            _barrier(op_timeout_s, device)
            started = time.perf_counter()
            # One batch: NCCL needs a ring's sends and receives grouped or they deadlock.
            # (NCCL may return one work for the whole batch: then the figure covers both directions.)
            works = dist.batch_isend_irecv([dist.P2POp(dist.isend, send, dst), dist.P2POp(dist.irecv, recv, src)])
            try:
                works[-1].wait(timeout=timedelta(seconds=op_timeout_s))
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                if attempt:
                    times.append(time.perf_counter() - started)
                for work in works[:-1]:
                    work.wait(timeout=timedelta(seconds=op_timeout_s))
            except RuntimeError as exc:
                error = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
                break
        seconds = statistics.median(times) if times else None
        results.append({"src": src, "dst": rank, "bytes": numel * 4, "seconds": seconds,
                        "gbps": numel * 4 / seconds / 1e9 if seconds else None, "error": error})
        if error:
            raise CollectiveTimeout(f"send/recv from rank {src} to rank {rank}: {error}")
    return results


def slow_links(links: list[dict[str, Any]], ratio: float) -> list[dict[str, Any]]:
    """Links under ratio x the upper quartile of their class's bandwidth (needs 3 links in the
    class). Links within a host and between hosts are judged apart: NVLink beside a network
    link is not slow. The upper quartile, not the median, because one slow node sits on most
    links of a small ring (two of three with three nodes)."""
    slow = []
    for same_host in (True, False):
        measured = [lk for lk in links if lk.get("gbps") and (lk.get("src_host") == lk.get("dst_host")) == same_host]
        if len(measured) >= 3:
            reference = reference_gbps(measured)
            slow += [lk for lk in measured if lk["gbps"] < ratio * reference]
    return slow


def reference_gbps(links: list[dict[str, Any]]) -> float:
    """The upper quartile of the links' bandwidths: what a healthy link of the class reaches."""
    values = sorted(lk["gbps"] for lk in links if lk.get("gbps"))
    if len(values) < 2:
        return values[0] if values else 0.0
    return statistics.quantiles(values, n=4, method="inclusive")[2]


def slow_hosts(links: list[dict[str, Any]], slow: list[dict[str, Any]], host_of: dict[int, str]) -> list[str]:
    """Hosts every one of whose links to other hosts is slow, while some other host has a fast
    one: that node's network is the problem, not the links' far ends."""
    cross = [lk for lk in links if host_of.get(lk["src"]) != host_of.get(lk["dst"]) and lk.get("gbps")]
    slow_ids = {(lk["src"], lk["dst"]) for lk in slow}
    per_host: dict[str, list[bool]] = {}
    for lk in cross:
        is_slow = (lk["src"], lk["dst"]) in slow_ids
        for rank in (lk["src"], lk["dst"]):
            per_host.setdefault(host_of.get(rank, f"rank {rank}"), []).append(is_slow)
    all_slow = [h for h, flags in per_host.items() if len(flags) >= 2 and all(flags)]
    return sorted(all_slow) if len(all_slow) < len(per_host) else []


def slow_ranks(links: list[dict[str, Any]], slow: list[dict[str, Any]]) -> list[int]:
    """Ranks on two or more links, all of them slow (within one host, or one rank per host)."""
    slow_ids = {(lk["src"], lk["dst"]) for lk in slow}
    per_rank: dict[int, list[bool]] = {}
    for lk in links:
        if lk.get("gbps"):
            for rank in (lk["src"], lk["dst"]):
                per_rank.setdefault(rank, []).append((lk["src"], lk["dst"]) in slow_ids)
    flagged = [r for r, flags in per_rank.items() if len(flags) >= 2 and all(flags)]
    return sorted(flagged) if len(flagged) < len(per_rank) else []


def _barrier(timeout_s: float, device: torch.device) -> None:
    """dist.barrier() cannot time out; an all_reduce waited on with a timeout can."""
    work = dist.all_reduce(torch.zeros(1, device=device), async_op=True)
    try:
        work.wait(timeout=timedelta(seconds=timeout_s))
    except RuntimeError as exc:
        raise CollectiveTimeout(f"barrier before a send/recv round did not finish within {timeout_s:g} s") from exc
