"""Where each rank was when the job came apart, from the rank records alone (no watch needed).

A hung or desynchronised job ends the same way whether or not anyone watched it: some ranks raise
in a collective (gloo's "Timed out waiting 20000ms", NCCL's watchdog timeout, a lost peer) while
the rank they waited for sat somewhere else. This module reads that from the event logs: each
rank's last progress (phase and step records, not the periodic memory ones), the phase still
open, how it ended, and, for a rank whose exception came from a collective, which collective and
from which line of the user's code (`CollectiveFailure`). The rules `hang` and
`collective-mismatch` build on it.

Typical use:
    positions = rank_positions(run)
    failures = collective_failures(run, positions)
    failures[0].kind, failures[0].call.op, failures[0].call.site   # "timeout", "all_gather", "dist.py:75"
    completed(run, 0, "rollout", 2)      # True: rank 0 went past the phase rank 1 waits in
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from grpo_doctor.analysis.views import RunView
from grpo_doctor.checks.stack_groups import CollectiveCall, collective_call
from grpo_doctor.schema import End, Error
from grpo_doctor.schema.stacks import Frame, traceback_frames

# A collective or store operation gave up waiting: the rank that raised it is the one that waited.
_TIMEOUT_MS = (
    re.compile(r"Timed out waiting (\d+)\s*ms"),  # gloo
    re.compile(r"Timeout\(ms\)=(\d+)"),  # NCCL watchdog
    re.compile(r"timed out after (\d+)\s*ms", re.IGNORECASE),  # c10d store waitForInput
)
_TIMEOUT_S = re.compile(r"Timed out after (\d+) seconds")  # DistStoreError
_TIMEOUT_WORDS = ("timed out", "timeout", "watchdog caught collective")
# The peer went away first: the rank that raised it is a victim of a rank that died.
_PEER_LOST = ("connection closed by peer", "connection reset by peer", "remote worker crashing",
              "remote process exited", "broken pipe", "communicator was aborted")


@dataclass(frozen=True)
class RankPosition:
    """One rank at the end of its log. Times are wall seconds on the reference host's clock."""

    rank: int
    host: str | None
    step: int | None  # step of its last record
    open_path: str | None  # phase still open when the log ends (or when the error was raised)
    last_progress_t: float | None  # its last phase or step record
    ended_t: float | None  # its end record, or its last record of any kind when there is none
    end_reason: str | None  # "exit", "signal", "exception", "shutdown"; None: no end record
    end_signal: str | None
    error: Error | None  # the last exception of its current attempt


@dataclass(frozen=True)
class CollectiveFailure:
    """A rank's exception raised while it waited for the others."""

    rank: int
    kind: str  # "timeout" (it gave up waiting) or "peer-lost" (a peer went away first)
    timeout_ms: int | None  # the timeout it gave up after, where the message says
    call: CollectiveCall | None  # the collective and its call site, where the traceback shows them
    frames: tuple[Frame, ...]  # the traceback's frames, innermost first
    t: float
    step: int | None
    path: str | None  # the phase it was in
    message: str


def rank_positions(run: RunView) -> dict[int, RankPosition]:
    """Every rank with an event log, as its latest attempt ended."""
    out: dict[int, RankPosition] = {}
    # Split by rank once: a filter of the whole table per rank is a million-row pass each at 1,024 ranks.
    phases_of = dict(tuple(run.phases.groupby("rank", sort=False)))
    steps = run.steps
    steps_of = dict(tuple(steps.groupby("rank", sort=False))) if "t" in steps and not steps.empty else {}
    no_phases = run.phases.iloc[:0]
    for rank, log in sorted(run.rank_logs.items()):
        host = log.host
        shift = run.clock_offsets.get(host, 0.0) if host else 0.0
        began_t = log.header.t - shift if log.header is not None else float("-inf")
        # Phase and step records live in the tables (clocks already aligned there), not in log.records.
        mine = phases_of.get(rank, no_phases)
        mine = mine[mine["begin_t"] >= began_t]
        times = [mine["begin_t"].max(), mine["end_t"].max()]
        if rank in steps_of:
            own_steps = steps_of[rank]
            times.append(own_steps.loc[own_steps["t"] >= began_t, "t"].max())
        times = [float(t) for t in times if t == t and t is not None]  # NaN != NaN
        last_any = log.last_record
        end, errors = log.end, log.errors
        error = errors[-1] if errors else None
        ended_t = (end.t if isinstance(end, End) else getattr(last_any, "t", None))
        open_path = log.open_path or (end.open_path if isinstance(end, End) else None) or (error.path if error else None)
        step = log.last_step
        if not mine.empty:
            last_step = mine["step"].max()
            step = int(last_step) if last_step == last_step and (step is None or last_step > step) else step
        out[rank] = RankPosition(
            rank=rank, host=host, step=step, open_path=open_path,
            last_progress_t=max(times) if times else None,
            ended_t=ended_t - shift if ended_t is not None else None,
            end_reason=str(end.reason) if isinstance(end, End) else None,
            end_signal=end.signal if isinstance(end, End) else None, error=error)
    return out


def collective_failures(run: RunView, positions: dict[int, RankPosition]) -> dict[int, CollectiveFailure]:
    """rank -> its failure, for the ranks whose last exception says it waited in a collective or lost a peer."""
    out = {}
    for rank, pos in positions.items():
        if pos.error is None:
            continue
        failure = classify_failure(rank, pos.error, run.clock_offsets.get(pos.host or "", 0.0))
        if failure is not None:
            out[rank] = failure
    return out


def classify_failure(rank: int, err: Error, shift_s: float = 0.0) -> CollectiveFailure | None:
    message = f"{err.exc_type}: {err.message}"
    lower = message.lower()
    frames = traceback_frames(err.traceback or "")
    call = collective_call(frames)
    if any(w in lower for w in _PEER_LOST):
        kind = "peer-lost"
    elif any(w in lower for w in _TIMEOUT_WORDS) and (call is not None or "collective" in lower
                                                      or "nccl" in lower or "gloo" in lower):
        kind = "timeout"
    else:
        return None
    return CollectiveFailure(rank=rank, kind=kind, timeout_ms=timeout_ms(message), call=call, frames=frames,
                             t=err.t - shift_s, step=err.step, path=err.path, message=err.message)


def timeout_ms(message: str) -> int | None:
    """The timeout a message says it gave up after, in ms; None where it names none."""
    for pattern in _TIMEOUT_MS:
        found = pattern.search(message)
        if found:
            return int(found.group(1))
    found = _TIMEOUT_S.search(message)
    return int(found.group(1)) * 1000 if found else None


def completed(run: RunView, rank: int, path: str, step: int | None) -> bool:
    """True when `rank` ended phase `path` of `step` normally (it went past where another rank waits)."""
    p = run.phases
    done = p[(p["rank"] == rank) & (p["path"] == path) & (p["step"] == step) & p["duration_s"].notna()]
    return bool((done["error"].isna() | (done["error"] == "")).any())
