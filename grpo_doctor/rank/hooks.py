"""Process-level hooks that get the last records onto disk however the process ends.

- uncaught exception (main thread or any other): Error record, then End, written at once;
- SIGTERM / SIGHUP: End record naming the signal and the open phase, then the signal's usual
  effect (a user's own handler is called; the default kills us with the same signal, so the
  exit status the launcher sees is unchanged);
- normal exit: End record;
- fork (DataLoader workers): the child stops recording; it is not a rank.

A handler cannot run while the main thread is blocked inside C code (a collective), so the
background flush is what bounds loss there, not these hooks.

Installed once per process; every hook acts on whatever recorder is current then.

Typical use:
    install(lambda: _recorder, on_fork_child=forget)
"""
from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from collections.abc import Callable

from grpo_doctor.rank.recorder import Recorder
from grpo_doctor.schema import EndReason

CAUGHT_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
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
        for signum in CAUGHT_SIGNALS:
            _chain_signal(current, signum)
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


def _chain_signal(current: CurrentRecorder, signum: int) -> None:
    previous = signal.getsignal(signum)
    if previous in (signal.SIG_IGN, None):
        return  # ignored on purpose, or set from C: leave it alone
    name = signal.Signals(signum).name

    def handler(sig, frame):
        recorder = _live(current)
        if callable(previous):
            if recorder is not None:
                recorder.flush()  # the user's handler decides whether we end
            previous(sig, frame)
            return
        if recorder is not None:
            recorder.end(EndReason.SIGNAL, name)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    signal.signal(signum, handler)


def _at_exit(current: CurrentRecorder) -> None:
    if (recorder := _live(current)) is not None:
        recorder.end(EndReason.EXIT)
