"""Which processes of the tree are ranks.

Instrumented ranks announce themselves (header: rank and pid). Any rank, instrumented or not,
is also found in the process tree by the RANK variable its launcher set; a rank's own
children (DataLoader workers, compile workers) inherit RANK, so the rank is the process whose
parent does not carry the same RANK.

Typical use:
    ranks = discover_ranks(tree.descendants())   # {rank: RankProcess}
"""
from __future__ import annotations

from dataclasses import dataclass

import psutil


@dataclass(frozen=True)
class RankProcess:
    rank: int
    pid: int
    local_rank: int | None
    cmdline: str


def discover_ranks(procs: list[psutil.Process]) -> dict[int, RankProcess]:
    by_pid = {p.pid: p for p in procs}
    env_rank: dict[int, tuple[int, int | None]] = {}
    for p in procs:
        try:
            env = p.environ()
        except psutil.Error:  # gone, or not ours to read
            continue
        rank = env.get("RANK")
        if rank is not None and rank.isdigit():
            local = env.get("LOCAL_RANK")
            env_rank[p.pid] = (int(rank), int(local) if local and local.isdigit() else None)
    found: dict[int, RankProcess] = {}
    for pid, (rank, local_rank) in env_rank.items():
        try:
            parent = by_pid[pid].ppid()
        except psutil.Error:
            continue
        if env_rank.get(parent, (None,))[0] == rank:
            continue  # a child of the rank, not the rank
        if rank in found and found[rank].pid < pid:
            continue
        try:
            cmdline = " ".join(by_pid[pid].cmdline())[:300]
        except psutil.Error:
            cmdline = ""
        found[rank] = RankProcess(rank=rank, pid=pid, local_rank=local_rank, cmdline=cmdline)
    return found


def is_alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
