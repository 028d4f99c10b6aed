"""The job's last guard: when watch dies, even by SIGKILL, no process of the job outlives it.

watch is the tree's subreaper and ends the tree itself on every way out it can run code for. A
SIGKILL of watch runs no code: the launcher gets PDEATHSIG, but a daemon the job double-forked
(`setsid`, re-parented to watch) would be re-parented to init and live on. So watch starts this
small process first. It waits on a pipe whose only writer is watch; the kernel closes that end
when watch dies, however it dies. Then it ends every process that carries the job's token in its
environment (`TOKEN_ENV`, set by watch for the job alone and inherited by everything the job
starts): SIGTERM, then SIGKILL after `grace_s`. It ignores Ctrl-C and lives in its own session,
so nothing aimed at the job or the terminal ends it first.

Not covered: a process that rewrites its own environment without the token and also escapes
the tree; where watch ended normally the tree is already gone and this finds nothing.

Typical use (watch does this):
    guard = Guardian.start(token, grace_s=15.0)  # before the job starts
    ...                                           # watch runs; guard.close() at a normal end
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

import psutil

from grpo_doctor.supervisor.launch import alive

TOKEN_ENV = "GRPO_DOCTOR_WATCH_TOKEN"


@dataclass
class Guardian:
    proc: subprocess.Popen
    write_fd: int

    @classmethod
    def start(cls, token: str, grace_s: float) -> Guardian | None:
        """The guardian process, or None where it cannot be started (said by the caller)."""
        read_fd, write_fd = os.pipe()  # both ends non-inheritable: the job never holds the writer
        env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
        try:
            proc = subprocess.Popen([sys.executable, "-m", "grpo_doctor.supervisor.guardian", token, str(grace_s)],
                                    stdin=read_fd, stdout=subprocess.DEVNULL, env=env, start_new_session=True)
        except OSError:
            os.close(write_fd)
            return None
        finally:
            os.close(read_fd)
        return cls(proc=proc, write_fd=write_fd)

    def close(self, timeout_s: float = 5.0) -> None:
        """watch is ending normally: the guardian sweeps once (finding nothing) and exits."""
        os.close(self.write_fd)
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def carriers(token: str) -> list[psutil.Process]:
    """Live processes whose environment holds the token (processes we may not read are not ours)."""
    me, found = os.getpid(), []
    for proc in psutil.process_iter():
        if proc.pid == me:
            continue
        try:
            if proc.environ().get(TOKEN_ENV) == token and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def sweep(token: str, grace_s: float) -> int:
    """SIGTERM every carrier of the token, SIGKILL what is left after grace_s; returns how many there were."""
    procs = carriers(token)
    for proc in procs:
        _send(proc, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while procs and time.monotonic() < deadline:
        time.sleep(0.1)
        procs = [p for p in procs if alive(p)]
    for proc in carriers(token):  # also anything started during the grace period
        _send(proc, signal.SIGKILL)
    return len(procs)


def _send(proc: psutil.Process, signum: int) -> None:
    try:
        proc.send_signal(signum)
    except psutil.Error:
        pass


def main(argv: list[str]) -> int:
    token, grace_s = argv[0], float(argv[1])
    for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    while os.read(0, 4096):  # watch never writes: this returns b"" once its end is closed
        pass
    sweep(token, grace_s)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
