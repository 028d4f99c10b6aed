"""Start the user's command and own its whole process tree until every process in it is gone.

torchrun starts each worker in a session of its own, so a process-group kill does not reach
them. watch therefore makes itself a child subreaper (Linux): every orphan of the tree is
re-parented to watch instead of init, so "the tree" is always watch's descendants, and ending
the job is signalling exactly those — nothing outside the tree is ever signalled. When watch
itself is SIGKILLed the job runs on (guardian.py reads its output and ends what it leaves once it
ends); only where the guardian could not be started does the launcher get PR_SET_PDEATHSIG
(`die_with_watch`), so that it stops with watch rather than run on with nobody reading its output.

Typical use:
    tree = ProcessTree.start(["torchrun", "--nproc-per-node", "2", "train.py"], env, die_with_watch=False)
    status = tree.wait(timeout_s=1.0)        # None while running
    tree.forward(signal.SIGINT)
    tree.end(grace_s=10.0)                   # SIGTERM, then SIGKILL what is left
"""
from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import psutil

from grpo_doctor.schema.errors import DoctorError

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


class LaunchError(DoctorError):
    exit_status = 127  # watch exits as a shell does for a command it cannot run

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


def find_executable(command: Sequence[str], path: str | None) -> str:
    """The program to run (searched on `path`, as a shell would); LaunchError when there is none,
    which watch checks before it makes the run directory, so a typo leaves nothing behind."""
    if not command:
        raise LaunchError("no command given", "put the launch command after --, e.g. watch -- torchrun ... train.py")
    executable = shutil.which(command[0], path=path)
    if executable is None:
        raise LaunchError(
            f"command not found: {command[0]!r}",
            "check the spelling, or activate the environment that provides it (PATH is searched)",
        )
    return executable


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _die_with_parent() -> None:
    # Runs in the child between fork and exec: die with watch, however watch dies.
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass
class ProcessTree:
    proc: subprocess.Popen
    subreaper: bool
    # Children of watch that are not the job's (the guardian): never listed, never signalled.
    outside: set[int] = field(default_factory=set)

    @classmethod
    def start(
        cls, command: Sequence[str], env: Mapping[str, str], *, stdout=None, stderr=None, die_with_watch: bool = True
    ) -> ProcessTree:
        executable = find_executable(command, env.get("PATH"))
        subreaper = _prctl(_PR_SET_CHILD_SUBREAPER, 1)
        try:
            proc = subprocess.Popen(
                [executable, *command[1:]], env=dict(env), stdout=stdout, stderr=stderr,
                stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent if die_with_watch else None,
                start_new_session=True,
            )
        except OSError as exc:
            raise LaunchError(f"cannot run {command[0]!r}: {exc.strerror}", "check that it is an executable program") from exc
        return cls(proc=proc, subreaper=subreaper)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait(self, timeout_s: float) -> int | None:
        """The command's exit status (negative: killed by that signal), or None if still running.

        One sleep and one poll: Popen.wait(timeout) would wake every 50 ms to poll.
        """
        status = self.proc.poll()
        if status is None:
            time.sleep(timeout_s)
            status = self.proc.poll()
        return status

    def reap_orphans(self) -> None:
        """Collect exit statuses of orphans re-parented to us, so they do not linger as zombies."""
        self._reap_orphans()

    def descendants(self) -> list[psutil.Process]:
        """Every live process of the tree, the launcher included."""
        try:
            me = psutil.Process()
            procs = me.children(recursive=True)
        except psutil.Error:
            return []
        if not self.subreaper:  # without a subreaper, orphans escaped: only the launcher's subtree is ours
            if self.proc.returncode is not None:
                return []  # reaped: its pid may belong to someone else now
            try:
                root = psutil.Process(self.proc.pid)
                procs = [root, *root.children(recursive=True)]
            except psutil.Error:
                return []
        # An alert command (supervisor/alerts.py) runs in its own session, led by a pid in `outside`.
        return [p for p in procs if p.pid not in self.outside and _session(p.pid) not in self.outside and alive(p)]

    def forward(self, signum: int) -> None:
        """Send a signal to the launcher only (torchrun passes SIGINT/SIGTERM on to its workers)."""
        try:
            self.proc.send_signal(signum)  # does nothing once the launcher is reaped (its pid may be reused)
        except ProcessLookupError:
            pass

    def signal_all(self, signum: int) -> int:
        procs = self.descendants()
        for p in procs:
            try:
                p.send_signal(signum)
            except psutil.Error:
                pass
        return len(procs)

    def end(self, grace_s: float = 10.0) -> None:
        """SIGTERM every process of the tree, then SIGKILL whatever is left after grace_s."""
        if self.signal_all(signal.SIGTERM):
            self._wait_tree_gone(grace_s)
        if self.signal_all(signal.SIGKILL):
            self._wait_tree_gone(5.0)
        try:
            self.proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            pass

    def _wait_tree_gone(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._reap_orphans()
            if self.proc.poll() is not None and not self.descendants():
                return
            time.sleep(0.05)

    def _reap_orphans(self) -> None:
        """Collect exit statuses of orphans re-parented to us, so they do not linger as zombies.

        waitid(WNOWAIT) peeks at the next exited child without collecting it, so the launcher's
        own status is left for Popen; no scan of /proc.
        """
        if not self.subreaper:
            return
        while True:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if info is None or info.si_pid == self.proc.pid or info.si_pid in self.outside:
                return  # the launcher's, or an alert command's, status is its Popen's to collect
            try:
                os.waitpid(info.si_pid, os.WNOHANG)
            except ChildProcessError:
                return


def _session(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def alive(p: psutil.Process) -> bool:
    """Running (a zombie, or a process already gone, is not)."""
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def describe_exit(status: int | None) -> str:
    if status is None:
        return "still running"
    if status < 0:
        try:
            return f"killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"killed by signal {-status}"
    return f"exit status {status}"
