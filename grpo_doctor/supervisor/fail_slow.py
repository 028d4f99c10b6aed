"""Fail-slow: a job that keeps moving, but slowly. watch takes every rank's stack in rounds and names the
rank, or the host, that the others keep waiting for.

Without records (an uninstrumented job) watch still sees two things: the job's output and its ranks'
processes. The pace is the job's step lines per window (lines naming a step: `step 12 ...`, TRL's
`{'loss': ...}` dicts, verl's `step:12 -`), or every output line where it prints none
(`Pace`). A survey is a few rounds of stacks, one round every `interval_s`, each a `py-spy dump` of every
rank at once (supervisor/stacks.py); checks/stack_rounds.py says per round which ranks are outside the
dominant group and votes over the rounds. A survey starts:
- once the job's steps are under way (its 3rd step line, or 60 s after its ranks appeared): a rank slow
  from the start has no drop to show;
- when the pace falls: the last two windows each below the baseline (the median window of up to the
  last 30) divided by `drop_ratio`; once per fall (the pace must recover before another);
- when another node's watch of the job started one (the fleet's beat carries it, `token`): rounds are
  taken at wall-clock multiples of `interval_s`, so the rounds of every node are looks at one moment and
  the report merges them (analysis/rules/fail_slow.py).

Never more than one investigation's worth of py-spy: one round at a time, one py-spy per rank (the
capture dedups pids), no round while every rank has stalled (the hang's own looks take over), and
`quiesce()` before a hang investigation waits for a round in flight and skips one about to start.

What watch prints: the verdict once (`fail-slow: rank 1 on node0 outside the others' stack in 9 of 10
rounds: Injector.at (inject.py:179) <- Trainer.run_step (train.py:70); the others in all_gather ...`);
where the pace fell, also the fall and a verdict naming nobody. Every survey, its rounds and its verdict
go to `supervisor/<host>/fail-slow.json` (schema/slow_rounds.py).

Typical use:
    slow = FailSlow(FailSlowSettings(), host, watch_paths.fail_slow, write=files.write)
    slow.feed_output(chunk)                                  # each chunk the job prints (a tee thread)
    for line in slow.tick(time.monotonic(), {0: 4101, 1: 4102}, stalled=False, joined=None):
        console.note(line)
    fleet.set_beat(survey=slow.token)
    slow.quiesce()                                           # before a hang's own looks
"""
from __future__ import annotations

import json
import math
import re
import shutil
import statistics
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from grpo_doctor.checks.slow_links import describe_links, slow_link_hosts
from grpo_doctor.checks.stack_rounds import describe, look_at, vote
from grpo_doctor.host.tcp_links import sample_links
from grpo_doctor.schema.safe_write import write_file
from grpo_doctor.schema.slow_rounds import SlowRound, Survey, fail_slow_json
from grpo_doctor.supervisor.stacks import capture_stacks

# A line naming a step: "step 12", "global_step=12", verl's "step:12 -", TRL's / the HF Trainer's "{'loss': ".
STEP_LINE = re.compile(rb"(?i)(?<![a-z_])(?:global_)?steps?\s{0,2}[:=#]?\s{0,2}\d+|\{'loss': ")
START_STEP_LINES = 3  # the start survey: at this step line (the first steps compile and warm up)
START_AFTER_S = 60.0  # or this long after the ranks appeared, for a job that prints no step lines
MIN_WINDOW_EVENTS = 3  # a pace window is widened (bins merged) until its median holds this many lines
BASELINE_WINDOWS = 30
MAX_SURVEYS = 50  # kept in fail-slow.json; older ones are dropped from it
ROUND_LEAD_S = 0.6  # a round's thread starts this long before its slot and waits for it: every node at once
LATE_S = 0.3  # a round not started by this long after its slot's start is skipped (the nodes' looks must coincide)
# In a fleet a survey's first round is at least this far ahead: its token reaches the other watches through a
# watch loop, the fleet's publish and read and their watch loop, 2.4 s measured on a loaded 2-core machine. Two
# slots were the lead before: 5 to 10 s at the default 5 s interval, but 1 to 2 s at 1 s, where the node that
# heard late joined rounds short and the merged rounds fell below the report's min_rounds (no verdict).
FLEET_LEAD_S = 5.0


@dataclass(frozen=True)
class FailSlowSettings:
    interval_s: float = 5.0  # between rounds (--fail-slow-every); 0 turns the rounds off
    rounds: int = 10  # rounds in a survey (--fail-slow-rounds); a rank outside in most of them is named
    window_rounds: int = 3  # a pace window is this many round intervals (widened for a job with slower steps)
    drop_ratio: float = 1.5  # the pace fell: the last two windows each below baseline / drop_ratio
    capture_timeout_s: float = 10.0

    @property
    def enabled(self) -> bool:
        return self.interval_s > 0 and self.rounds > 0


@dataclass(frozen=True)
class PaceState:
    unit: str  # "step lines" or "lines"
    per_min: float  # the latest window's
    baseline_per_min: float | None  # None until there is a baseline
    fell: bool
    step_lines: int  # step lines seen so far

    def to_dict(self) -> dict[str, Any]:
        return {"unit": self.unit, "per_min": round(self.per_min, 2),
                "baseline_per_min": None if self.baseline_per_min is None else round(self.baseline_per_min, 2)}


class Pace:
    """The job's output pace: step lines (or lines) per window of `window_s`, and whether it fell. Lines
    count in the window they arrived in, however late `poll` comes."""

    def __init__(self, window_s: float, drop_ratio: float = 1.5) -> None:
        self.window_s = window_s
        self.drop_ratio = drop_ratio
        self._lock = threading.Lock()
        self._open: dict[int, list[int]] = {}  # window index -> [lines, step lines], not yet closed
        self._closed = 0  # windows before this index are in _bins
        self.step_lines = 0
        self._first_mono: float | None = None
        self._bins: deque[tuple[int, int]] = deque(maxlen=BASELINE_WINDOWS * 16)

    def feed(self, data: bytes, now_mono: float) -> None:
        """A chunk of the job's output (any thread)."""
        lines = data.count(b"\n")
        if not lines:
            return
        steps = len(STEP_LINE.findall(data))
        with self._lock:
            if self._first_mono is None:
                self._first_mono = now_mono
            index = max(self._closed, int((now_mono - self._first_mono) // self.window_s))
            counts = self._open.setdefault(index, [0, 0])
            counts[0] += lines
            counts[1] += steps
            self.step_lines += steps

    def poll(self, now_mono: float) -> PaceState | None:
        """None before the job's first line."""
        with self._lock:
            if self._first_mono is None:
                return None
            current = int((now_mono - self._first_mono) // self.window_s)
            while self._closed < current:
                self._bins.append(tuple(self._open.pop(self._closed, (0, 0))))
                self._closed += 1
            bins, step_lines = list(self._bins), self.step_lines
        steps = step_lines >= 2
        # Step lines are counted from the first window that had one: the job's start (imports, loading)
        # is no pace.
        counts = [s for n, s in bins] if steps else [n for n, s in bins]
        if steps:
            counts = counts[next((i for i, c in enumerate(counts) if c), len(counts)):]
        unit = "step lines" if steps else "lines"
        if not counts:
            return PaceState(unit, 0.0, None, False, step_lines)
        # A job that prints a step a minute has windows of 0 and 1: widen them until they hold a few.
        merge = 1
        while merge < 16 and len(counts) >= 4 * merge and statistics.median(_merged(counts, merge)) < MIN_WINDOW_EVENTS:
            merge *= 2
        windows = _merged(counts, merge)
        per_min = 60.0 / (merge * self.window_s)
        if len(windows) < 5:
            return PaceState(unit, windows[-1] * per_min, None, False, step_lines)
        baseline = statistics.median(windows[:-2][-BASELINE_WINDOWS:])
        fell = baseline >= MIN_WINDOW_EVENTS and all(w * self.drop_ratio <= baseline for w in windows[-2:])
        return PaceState(unit, windows[-1] * per_min, baseline * per_min, fell, step_lines)


def _merged(counts: list[int], k: int) -> list[int]:
    """Sums of k consecutive counts, the last window ending at the latest count (a partial first one dropped)."""
    start = len(counts) % k
    return [sum(counts[i:i + k]) for i in range(start, len(counts), k)]


@dataclass
class _Active:
    survey: Survey
    first_slot: int
    next_slot: int
    rounds: list[SlowRound] = field(default_factory=list)
    thread: threading.Thread | None = None
    results: list[SlowRound] = field(default_factory=list)  # filled by the round's thread

    @property
    def end_slot(self) -> int:
        return self.first_slot + self.survey.planned

    @property
    def token(self) -> str:
        return f"{self.first_slot}:{self.survey.planned}:{self.survey.interval_s:g}"


class FailSlow:
    def __init__(self, settings: FailSlowSettings, host: str, out_path: Path, *,
                 write: Callable[[str, Callable[[], Any]], bool] | None = None,
                 clock: Callable[[], float] = time.time, fleet: bool = False) -> None:
        self.settings = settings
        self.host = host
        self.out_path = out_path
        self._write = write or (lambda what, fn: bool(fn()) or True)
        self._clock = clock
        self._fleet = fleet  # several nodes' watches: a lone rank here is still one part of the job's rounds
        self.pace = Pace(settings.interval_s * settings.window_rounds, settings.drop_ratio)
        self.surveys: list[Survey] = []
        self._active: _Active | None = None
        self._started = False  # the start survey was taken
        self._ranks_since: float | None = None
        self._fell = False  # the pace was down at the last tick
        self._fall: dict[str, Any] | None = None  # a fall seen while a survey ran: surveyed once that ends
        self._joined: set[str] = set()
        self._said: set[str] = set()
        self._cancel = threading.Event()
        self._off: str | None = None  # why rounds are off (py-spy missing, ptrace denied)
        self._count = 0
        # The addresses of the job's hosts (the fleet beats', the master address; watch sets them): only links
        # between hosts of the job are judged (checks/slow_links.py), never one to a service outside it.
        self.job_addrs: frozenset[str] = frozenset()

    # -- the job's side ------------------------------------------------------------------------

    def feed_output(self, data: bytes) -> None:
        if self.settings.enabled:
            self.pace.feed(data, time.monotonic())

    @property
    def token(self) -> str | None:
        """The survey running here, for the other nodes' watches to join: "FIRST_SLOT:ROUNDS:INTERVAL"."""
        active = self._active
        if active is None or active.survey.why == "fleet":
            return None
        return active.token

    def quiesce(self, timeout_s: float | None = None) -> None:
        """Before a hang investigation: a round about to start is skipped, one in flight is waited for."""
        self._cancel.set()
        active = self._active
        if active is not None and active.thread is not None:
            active.thread.join(timeout=timeout_s if timeout_s is not None else self.settings.capture_timeout_s + 3.0)

    # -- the main loop -------------------------------------------------------------------------

    def tick(self, now_mono: float, pids: Mapping[int, int], *, stalled: bool, joined: str | None = None) -> list[str]:
        """Starts, takes and ends surveys; returns the lines to print."""
        if not self.settings.enabled or self._off:
            return []
        self._cancel.clear()
        lines: list[str] = []
        pace = self.pace.poll(now_mono)
        if pace is not None and pace.fell and not self._fell:
            self._fall = pace.to_dict()
        self._fell = bool(pace and pace.fell)
        if pids and self._ranks_since is None:
            self._ranks_since = now_mono
        wall = self._clock()
        slot_now = int(wall // self.settings.interval_s)
        if self._active is not None:
            return self._go_on(self._active, pids, stalled, wall, slot_now)
        if not pids or stalled:
            return lines
        first = slot_now + 1
        if self._fleet:  # the first round waits until the other nodes' watches have heard of it (FLEET_LEAD_S)
            first = max(slot_now + 2, math.ceil((wall + FLEET_LEAD_S) / self.settings.interval_s))
        if joined and joined not in self._joined and (plan := self._plan(joined, slot_now)) is not None:
            self._joined.add(joined)
            self._started = True  # the job's start was looked at, on every node at once
            self._begin("fleet", plan[0], plan[1], None)
        elif self._fall is not None:
            fall, self._fall = self._fall, None
            self._begin("pace", first, self.settings.rounds, fall)
            lines.append(f"fail-slow: the job's pace fell to {fall['per_min']:g} {fall['unit']}/min "
                         f"(from {fall['baseline_per_min']:g}): taking every rank's stack every "
                         f"{self.settings.interval_s:g} s, {self.settings.rounds} times")
        elif not self._started and (pace is not None and pace.step_lines >= START_STEP_LINES
                                    or now_mono - self._ranks_since >= START_AFTER_S):
            self._started = True
            self._begin("start", first, self.settings.rounds, None)
        return lines

    def close(self) -> None:
        """At the end of the job: a round in flight is waited for, the survey kept as far as it got."""
        active = self._active
        if active is None:
            return
        self.quiesce()
        active.rounds += active.results
        active.results = []
        self._keep(replace(active.survey, rounds=tuple(active.rounds)))
        self._active = None

    # -- pieces ----------------------------------------------------------------------------------

    def _plan(self, token: str, slot_now: int) -> tuple[int, int] | None:
        """(first slot, rounds) of another node's survey to join, if still running at our interval."""
        try:
            first, planned, interval = token.split(":")
            first_slot, rounds, every = int(first), int(planned), float(interval)
        except ValueError:
            return None
        start = max(first_slot, slot_now + 1)
        if abs(every - self.settings.interval_s) > 1e-6 or not 0 < rounds <= 100 or first_slot + rounds - start < 2:
            return None
        return start, first_slot + rounds - start

    def _begin(self, why: str, first_slot: int, planned: int, pace: dict[str, Any] | None) -> None:
        self._count += 1
        survey = Survey(id=f"{self.host}-{self._count}", host=self.host, why=why, interval_s=self.settings.interval_s,
                        planned=planned, started_t=self._clock(), pace=pace)
        self._active = _Active(survey, first_slot, first_slot)
        self._joined.add(self._active.token)  # never join our own survey back from another node's beat

    def _go_on(self, active: _Active, pids: Mapping[int, int], stalled: bool, wall: float, slot_now: int) -> list[str]:
        if active.thread is not None:
            if active.thread.is_alive():
                return []
            active.thread = None
            active.rounds += active.results
            active.results = []
            self._keep(replace(active.survey, rounds=tuple(active.rounds)))
            if active.rounds and not active.rounds[-1].ranks and _pyspy_off(active.rounds[-1]):
                # Said by the hang's looks where it matters; here the rounds just stop.
                self._off = next(iter(active.rounds[-1].errors.values()))
                self._active = None
                return []
        if slot_now >= active.end_slot or active.next_slot >= active.end_slot:
            self._active = None
            return self._finish(active)
        next_t = active.next_slot * self.settings.interval_s
        if wall > next_t + LATE_S:  # its moment passed (a hang's looks held the loop): the next slot instead
            active.next_slot = slot_now + 1
            return []
        if wall < next_t - ROUND_LEAD_S:
            return []
        slot = active.next_slot
        active.next_slot = slot + 1
        if stalled or not pids:
            return []  # a hang is suspected: its own looks take the stacks
        out: list[SlowRound] = active.results
        active.thread = threading.Thread(target=self._round, args=(slot, dict(pids), out),
                                         name="grpo-doctor-fail-slow", daemon=True)
        active.thread.start()
        return []

    def _round(self, slot: int, pids: dict[int, int], out: list[SlowRound]) -> None:
        """One round (its own thread): every rank's stack at the slot's start."""
        try:
            wait_s = slot * self.settings.interval_s - self._clock()
            if wait_s > 0 and self._cancel.wait(min(wait_s, ROUND_LEAD_S + 1.0)):
                return
            if self._cancel.is_set():
                return
            started = self._clock()
            tmp = Path(tempfile.mkdtemp(prefix="grpo-doctor-fail-slow-"))
            try:
                captures = capture_stacks(pids, tmp, timeout_s=self.settings.capture_timeout_s)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            looks, errors = {}, {}
            for capture in captures:
                look = look_at(capture)
                if look is not None:
                    looks[capture.rank] = look
                else:
                    errors[capture.rank] = capture.error or "no main thread"
            # The ranks' TCP round trips at the same moment: where every rank waits in one collective, they
            # tell which host's link is slow (checks/slow_links.py).
            out.append(SlowRound(t=started, slot=slot, ranks=looks, errors=errors, links=sample_links(pids)))
        except Exception as exc:  # noqa: BLE001 - a round that fails is a round missing, never watch's end
            out.append(SlowRound(t=self._clock(), slot=slot, errors={r: f"{type(exc).__name__}: {exc}" for r in pids}))

    def _finish(self, active: _Active) -> list[str]:
        survey = replace(active.survey, rounds=tuple(active.rounds))
        taken = [r.ranks for r in survey.rounds if r.ranks]
        lines: list[str] = []
        if len(taken) * 2 < survey.planned or not taken:
            survey = replace(survey, verdict={"line": None, "why_none": f"{len(taken)} of {survey.planned} rounds taken"})
            self._keep(survey)
            return lines
        result = vote(taken, {r: self.host for looks in taken for r in looks})
        if result.num_ranks < 2:
            only = next(iter(taken[-1]))
            line = (f"fail-slow: {len(taken)} stack rounds of rank {only}, this node's only rank"
                    + ("; the report merges them with the other nodes' rounds" if self._fleet else ""))
        else:
            line = describe(result)
        job_addrs = sorted(self.job_addrs)
        links = slow_link_hosts(((self.host, r.links) for r in survey.rounds if r.links is not None), job_addrs)
        if not result.named and links.slow:
            line += "; " + describe_links(links)
        survey = replace(survey, verdict=result.to_dict() | {"line": line, "links": links.to_dict(),
                                                              "job_addrs": job_addrs})
        self._keep(survey)
        if result.named or survey.why == "pace" or links.which_end:
            # Said once per what it names: the line's figures (rounds, milliseconds) change every survey.
            if result.named:
                key: Any = ("ranks", result.named, result.hosts)
            elif links.which_end:
                key = ("links", links.hosts)
            else:
                key = line
            if key not in self._said:
                self._said.add(key)
                lines.append(line)
        return lines

    def _keep(self, survey: Survey) -> None:
        self.surveys = [s for s in self.surveys if s.id != survey.id][-(MAX_SURVEYS - 1):] + [survey]
        data = json.dumps(fail_slow_json(self.host, self.surveys), indent=1)
        self._write(self.out_path.name, lambda: write_file(self.out_path, data))


def _pyspy_off(rnd: SlowRound) -> bool:
    """Every rank's stack failed for a reason no later round fixes (py-spy missing, ptrace denied)."""
    return bool(rnd.errors) and all(e.startswith(("py-spy missing:", "ptrace denied:")) for e in rnd.errors.values())
