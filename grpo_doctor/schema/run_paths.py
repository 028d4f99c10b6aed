"""The layout of a run directory, named once: every part that writes or reads a file of a run asks here.

Typical use:
    paths = RunPaths(Path("runs/job-17"))
    paths.rank_file(3)              # runs/job-17/ranks/rank-00003.jsonl
    paths.supervisor_host("node-1") # runs/job-17/supervisor/node-1
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RunPaths:
    """Where things live inside one run directory."""

    root: Path

    @property
    def run_json(self) -> Path:
        return self.root / "run.json"

    @property
    def ranks(self) -> Path:
        return self.root / "ranks"

    @property
    def memory(self) -> Path:
        return self.root / "memory"

    @property
    def stacks(self) -> Path:
        return self.root / "stacks"

    @property
    def flight_recorder(self) -> Path:
        return self.root / "fr"

    @property
    def supervisor(self) -> Path:
        return self.root / "supervisor"

    def supervisor_host(self, host: str) -> Path:
        """supervisor/<host>/, the host name made safe as one path component (see host_dir_name)."""
        return self.supervisor / host_dir_name(host)

    def rank_file(self, rank: int) -> Path:
        return self.ranks / f"rank-{rank:05d}.jsonl"


_UNSAFE_IN_NAME = re.compile(r"[^A-Za-z0-9._-]")


def host_dir_name(host: str) -> str:
    """A host name as one safe path component: characters other than letters, digits, '.', '_' and
    '-' become '_' (a '/' in a host name must not write outside the run directory), and '', '.'
    and '..' become '_'."""
    name = _UNSAFE_IN_NAME.sub("_", host)[:255]
    return "_" if name in ("", ".", "..") else name
