"""What `grpo-doctor summary` adds to the event logs: is the run still going, and who hung it.

A rank file without an end record says only that the rank has not finished: on a live run that is
"running", on a run killed outright it is the failure. Two signs tell them apart, both read without
touching the job: the watch of that host still holds its lock on `supervisor/<host>/.watch.lock`
(the kernel drops it when watch exits, SIGKILL included) and has written no summary.json yet, or the
rank's own process is alive (same host as this command). And where watch investigated a hang, its
latest `hang-N.json` names the ranks the others waited for: after `--on-hang kill` every rank ended by
watch's SIGTERM, and only that file still says which one was the culprit. And what each watch said live
about the job's rollouts and steps (`supervisor/<host>/live-findings.json`: constant-reward, dead-step, ...).

Typical use:
    live = LiveState.of(run_dirs)
    live.running(host, pids)       # True: no end record, but the job is still going
    live.hang                      # the latest HangReport of the run, or None
    live.findings                  # what the watches said live, each with its "watch_host"
"""
from __future__ import annotations

import fcntl
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path

from grpo_doctor.analysis.watch_files import read_hang_report
from grpo_doctor.schema import RunPaths
from grpo_doctor.schema.live_findings import read_live_findings
from grpo_doctor.schema.run_paths import WatchPaths
from grpo_doctor.schema.watch_files import HangReport

PID_START_SLACK_S = 2.0  # /proc's start time is in clock ticks since a boot time rounded to the second


@dataclass
class LiveState:
    watched_hosts: set[str] = field(default_factory=set)  # hosts whose watch is running now
    hang: HangReport | None = None  # the latest hang a watch of this run investigated
    hang_file: Path | None = None
    findings: list[dict] = field(default_factory=list)  # live-findings.json's findings, each with "watch_host"

    @classmethod
    def of(cls, dirs: list) -> LiveState:
        state = cls()
        latest: tuple[float, Path] | None = None
        for d in dirs:
            for host_dir in _host_dirs(RunPaths(Path(d)).supervisor):
                watch = WatchPaths(host_dir)
                if _lock_held(watch.lock) and not watch.summary_json.exists():
                    state.watched_hosts.add(host_dir.name)
                if watch.live_findings.is_file():
                    try:
                        state.findings += [{**f, "watch_host": host_dir.name}
                                           for f in read_live_findings(watch.live_findings)]
                    except (OSError, ValueError):  # damaged: nothing said live is shown
                        pass
                for path in watch.hang_reports():
                    try:
                        mtime = path.stat().st_mtime
                    except OSError:
                        continue
                    if latest is None or mtime > latest[0]:
                        latest = (mtime, path)
        if latest is not None:
            state.hang = read_hang_report(latest[1], [])
            state.hang_file = latest[1] if state.hang is not None else None
        return state

    def running(self, host: str | None, pids: list[int], header_t: float | None = None) -> bool:
        """A rank without an end record that is still going: its host's watch runs, or its process
        is alive here and started before its header was written (not a later process given its pid)."""
        if host is not None and host in self.watched_hosts:
            return True
        return host == socket.gethostname() and any(_pid_alive(pid, header_t) for pid in pids)


def _host_dirs(supervisor: Path) -> list[Path]:
    try:
        return [p for p in supervisor.iterdir() if p.is_dir()]
    except OSError:
        return []


def _lock_held(path: Path) -> bool:
    """Whether a live watch holds this lock (it takes it exclusively for its whole life)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False  # we could take it: nobody holds it
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # closing drops our shared lock, if we took it


def _pid_alive(pid: int, header_t: float | None) -> bool:
    """Alive, not a zombie (a rank torchrun has not reaped yet has ended), and, where the rank's header
    time is known, started no later than it: a pid reused by another process is not the rank."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as f:  # a kernel file: never blocks
            fields = f.read().rsplit(b")", 1)[1].split()
        state, start_ticks = fields[0], int(fields[19])
    except (OSError, IndexError, ValueError):
        return False
    if state in (b"Z", b"X"):
        return False
    boot_t = _boot_time()
    if header_t is None or boot_t is None:
        return True
    started_t = boot_t + start_ticks / os.sysconf("SC_CLK_TCK")
    return started_t <= header_t + PID_START_SLACK_S


def _boot_time() -> float | None:
    try:
        with open("/proc/stat", "rb") as f:  # a kernel file: never blocks
            for line in f:
                if line.startswith(b"btime "):
                    return float(line.split()[1])
    except (OSError, ValueError):
        return None
    return None
