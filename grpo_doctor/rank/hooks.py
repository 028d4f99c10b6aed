"""Process-level hooks that get the last records onto disk however the process ends.

- uncaught exception (main thread or any other): Error record, then End, written at once;
- SIGTERM / SIGHUP: End record naming the signal and the open phase, then the signal's usual
  effect (a user's own handler is called; the default kills us with the same signal, so the
  exit status the launcher sees is unchanged);
- normal exit: End record;
- fork (DataLoader workers): the child stops recording; it is not a rank.

A handler cannot run while the main thread is blocked inside C code (a collective), so the
background flush is what bounds loss there, not these hooks.

Typical use:
    install(recorder, on_fork_child=forget)
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


def install(recorder: Recorder, on_fork_child: Callable[[], None]) -> None:
    _chain_excepthook(recorder)
    _chain_thread_excepthook(recorder)
    if threading.current_thread() is threading.main_thread():
        for signum in CAUGHT_SIGNALS:
            _chain_signal(recorder, signum)
    atexit.register(_at_exit, recorder)
    os.register_at_fork(after_in_child=on_fork_child)


def _chain_excepthook(recorder: Recorder) -> None:
    previous = sys.excepthook

    def excepthook(exc_type, exc, tb):
        try:
            if issubclass(exc_type, KeyboardInterrupt):
                recorder.end(EndReason.SIGNAL, "SIGINT")
            elif not recorder.ended:
                recorder.exception(exc_type, exc, tb)
        except Exception:  # recording must never hide the user's traceback
            pass
        previous(exc_type, exc, tb)

    sys.excepthook = excepthook


def _chain_thread_excepthook(recorder: Recorder) -> None:
    previous = threading.excepthook

    def excepthook(args):
        try:
            if not recorder.ended and args.exc_type is not SystemExit:
                recorder.exception(args.exc_type, args.exc_value, args.exc_traceback, fatal=False)
        except Exception:
            pass
        previous(args)

    threading.excepthook = excepthook


def _chain_signal(recorder: Recorder, signum: int) -> None:
    previous = signal.getsignal(signum)
    if previous in (signal.SIG_IGN, None):
        return  # ignored on purpose, or set from C: leave it alone
    name = signal.Signals(signum).name

    def handler(sig, frame):
        if callable(previous):
            recorder.flush()  # the user's handler decides whether we end
            previous(sig, frame)
            return
        recorder.end(EndReason.SIGNAL, name)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    signal.signal(signum, handler)


def _at_exit(recorder: Recorder) -> None:
    if not recorder.ended:
        recorder.end(EndReason.EXIT)
