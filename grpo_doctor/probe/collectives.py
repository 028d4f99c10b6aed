"""Collectives on every rank: a correctness check of each on known values, then a size sweep
reporting algorithm and bus bandwidth as nccl-tests defines them.

busbw = algbw x factor, with n ranks: all_reduce 2(n-1)/n; all_gather and reduce_scatter
(n-1)/n, their size being the whole gathered (or scattered) buffer; broadcast 1. The time of a
size is the slowest rank's mean over `iters` back-to-back calls after `warmup` calls, so it is
what a training step waiting on that collective would see.

Every call waits at most `op_timeout_s` (Work.wait); a timeout raises CollectiveTimeout, after
which the process group cannot be trusted and the caller stops.

Typical use (inside an initialised process group):
    checks = check_collectives(device, op_timeout_s=30)
    sweep = sweep_sizes(device, [2**10, 2**20, 2**26], iters=20, warmup=5, op_timeout_s=30)
"""
from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

OPS = ("all_reduce", "all_gather", "broadcast", "reduce_scatter")
# torch 2.13 renamed the tensor forms (the old names warn); older torch has only the old ones.
_all_gather_tensor = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter_tensor = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
BYTES_PER_ELEMENT = 4  # float32


class CollectiveTimeout(RuntimeError):
    """A collective did not finish within the probe's per-operation timeout."""


def bus_factor(op: str, world_size: int) -> float:
    n = world_size
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter"):
        return (n - 1) / n
    return 1.0


def launch(op: str, send: torch.Tensor, recv: torch.Tensor, async_op: bool = True) -> Any:
    """Start one collective (a Work to wait on), or run it with async_op=False; `send` and `recv`
    are laid out for that op."""
    if op == "all_reduce":
        return dist.all_reduce(send, async_op=async_op)
    if op == "all_gather":
        return _all_gather_tensor(recv, send, async_op=async_op)
    if op == "broadcast":
        return dist.broadcast(send, src=0, async_op=async_op)
    if op == "reduce_scatter":
        return _reduce_scatter_tensor(recv, send, async_op=async_op)
    raise ValueError(f"unknown collective {op!r}; one of {', '.join(OPS)}")


def buffers(op: str, numel: int, world_size: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(send, recv) for a collective whose nccl-tests size is numel elements."""
    if op == "all_gather":
        part = max(1, numel // world_size)
        return torch.empty(part, device=device), torch.empty(part * world_size, device=device)
    if op == "reduce_scatter":
        part = max(1, numel // world_size)
        return torch.empty(part * world_size, device=device), torch.empty(part, device=device)
    send = torch.empty(numel, device=device)
    return send, send


def wait(work: Any, op: str, timeout_s: float) -> None:
    try:
        work.wait(timeout=timedelta(seconds=timeout_s))
    except RuntimeError as exc:
        raise CollectiveTimeout(f"{op} did not finish within {timeout_s:g} s ({str(exc).splitlines()[0]})") from exc


def check_collectives(device: torch.device, op_timeout_s: float, numel: int = 1024) -> list[dict[str, Any]]:
    """Each op on known values; a wrong result is a broken transport or a desynchronised group.
    Stops at the first timeout (raised), records wrong results and errors and goes on."""
    rank, n = dist.get_rank(), dist.get_world_size()
    results = []
    for op in OPS:
        send, recv = buffers(op, numel * (n if op in ("all_gather", "reduce_scatter") else 1), n, device)
        if op == "all_reduce":
            send.fill_(rank + 1)
            expected = torch.full_like(send, n * (n + 1) / 2)
        elif op == "all_gather":
            send.fill_(rank)
            expected = torch.arange(n, device=device, dtype=send.dtype).repeat_interleave(send.numel())
        elif op == "broadcast":
            send.copy_(torch.arange(send.numel(), device=device, dtype=send.dtype) if rank == 0 else torch.zeros_like(send))
            expected = torch.arange(send.numel(), device=device, dtype=send.dtype)
        else:  # reduce_scatter: rank r's chunk j holds r + j; the sum of chunk `rank` is sum_r(r) + n * rank
            chunks = send.view(n, -1)
            for j in range(n):
                chunks[j].fill_(rank + j)
            expected = torch.full_like(recv, n * (n - 1) / 2 + n * rank)
        started = time.perf_counter()
        try:
            wait(launch(op, send, recv), op, op_timeout_s)
        except CollectiveTimeout:
            raise
        except Exception as exc:  # noqa: BLE001 - an unsupported op or a transport error: recorded, not fatal
            results.append({"op": op, "ok": False, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0]}",
                            "seconds": time.perf_counter() - started})
            continue
        got = recv if op in ("all_gather", "reduce_scatter") else send
        wrong = int((got != expected).sum().item())
        results.append({"op": op, "ok": wrong == 0, "seconds": time.perf_counter() - started,
                        "error": f"{wrong} of {got.numel()} elements wrong" if wrong else None})
    return results


def sweep_sizes(device: torch.device, sizes_bytes: list[int], *, iters: int, warmup: int, op_timeout_s: float,
                ops: tuple[str, ...] = OPS, skip: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """One row per op and size: time_us (slowest rank's mean), algbw_gbps, busbw_gbps (GB/s, 1e9)."""
    n = dist.get_world_size()
    rows = []
    slowest = torch.zeros(1, dtype=torch.float64, device=device)
    for op in ops:
        if op in skip:
            continue
        for size in sizes_bytes:
            numel = max(n, size // BYTES_PER_ELEMENT)
            send, recv = buffers(op, numel, n, device)
            send.fill_(1.0)
            _run_all(op, send, recv, warmup, op_timeout_s, device)
            started = time.perf_counter()
            _run_all(op, send, recv, iters, op_timeout_s, device)
            slowest.fill_(time.perf_counter() - started)
            wait(dist.all_reduce(slowest, op=dist.ReduceOp.MAX, async_op=True), "all_reduce (timing)", op_timeout_s)
            seconds = slowest.item() / iters
            nbytes = (recv if op == "all_gather" else send).numel() * BYTES_PER_ELEMENT
            algbw = nbytes / seconds / 1e9
            rows.append({"op": op, "size_bytes": nbytes, "time_us": seconds * 1e6, "algbw_gbps": algbw,
                         "busbw_gbps": algbw * bus_factor(op, n)})
    return rows


def _run_all(op: str, send: torch.Tensor, recv: torch.Tensor, count: int, timeout_s: float,
             device: torch.device) -> None:
    """count calls, one after another as a training step makes them. On GPUs they queue on one
    stream, which runs them in order (as nccl-tests does); gloo would run queued calls on
    several threads at once and overstate the bandwidth, so each call is waited for first."""
    if device.type == "cuda":
        works = [launch(op, send, recv) for _ in range(count)]
        for work in works:
            wait(work, op, timeout_s)
        _sync(device)
        return
    # Plain blocking calls: the process group's own timeout (set to the probe's op timeout) bounds
    # each, and a Work object plus a wait per call would cost small sizes ~10 %.
    try:
        for _ in range(count):
            launch(op, send, recv, async_op=False)
    except RuntimeError as exc:
        raise CollectiveTimeout(f"{op} failed or did not finish within {timeout_s:g} s "
                                f"({str(exc).splitlines()[0]})") from exc


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
