"""Where each rank is, or how it ended: one row per rank, the same for every place that shows it.

The report's Ranks table, `grpo-doctor summary` and watch's last lines all describe a rank by the
same fields and words (host, last step, the phase open at the end, how it ended, its last error),
built here from a rank's event log (`rank_state`) or, in watch, from what the supervisor saw
(`RankState(...)` directly). A rank that wrote no end record says "no end record": it is still
running, or was killed outright (SIGKILL, the OOM killer).

"Step" means one thing everywhere it is shown (`shown_step`): the step a rank was in when it stopped
(the step its last records carry, as the hang verdict says "at step 3"); for a rank that ended
cleanly, the last step it finished (a job of 8 steps ends at step 8, never "step 9").

Typical use:
    for state in rank_states(load_run([run_dir])):
        if not state.clean:
            print(state.line())   # "rank 1: exception; last phase rollout, step 2; RuntimeError in rollout"
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only for the annotations: watch builds rows without loading the reader
    from grpo_doctor.runlog.rank_log import RankLog, RunLog

CLEAN_ENDS = ("exit", "shutdown")
NO_END = "no end record"


@dataclass(frozen=True)
class RankState:
    rank: int
    host: str | None = None
    last_step: int | None = None  # the last step it finished (its last step record)
    step: int | None = None  # the step its last record carries: the one it was in when it stopped
    open_phase: str | None = None  # the phase path open at the end (or now, on a live run)
    ended: str | None = None  # its end record's reason: exit, shutdown, exception, signal; None: no end record
    signal: str | None = None  # with ended == "signal": which one ("SIGTERM")
    error: str | None = None  # its last error, short: "RuntimeError in rollout"
    error_message: str | None = None  # that error's message, where known
    gone: str | None = None  # watch saw its process leave without a clean end: how

    @property
    def ending(self) -> str:
        """How it ended by its own account: "exit", "signal (SIGTERM)", or "no end record"."""
        if self.ended is None:
            return NO_END
        return self.ended + (f" ({self.signal})" if self.signal else "")

    @property
    def shown_step(self) -> int | None:
        """The step to show for this rank (module docstring): where it stopped, or its last step if clean."""
        if self.clean or self.step is None:
            return self.last_step
        return self.step

    @property
    def clean(self) -> bool:
        """Ended by itself, without an error: nothing to point out."""
        return not self.gone and not self.error and self.ended in CLEAN_ENDS

    @property
    def failed(self) -> bool:
        """Ended by an exception or a signal, or without an end record."""
        return self.gone is not None or self.ended not in CLEAN_ENDS

    def line(self) -> str:
        """One line for a terminal: what happened to it, then where it was."""
        how = self.gone or self.ending
        error = f"; {self.error}" if self.error and not self.gone else ""
        step = f", step {self.shown_step}" if self.shown_step is not None else ""
        return f"rank {self.rank}: {how}; last phase {self.open_phase or '-'}{step}{error}"


def rank_state(log: RankLog, host: str | None = None) -> RankState:
    """The row of one rank's event log (its latest attempt); `host` where the header is missing."""
    end, errors, header = log.end, log.errors, log.header
    last_error = errors[-1] if errors else None
    return RankState(
        rank=log.rank,
        host=header.host if header is not None else host,
        last_step=log.last_step,
        step=_record_step(log.last_record),
        open_phase=end.open_path if end is not None and end.open_path else log.open_path,
        ended=str(end.reason) if end is not None else None,
        signal=end.signal if end is not None else None,
        error=f"{last_error.exc_type} in {last_error.path or 'no phase'}" if last_error else None,
        error_message=last_error.message if last_error else None,
    )


def _record_step(record) -> int | None:
    """The step a record's rank is in: a step record closes its step, so the rank is in the next
    (as watch's tracker counts it)."""
    step = getattr(record, "step", None)
    if isinstance(step, int) and not isinstance(step, bool) and type(record).__name__ == "Step":
        return step + 1
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def rank_states(run: RunLog) -> list[RankState]:
    """Every rank of the run that wrote an event log, by rank."""
    return [rank_state(log) for _, log in sorted(run.ranks.items())]
