"""Process-level hooks that get the last records onto disk however the process ends.

- uncaught exception (main thread or any other): Error record, then End, written at once;
- SIGTERM / SIGHUP: End record naming the signal and the open phase, then the signal's usual
  effect (a user's own handler is called; the default kills us with the same signal, so the
  exit status the launcher sees is unchanged);
- normal exit: End record;
- fork (DataLoader workers): the child stops recording; it is not a rank.

A Python signal handler cannot run while the main thread is blocked inside C code (a rank hung
in a collective — exactly when SIGTERM matters). So the signal is also watched from a thread,
through the interpreter's wakeup fd: if the main thread has not handled SIGTERM/SIGHUP within
`BLOCKED_MAIN_S`, that thread writes the End record and lets the signal take its default
effect, as it would have without grpo-doctor. (Where the program already uses the wakeup fd,
asyncio for one, it is left alone and the handler alone applies.)

Installed once per process; every hook acts on whatever recorder is current then.

Typical use:
    install(lambda: _recorder, on_fork_child=forget)
"""
from __future__ import annotations

import atexit
import ctypes
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable

from grpo_doctor.rank.recorder import Recorder
from grpo_doctor.schema import EndReason

CAUGHT_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
BLOCKED_MAIN_S = 1.0
SIGNAL_LOCK_TIMEOUT_S = 1.0  # the main thread may hold the sink's lock when a signal arrives
CurrentRecorder = Callable[[], "Recorder | None"]
_installed = False


def install(current: CurrentRecorder, on_fork_child: Callable[[], None]) -> None:
    global _installed
    if _installed:
        return
    _installed = True
    _chain_excepthook(current)
    _chain_thread_excepthook(current)
    if threading.current_thread() is threading.main_thread():
        ours = {signum: handler for signum in CAUGHT_SIGNALS if (handler := _chain_signal(current, signum))}
        _watch_signals_from_a_thread(current, ours)
    atexit.register(_at_exit, current)
    os.register_at_fork(after_in_child=on_fork_child)


def _live(current: CurrentRecorder) -> Recorder | None:
    recorder = current()
    return recorder if recorder is not None and not recorder.ended else None


def _chain_excepthook(current: CurrentRecorder) -> None:
    previous = sys.excepthook

    def excepthook(exc_type, exc, tb):
        try:
            if (recorder := _live(current)) is not None:
                if issubclass(exc_type, KeyboardInterrupt):
                    recorder.end(EndReason.SIGNAL, "SIGINT")
                else:
                    recorder.exception(exc_type, exc, tb)
        except Exception:  # recording must never hide the user's traceback
            pass
        previous(exc_type, exc, tb)

    sys.excepthook = excepthook


def _chain_thread_excepthook(current: CurrentRecorder) -> None:
    previous = threading.excepthook

    def excepthook(args):
        try:
            if (recorder := _live(current)) is not None and args.exc_type is not SystemExit:
                recorder.exception(args.exc_type, args.exc_value, args.exc_traceback, fatal=False)
        except Exception:
            pass
        previous(args)

    threading.excepthook = excepthook


def _chain_signal(current: CurrentRecorder, signum: int):
    """Install our handler; returns it when it replaced the default action (else None)."""
    previous = signal.getsignal(signum)
    if previous in (signal.SIG_IGN, None):
        return None  # ignored on purpose, or set from C: leave it alone
    name = signal.Signals(signum).name

    def handler(sig, frame):
        recorder = _live(current)
        if callable(previous):
            if recorder is not None:
                recorder.flush(SIGNAL_LOCK_TIMEOUT_S)  # the user's handler decides whether we end
            previous(sig, frame)
            return
        _end_by_signal(current, signum, name)

    signal.signal(signum, handler)
    return None if callable(previous) else handler


def _end_by_signal(current: CurrentRecorder, signum: int, name: str) -> None:
    recorder = current()
    if recorder is not None:
        if recorder.ending_in_this_thread():
            # A second signal (watch's SIGTERM and torchrun's arrive together) ran this handler again
            # inside the first, which is still writing the end record: it ends the process once the
            # record is on disk. Killing the process here lost the record.
            return
        if not recorder.ended:
            recorder.end(EndReason.SIGNAL, name, timeout_s=SIGNAL_LOCK_TIMEOUT_S)
        else:  # another thread (the signal watcher) is writing it: let it finish first
            recorder.end_written.wait(SIGNAL_LOCK_TIMEOUT_S)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signum, signal.SIG_DFL)
    else:
        # signal.signal() is main-thread only; the C call restores the default action from here.
        ctypes.CDLL(None).signal(signum, ctypes.c_void_p(0))  # SIG_DFL
    os.kill(os.getpid(), signum)


def _watch_signals_from_a_thread(current: CurrentRecorder, ours: dict) -> None:
    if not ours:
        return
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    os.set_blocking(write_fd, False)
    try:
        previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    except ValueError:
        previous_fd = None
    if previous_fd != -1:  # someone else's wakeup fd (asyncio): keep theirs
        if previous_fd is not None:
            signal.set_wakeup_fd(previous_fd)
        os.close(read_fd)
        os.close(write_fd)
        return

    def watch() -> None:
        while True:
            ready, _, _ = select.select([read_fd], [], [], 60.0)
            if not ready:
                continue
            try:
                received = os.read(read_fd, 512)
            except BlockingIOError:
                continue
            for signum in {b for b in received if b in ours}:
                time.sleep(BLOCKED_MAIN_S)
                # Still ours and nobody ended the recorder: the main thread is stuck in C code.
                if signal.getsignal(signum) is ours[signum] and _live(current) is not None:
                    _end_by_signal(current, signum, signal.Signals(signum).name)

    threading.Thread(target=watch, name="grpo-doctor-signals", daemon=True).start()


def _at_exit(current: CurrentRecorder) -> None:
    if (recorder := _live(current)) is not None:
        recorder.end(EndReason.EXIT)
