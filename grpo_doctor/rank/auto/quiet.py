"""A bounded rank file under zero-code instrumentation: repeated collectives of a step are counted, not written.

A collective written as a phase is two lines, about 465 bytes. A job making 200 all_reduce calls a
step would write 93 kB a step, most of it the same line again. So within a window (one step: the
recorder's step number; or WINDOW_S where steps are long or never counted) the first
DETAILED_PER_WINDOW calls of each op in each group are phases as ever, and later ones are quiet:
counted into one `collective_summary` line per window, written when the window closes (at the first
wrapped call of the next one, or at exit):

    {"kind": "collective_summary", "step": 12, ..., "window_s": 1.9,
     "ops": [{"op": "all_reduce", "group": "default_pg", "group_size": 8, "calls": 196,
              "time_s": 0.41, "max_s": 0.01, "size_bytes": 1.6e9, "seq": [5, 200]}]}

A reader that does not know the kind keeps it as an unknown record (schema/records.py).

What hang detection needs stays: a quiet call still running after PROMOTE_S is written as the phase
it is (its begin line with the call's own start time, its end line when it returns), by a daemon
thread that looks every PROMOTE_S / 2, so a rank hung in the 150th all_reduce of a step shows it as
its open phase within about PROMOTE_S + the sink's flush interval. A quiet call that raises is
written as a phase too, with its error. Every call, quiet or not, counts in its group's `seq`.

Typical use (collectives.py's wrapper):
    if not quiet.detailed(rec, op, detail, mono):
        return quiet.call(rec, op, detail, mono, func, args, kwargs)
"""
from __future__ import annotations

import atexit
import dataclasses
import enum
import threading
import time
from typing import Any, ClassVar

from grpo_doctor.rank.auto import state
from grpo_doctor.schema import PhaseBegin, PhaseEnd, Record

DETAILED_PER_WINDOW = 4  # calls of one op in one group written in full per window
WINDOW_S = 60.0  # a window ends with its step, or after this long
PROMOTE_S = 0.5  # a quiet call running this long is written as a phase


class SummaryKind(str, enum.Enum):
    COLLECTIVE_SUMMARY = "collective_summary"


@dataclasses.dataclass(frozen=True)
class CollectiveSummary(Record):
    """The quiet collectives of one window (module docstring); written by the zero-code layer only."""

    KIND: ClassVar = SummaryKind.COLLECTIVE_SUMMARY
    window_s: float
    ops: list


class _Open:
    """A quiet call in progress."""

    __slots__ = ("rec", "op", "detail", "step", "t", "mono", "stack", "path", "written")

    def __init__(self, rec, op: str, detail: dict | None, mono: float) -> None:
        self.rec, self.op, self.detail, self.mono = rec, op, detail, mono
        self.step, self.t = rec.current_step, time.time()
        self.stack = rec._stack()  # the calling thread's open phases: the path, should it be written
        self.path: str | None = None
        self.written = False


_NO_WINDOW = object()
_lock = threading.Lock()  # the written flag of open calls, the summary
_window_step: Any = _NO_WINDOW
_window_start = 0.0
_counts: dict[tuple, int] = {}  # (op, group label) -> calls in this window
_summary: dict[tuple, list] = {}  # (op, group label) -> [group_size, calls, time_s, max_s, size_bytes, seq0, seq1]
_open: dict[int, _Open] = {}  # thread id -> its quiet call in progress
_recorder = None  # the recorder of the window's quiet calls
_watcher: threading.Thread | None = None


def detailed(rec, op: str, detail: dict | None, mono: float) -> bool:
    """Whether this call is written in full; a new window (the step moved, or WINDOW_S passed) starts here."""
    if rec.current_step != _window_step or mono - _window_start >= WINDOW_S:
        _next_window(rec, mono)
    key = (op, detail["group"] if detail is not None else None)
    n = _counts.get(key, 0) + 1
    _counts[key] = n
    return n <= DETAILED_PER_WINDOW


def call(rec, op: str, detail: dict | None, mono: float, func, args: tuple, kwargs: dict):
    """Run a quiet call: counted in the window's summary, written as a phase only if it runs long or raises."""
    global _recorder
    try:
        _recorder = rec
        this = _Open(rec, op, detail, mono)
        tid = threading.get_ident()
        outer = _open.get(tid)
        _open[tid] = this
        if _watcher is None:
            _start_watcher()
    except Exception as exc:  # noqa: BLE001 - ours: off, and the call goes on
        state.fail(op, exc)
        return func(*args, **kwargs)
    try:
        result = func(*args, **kwargs)
    except BaseException as exc:
        _close(this, tid, outer, exc)
        raise
    _close(this, tid, outer, None)
    return result


def flush_summary() -> None:
    """Write the open window's summary now (at exit: the last step's quiet calls)."""
    global _summary
    rec = _recorder
    with _lock:
        summary, _summary = _summary, {}
    if summary and rec is not None and not rec.ended and not state.is_off():
        rec.sink.enqueue(_summary_raw(summary, _window_step, _window_start))


def _next_window(rec, mono: float) -> None:
    global _window_step, _window_start, _counts
    flush_summary()
    _window_step, _window_start, _counts = rec.current_step, mono, {}


def _summary_raw(summary: dict, step, start: float) -> tuple:
    ops = [{"op": op, "group": group, "group_size": size, "calls": calls, "time_s": round(total, 6),
            "max_s": round(longest, 6), "size_bytes": size_bytes, "seq": [first, last]}
           for (op, group), (size, calls, total, longest, size_bytes, first, last) in summary.items()]
    mono = time.monotonic()
    return (CollectiveSummary, step if step is not _NO_WINDOW else None, time.time(), mono,
            (round(mono - start, 6), ops))


def _close(this: _Open, tid: int, outer: _Open | None, exc: BaseException | None) -> None:
    try:
        end = time.monotonic()
        with _lock:
            if outer is None:
                _open.pop(tid, None)
            else:
                _open[tid] = outer
            if exc is not None and not this.written:
                _write_begin(this)
            if not this.written:
                _count(this, end - this.mono)
                return
        error = type(exc).__name__ if exc is not None else None
        this.rec.sink.enqueue((PhaseEnd, this.step, time.time(), end, (this.op, this.path, end - this.mono, False, error)))
        if exc is not None and not hasattr(exc, _phase_attr()):
            try:
                setattr(exc, _phase_attr(), (this.op, this.path))
            except AttributeError:  # exceptions with __slots__
                pass
    except Exception as ours:  # noqa: BLE001 - ours: off, and the call's own outcome goes on
        state.fail(this.op, ours)


def _count(this: _Open, duration: float) -> None:
    detail = this.detail or {}
    key = (this.op, detail.get("group"))
    seq = detail.get("seq")
    row = _summary.get(key)
    if row is None:
        _summary[key] = [detail.get("group_size"), 1, duration, duration, detail.get("size_bytes") or 0, seq, seq]
        return
    row[1] += 1
    row[2] += duration
    if duration > row[3]:
        row[3] = duration
    row[4] += detail.get("size_bytes") or 0
    row[6] = seq


def _write_begin(this: _Open) -> None:
    """The call's begin line, as the recorder would have queued it (under _lock)."""
    stack = this.stack
    this.path = f"{stack[-1][1]}/{this.op}" if stack else this.op
    this.written = True
    this.rec.sink.enqueue((PhaseBegin, this.step, this.t, this.mono, (this.op, this.path, this.detail)))


def _phase_attr() -> str:
    from grpo_doctor.rank.recorder import PHASE_ATTR

    return PHASE_ATTR


def _start_watcher() -> None:
    global _watcher
    _watcher = threading.Thread(target=_watch, name="grpo-doctor-collectives", daemon=True)
    _watcher.start()
    atexit.register(flush_summary)  # after the hooks' end record was registered: runs before it


def _watch() -> None:
    while True:
        time.sleep(PROMOTE_S / 2)
        if not _open or state.is_off():
            continue
        now = time.monotonic()
        try:
            with _lock:
                for this in list(_open.values()):
                    if not this.written and now - this.mono >= PROMOTE_S and not this.rec.ended:
                        _write_begin(this)
        except Exception as exc:  # noqa: BLE001
            state.fail("writing a long collective", exc)
