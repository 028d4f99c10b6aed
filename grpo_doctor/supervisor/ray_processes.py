"""Ray's worker processes in the job's tree, and what each is doing, from its process title.

A Ray worker renames itself after the task it runs (setproctitle): `ray::PolicyWorker.train_step`
while an actor method runs, `ray::PolicyWorker` between calls, `ray::IDLE` for a pooled worker
with nothing to do. The title is the only place where an actor's role can be read from outside
the process: its RANK is often set inside the actor (OpenRLHF), and verl's WorkerDict hides the
roles it fuses. Ray's own agents (`ray::DashboardAgent`, `ray::RuntimeEnvAgent`, ...) are not
workers of the job and are left out.

Typical use:
    titles = ray_titles(tree.descendants())   # {pid: "ray::PolicyWorker.train_step"}
"""
from __future__ import annotations

from collections.abc import Iterable

import psutil

TITLE_PREFIX = "ray::"
# Ray's own processes that carry the prefix: never a worker of the job, never a rank.
_RAY_OWN = frozenset({"DashboardAgent", "RuntimeEnvAgent", "IDLE", "JobSupervisor", "_StatsActor",
                      "ProcessPoolExecutor", "DataContext"})
MAX_TITLE_CHARS = 200


def ray_title(proc: psutil.Process) -> str | None:
    """The process's Ray title (`ray::Class.method`), or None when it is not a Ray worker of the job."""
    try:
        argv = proc.cmdline()
    except psutil.Error:  # gone, a zombie, or not ours to read
        return None
    if not argv or not argv[0].startswith(TITLE_PREFIX):
        return None
    title = argv[0].strip()[:MAX_TITLE_CHARS]
    name = title[len(TITLE_PREFIX):].split(".", 1)[0]
    return None if not name or name in _RAY_OWN else title


def ray_titles(procs: Iterable[psutil.Process]) -> dict[int, str]:
    """pid -> title of every Ray worker of the job among `procs`."""
    found = {}
    for proc in procs:
        title = ray_title(proc)
        if title is not None:
            found[proc.pid] = title
    return found



def actor_of(title: str | None) -> str | None:
    """The actor without the method it ran: "ray::PolicyWorker.train_step" -> "ray::PolicyWorker"."""
    return title.split(".", 1)[0] if title else None


class RayWorkers:
    """The job's Ray workers as watch last saw them: which rank each runs (where known) and its title.

    A rank keeps the last title seen for it after its process is gone, so a killed actor is still
    named by its role.
    """

    BUSY_CPU_S = 0.05  # CPU time a worker must use between two looks to count as working

    def __init__(self) -> None:
        self.titles: dict[int, str] = {}  # pid -> title, as of the last update
        self.roles: dict[int, str] = {}  # rank -> title, the last one seen
        self._rank_pids: set[int] = set()
        self._cpu_s: dict[int, float] = {}
        self._busy = False

    def update(self, procs: list[psutil.Process]) -> None:
        self.titles = ray_titles(procs)
        cpu_s = {}
        for proc in procs:
            if proc.pid in self.titles:
                try:
                    times = proc.cpu_times()
                except psutil.Error:
                    continue
                cpu_s[proc.pid] = times.user + times.system
        self._busy = any(cpu_s[pid] - self._cpu_s.get(pid, 0.0) >= self.BUSY_CPU_S
                         for pid in cpu_s if pid not in self._rank_pids)
        self._cpu_s = cpu_s

    def set_ranks(self, rank_pids: dict[int, int]) -> None:
        """The live ranks' pids: a Ray worker among them is that rank's actor."""
        self._rank_pids = set(rank_pids.values())
        for rank, pid in rank_pids.items():
            if pid in self.titles:
                self.roles[rank] = self.titles[pid]

    def role(self, rank: int) -> str | None:
        return self.roles.get(rank)

    def unranked(self) -> dict[int, str]:
        """pid -> title of the Ray workers that are no known rank (rollout, reward or driver-side actors)."""
        return {pid: title for pid, title in self.titles.items() if pid not in self._rank_pids}

    def busy(self) -> bool:
        """A worker with no rank used CPU between the last two looks."""
        return self._busy
