"""watch's writes into the run directory, none of which may ever cost the job its run.

Every write goes through `RunFiles.write`: a failure (a full disk, a read-only mount, a missing
permission) is said once per cause, naming the fix, and supervision goes on with fewer records.
`claim` takes this host's directory for one watch (a second refuses: two would mix their pids and
hangs); `add_host_to_run_json` records this host in the run.json (schema/run_info.py) that several
nodes may share.

Typical use:
    files = RunFiles(paths, paths.supervisor_host(host), note=console.note)
    files.write(path.name, lambda: write_file(path, text))
    files.claim()                     # raises RunDirBusy when another watch holds it
    files.add_host_to_run_json(RunInfo(command=("torchrun", "train.py"), hosts={host: WatchHost(pid=4711)}))
"""
from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from grpo_doctor.schema import RunPaths
from grpo_doctor.schema.errors import DoctorError
from grpo_doctor.schema.json_shapes import FormatError
from grpo_doctor.schema.run_info import RunInfo
from grpo_doctor.schema.run_paths import WatchPaths
from grpo_doctor.schema.safe_read import read_json
from grpo_doctor.schema.safe_write import write_file

MAX_RUN_JSON_BYTES = 16 * 2**20  # a host's entry is a few KB: room for thousands of nodes


class RunDirBusy(DoctorError):
    """Another watch on this host already supervises a job into this run directory."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


class RunFiles:
    def __init__(self, paths: RunPaths, sup_dir: Path, note: Callable[[str], None]) -> None:
        self.paths = paths
        self.sup_dir = sup_dir
        self._note = note
        self._said: set[int | None] = set()  # errnos already said
        self._lock_file = None

    def write(self, what: str, write: Callable[[], Any]) -> bool:
        """Runs one write into the run directory; a failure (ENOSPC, EROFS, EACCES) is said once per
        cause, and the job goes on untouched."""
        try:
            write()
            return True
        except OSError as exc:
            if exc.errno not in self._said:
                self._said.add(exc.errno)
                self._note(f"cannot write {what} under {self.paths.root} ({exc.strerror or exc}); the job goes "
                           "on untouched, with fewer records; fix: free space there or pass --run-dir on a "
                           "writable disk")
            return False

    def claim(self) -> None:
        """One watch per host and run directory. The lock is held until watch exits (the kernel drops
        it even after SIGKILL)."""
        try:
            self._lock_file = open(WatchPaths(self.sup_dir).lock, "a+")  # noqa: SIM115 - held for watch's life
        except OSError:
            return  # an unwritable run directory: nothing of ours can collide there
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock_file.seek(0)
            owner = self._lock_file.read().strip() or "another process"
            raise RunDirBusy(f"{self.sup_dir} is already watched on this host by {owner}",
                             "give this job its own --run-dir (several nodes may share one; one watch per node)") from None
        try:  # who holds it, for the second watch's message; a full disk only loses the name
            self._lock_file.truncate(0)
            self._lock_file.write(f"grpo-doctor watch pid {os.getpid()}")
            self._lock_file.flush()
        except OSError:
            pass

    def add_host_to_run_json(self, info: RunInfo) -> None:
        """Add this host (`info.hosts`) to run.json, under a lock: the watches of several nodes may share
        one run directory. Command, start and version stay those of the first watch; a run.json that
        cannot be read (damaged, not as watch writes it) is said and written anew."""
        self.paths.root.mkdir(parents=True, exist_ok=True)
        with open(self.paths.run_json_lock, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            run_json = self.paths.run_json
            if info.start_t is None:
                info = replace(info, start_t=time.time())
            try:  # a FIFO or a device there is refused, never waited on or read (schema/safe_read.py)
                if run_json.exists():
                    info = RunInfo.from_dict(read_json(run_json, cap=MAX_RUN_JSON_BYTES, errors="replace")).joined_by(info)
            except ValueError as exc:  # FormatError and UnreadableFile are ValueErrors, as JSON's errors are
                why = exc if isinstance(exc, FormatError) else getattr(exc, "why", "not JSON")
                self._note(f"{run_json} cannot be read ({why}); written anew with this host only")
            write_file(run_json, json.dumps(info.to_dict(), indent=2))  # atomically; UnwritableFile is an OSError
