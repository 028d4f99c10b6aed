"""The job's last guard when watch dies (a SIGKILL, the OOM killer): the job runs on, unsupervised,
and nothing it started outlives it.

watch is the tree's subreaper and ends the tree itself on every way out it can run code for. A
SIGKILL of watch runs no code, and watch's death is no sign that the job is unhealthy: watch
promises never to end a healthy job, so the job is left to run to its own end. Two things would
still go wrong without this small process, which watch starts before the job: the job's output
pipes would lose their reader (the job's next print would fail, or block once the pipe is full),
and a daemon the job double-forked (`setsid`, re-parented to watch) would outlive the job.

So the guardian holds a copy of the read ends of the job's stdout and stderr pipes and waits on a
pipe whose only writer is watch; the kernel closes that end when watch dies, however it dies.
watch writes `job PID` once the launcher has started and `end` when it ends normally (the tree is
gone then: the guardian sweeps once, finding nothing, and exits). An end of the pipe without `end`
means watch died: the guardian says so in one line on stderr (with the launcher's pid, to end the
job by hand), forwards the job's output to watch's terminal and appends it to stdout.log and
stderr.log as watch did, and waits for the launcher to end. Then it ends every process that carries
the job's token in its environment (`TOKEN_ENV`, set by watch for the job alone and inherited by
everything the job starts): SIGTERM, then SIGKILL after `grace_s`, as watch ends what a finished
job leaves behind. The job's exit status is lost with watch (watch was its parent). The guardian
ignores Ctrl-C, SIGHUP and SIGTERM and lives in its own session, so nothing aimed at the job or the
terminal ends it first. Where it cannot be started, the launcher gets PDEATHSIG instead
(launch.py): the job then ends with watch, rather than run on with nobody reading its output.

Not covered: a process that rewrites its own environment without the token and also escapes
the tree.

Typical use (watch does this):
    guard = Guardian.start(token, grace_s=15.0, outputs=[(read_fd, "stdout", log_path), ...])  # before the job
    guard.job_started(tree.pid)                   # once the launcher runs
    ...                                           # watch runs; guard.close() at a normal end
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from grpo_doctor.supervisor.launch import alive
from grpo_doctor.supervisor.output import OutputTee

TOKEN_ENV = "GRPO_DOCTOR_WATCH_TOKEN"
WAIT_S = 0.5  # between two looks at the launcher once watch is gone


@dataclass
class Guardian:
    proc: subprocess.Popen
    write_fd: int

    @classmethod
    def start(cls, token: str, grace_s: float, outputs: Sequence[tuple[int, str, Path]] = ()) -> Guardian | None:
        """The guardian process, or None where it cannot be started (said by the caller).

        outputs: (read end of a job's output pipe, "stdout" or "stderr", its log file) for each stream;
        the guardian holds a copy of each read end and reads it only once watch is gone.
        """
        read_fd, write_fd = os.pipe()  # both ends non-inheritable: the job never holds the writer
        env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
        streams = [f"{fd}:{name}:{path}" for fd, name, path in outputs]
        try:
            proc = subprocess.Popen([sys.executable, "-m", "grpo_doctor.supervisor.guardian", token, str(grace_s),
                                     *streams], stdin=read_fd, env=env, start_new_session=True,
                                    pass_fds=[fd for fd, _, _ in outputs])
        except OSError:
            os.close(write_fd)
            return None
        finally:
            os.close(read_fd)
        return cls(proc=proc, write_fd=write_fd)

    def job_started(self, pid: int) -> None:
        """The launcher runs: if watch dies from now on, the guardian waits for it to end."""
        self._tell(f"job {pid}\n")

    def close(self, timeout_s: float = 5.0) -> None:
        """watch is ending normally: the guardian sweeps once (finding nothing) and exits."""
        self._tell("end\n")
        os.close(self.write_fd)
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def _tell(self, line: str) -> None:
        try:
            os.write(self.write_fd, line.encode())
        except OSError:  # the guardian is gone: there is nobody to tell
            pass


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
    procs = found = carriers(token)
    for proc in procs:
        _send(proc, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while procs and time.monotonic() < deadline:
        time.sleep(0.1)
        procs = [p for p in procs if alive(p)]
    for proc in carriers(token):  # also anything started during the grace period
        _send(proc, signal.SIGKILL)
    return len(found)


def _send(proc: psutil.Process, signum: int) -> None:
    try:
        proc.send_signal(signum)
    except psutil.Error:
        pass


def main(argv: list[str]) -> int:
    token, grace_s = argv[0], float(argv[1])
    outputs = [_stream(arg) for arg in argv[2:]]
    for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    job, ended, told = None, False, b""
    while data := os.read(0, 4096):  # b"" once watch's end is closed, however watch ended
        told += data
        *lines, told = told.split(b"\n")
        for line in lines:
            if line.startswith(b"job "):
                job = _process(int(line.split()[1]))
            elif line == b"end":
                ended = True
    if ended or job is None or not _running(job):
        sweep(token, grace_s)
        return 0
    _run_on(job, token, grace_s, outputs)
    return 0


def _run_on(job: psutil.Process, token: str, grace_s: float, outputs: list[tuple[int, str, Path]]) -> None:
    """watch died while the job ran: keep its output flowing, wait for it to end, then end what it left."""
    tees = [OutputTee(os.fdopen(fd, "rb", buffering=0), log, write=_forward(1 if name == "stdout" else 2),
                      on_lines=_ignore) for fd, name, log in outputs]
    for tee in tees:
        tee.start()
    _say(f"watch is gone (killed?); the job (pid {job.pid}) runs on unsupervised: no hang detection, its output "
         "still reaches this terminal and its log, and whatever it leaves running is ended when it ends; "
         f"to end it now: kill {job.pid}")
    while _running(job):
        time.sleep(WAIT_S)
    left = sweep(token, grace_s)
    for tee in tees:
        tee.join(timeout_s=5.0)
    _say(f"the job (pid {job.pid}) has ended (its exit status went with watch)"
         + (f"; {left} process(es) it left running were ended" if left else ""))


def _stream(arg: str) -> tuple[int, str, Path]:
    fd, name, path = arg.split(":", 2)
    return int(fd), name, Path(path)


def _process(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)  # its start time is kept: a reused pid is not taken for the job
    except psutil.Error:
        return None


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and alive(proc)
    except psutil.Error:
        return False


def _forward(fd: int):
    def write(data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]  # an OSError (the terminal is gone): the tee stops forwarding
    return write


def _ignore(lines: bytes) -> None:
    pass


def _say(message: str) -> None:
    try:
        os.write(2, f"grpo-doctor: {message}\n".encode())
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
