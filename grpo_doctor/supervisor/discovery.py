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


# (pid, start time, name) -> (RANK, LOCAL_RANK) or None: a process's environment only changes
# when it execs (a wrapper script's `exec python train.py`), which changes its name, so it is
# read once per program, not every second.
_env_cache: dict[tuple[int, float, str], tuple[int, int | None] | None] = {}


def _rank_env(p: psutil.Process) -> tuple[int, int | None] | None:
    try:
        key = (p.pid, p.create_time(), p.name())
    except psutil.Error:
        return None
    if key not in _env_cache:
        try:
            env = p.environ()
        except psutil.Error:  # gone, or not ours to read
            return None
        rank, local = env.get("RANK"), env.get("LOCAL_RANK")
        _env_cache[key] = (
            (int(rank), int(local) if local and local.isdigit() else None) if rank and rank.isdigit() else None
        )
    return _env_cache[key]


def discover_ranks(procs: list[psutil.Process]) -> dict[int, RankProcess]:
    by_pid = {p.pid: p for p in procs}
    env_rank: dict[int, tuple[int, int | None]] = {}
    for p in procs:
        found = _rank_env(p)
        if found is not None:
            env_rank[p.pid] = found
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
