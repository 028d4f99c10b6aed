"""Stack rounds of a job that moves, but slowly: per round, who is outside the others; over the rounds, who.

A job whose one rank (or one node) runs 2x slower does not stop: the others wait for it in every
collective. A look at every rank's stack at one moment (a round) finds most ranks in one place, the
dominant group (usually waiting in the collective), and the slow one elsewhere. One look can land where
every rank computes, or where a healthy rank is merely the last to arrive, so the rounds vote: the rank
outside the dominant group in most rounds is named (ByteRobust: every 10 s, 5 rounds). Where they run
then says which fault it is: every named rank on one host, and every rank of that host named -> the
host; named ranks scattered over hosts -> a code path those ranks take, not one machine.

In a round (`round_view`): ranks idle in an event loop (waiting for work) are left out. Where at least
half of the others wait in a collective, the ranks not in one are outside (with two ranks: the one the
other waits for). Otherwise the largest group of identical stacks (checks/stack_groups.py's signature),
when it holds more than half of the ranks, is the dominant one and the rest are outside. Every rank in
one place (all in the collective, or all with one stack) is a round "shared": a slowdown every rank has.

The vote (`vote`): a rank is named when it is outside in a majority of the rounds (more than half unless
`majority` says otherwise) and in at least `standout` times as many rounds as any rank not named (ranks
that take turns being last name nobody).

Typical use:
    looks = {c.rank: look_at(c) for c in captures if look_at(c) is not None}
    rounds.append(looks)
    result = vote(rounds, host_of={0: "node0", 1: "node1"})
    result.named, result.scope, describe(result)   # (1,), "host", "fail-slow: host node1: rank 1 outside ..."
    episodes(surveys)                               # several hosts' rounds of one slot merged into one look
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from grpo_doctor.checks.stack_groups import (
    headline,
    is_idle_in_event_loop,
    is_waiting_in_collective,
    stack_signature,
)
from grpo_doctor.schema.ranks import format_ranks
from grpo_doctor.schema.slow_rounds import RankLook, Survey
from grpo_doctor.schema.stacks import StackCapture

SCOPES = ("rank", "host", "scattered", "shared", "none")
STANDOUT = 3.0
MAX_EPISODE_GAP = 2  # slots: rounds further apart than this are two episodes (two surveys)


def look_at(capture: StackCapture) -> RankLook | None:
    """One rank's look in a round; None where its stack could not be taken."""
    if not capture.ok:
        return None
    main = capture.main_thread()
    if main is None:
        return None
    return RankLook(sig=stack_signature(main), waiting=is_waiting_in_collective(main),
                    idle=is_idle_in_event_loop(main), where=headline(main.frames))


@dataclass(frozen=True)
class RoundView:
    outside: tuple[int, ...] = ()
    dominant: str | None = None  # where the dominant group is (its most common headline)
    shared: bool = False  # every rank in the dominant group


def round_view(looks: Mapping[int, RankLook]) -> RoundView:
    present = {r: look for r, look in looks.items() if not look.idle}
    if len(present) < 2:
        only = next(iter(present.values()), None)
        return RoundView(dominant=only.where if only else None)
    n = len(present)
    waiting = {r for r, look in present.items() if look.waiting}
    if waiting and 2 * len(waiting) >= n:
        where = _most_common(present[r].where for r in waiting)
        return RoundView(tuple(sorted(set(present) - waiting)), where, len(waiting) == n)
    counts = Counter(look.sig for look in present.values()).most_common(2)
    sig, size = counts[0]
    if 2 * size <= n:
        return RoundView()
    where = _most_common(look.where for look in present.values() if look.sig == sig)
    return RoundView(tuple(sorted(r for r, look in present.items() if look.sig != sig)), where, size == n)


@dataclass(frozen=True)
class SlowVote:
    rounds: int
    num_ranks: int  # ranks seen in the rounds
    outside: dict[int, int] = field(default_factory=dict)  # rank -> rounds it was outside in (those outside in any)
    named: tuple[int, ...] = ()
    scope: str = "none"  # one of SCOPES
    hosts: tuple[str, ...] = ()  # the named ranks' hosts; for "shared", every host seen
    ranks_per_host: dict[str, list[int]] = field(default_factory=dict)  # named ranks by host
    where: dict[int, str] = field(default_factory=dict)  # named rank -> where it was when outside (most often)
    others_where: str | None = None  # where the others were in those rounds (or every rank, for "shared")
    others_rounds: int = 0  # in how many rounds they were there
    shared_rounds: int = 0  # rounds with every rank in one place

    def to_dict(self) -> dict[str, Any]:
        return {"rounds": self.rounds, "num_ranks": self.num_ranks,
                "outside": {str(r): n for r, n in sorted(self.outside.items())}, "named": list(self.named),
                "scope": self.scope, "hosts": list(self.hosts), "ranks_per_host": self.ranks_per_host,
                "where": {str(r): w for r, w in sorted(self.where.items())}, "others_where": self.others_where,
                "others_rounds": self.others_rounds, "shared_rounds": self.shared_rounds}


def vote(rounds: Sequence[Mapping[int, RankLook]], host_of: Mapping[int, str] | None = None, *,
         majority: int = 0, standout: float = STANDOUT) -> SlowVote:
    """`rounds`: each round's looks by rank; `majority` 0: more than half of the rounds."""
    host_of = host_of or {}
    need = majority or len(rounds) // 2 + 1
    outside: Counter[int] = Counter()
    where_out: dict[int, Counter[str]] = {}
    views = [round_view(looks) for looks in rounds]
    seen = {r for looks in rounds for r in looks}
    for looks, view in zip(rounds, views, strict=True):
        for rank in view.outside:
            outside[rank] += 1
            where_out.setdefault(rank, Counter())[looks[rank].where] += 1
    named = sorted(r for r, n in outside.items() if n >= need)
    rest = max((n for r, n in outside.items() if r not in named), default=0)
    if named and min(outside[r] for r in named) < standout * rest:
        named = []  # ranks taking turns at being last: nobody stands out
    shared_rounds = sum(v.shared for v in views)
    common = dict(rounds=len(rounds), num_ranks=len(seen), outside=dict(sorted(outside.items())),
                  shared_rounds=shared_rounds)
    if not named:
        if len(seen) >= 2 and shared_rounds >= need:
            where, count = Counter(v.dominant for v in views if v.shared).most_common(1)[0]
            hosts = tuple(sorted({host_of[r] for r in seen if r in host_of}))
            return SlowVote(**common, scope="shared", hosts=hosts, others_where=where, others_rounds=count)
        return SlowVote(**common)
    per_host: dict[str, list[int]] = {}
    for rank in named:
        per_host.setdefault(host_of.get(rank, "?"), []).append(rank)
    if len(per_host) > 1:
        scope = "scattered"
    else:
        (host, ranks), = per_host.items()
        on_host = {r for r in seen if host_of.get(r) == host}
        scope = "host" if host != "?" and set(ranks) == on_host and len(seen) > len(on_host) else "rank"
    others = Counter(v.dominant for v in views if v.dominant and set(named) & set(v.outside))
    others_where, others_rounds = others.most_common(1)[0] if others else (None, 0)
    return SlowVote(**common, named=tuple(named), scope=scope, hosts=tuple(h for h in sorted(per_host) if h != "?"),
                    ranks_per_host={h: rs for h, rs in sorted(per_host.items()) if h != "?"},
                    where={r: where_out[r].most_common(1)[0][0] for r in named},
                    others_where=others_where, others_rounds=others_rounds)


def describe(result: SlowVote, *, prefix: str = "fail-slow: ") -> str:
    """The verdict in one line (watch prints it; the report's finding title says the same)."""
    n = result.rounds
    named = result.named
    counts = ", ".join(str(result.outside[r]) for r in named)
    where = result.where.get(named[0], "") if named else ""
    others = f"; the others in {result.others_where}" if result.others_where else ""
    if result.scope == "host":
        host = result.hosts[0]
        return (f"{prefix}host {host}: {_ranks(named)} outside the others' stack in {counts} of {n} rounds: "
                f"{where}{others}: drain or check that machine")
    if result.scope == "rank":
        on = f" on {result.hosts[0]}" if result.hosts else ""
        return f"{prefix}{_ranks(named)}{on} outside the others' stack in {counts} of {n} rounds: {where}{others}"
    if result.scope == "scattered":
        return (f"{prefix}{_ranks(named)} on {len(result.hosts)} hosts outside the others' stack in {counts} of {n} "
                f"rounds: a code path those ranks take, not one machine ({where}{others})")
    if result.scope == "shared":
        return (f"{prefix}no rank outside the others' stack in most of {n} rounds; every rank in "
                f"{result.others_where} in {result.others_rounds} of them: a slowdown they all share")
    return f"{prefix}no rank outside the others' stack in most of {n} rounds; where they are differs from round to round"


def _ranks(ranks: Sequence[int]) -> str:
    return f"{'rank' if len(ranks) == 1 else 'ranks'} {format_ranks(ranks)}"


def _most_common(values: Iterable[str]) -> str | None:
    counts = Counter(values).most_common(1)
    return counts[0][0] if counts else None


@dataclass(frozen=True)
class Episode:
    """Rounds of one or more hosts' surveys taken in consecutive slots, merged: one look per slot at every
    rank any host's watch saw."""

    surveys: tuple[Survey, ...]
    rounds: tuple[dict[int, RankLook], ...]
    host_of: dict[int, str]
    interval_s: float

    @property
    def whys(self) -> tuple[str, ...]:
        return tuple(sorted({s.why for s in self.surveys}))

    @property
    def pace(self) -> dict[str, Any] | None:
        return next((s.pace for s in self.surveys if s.pace), None)


def episodes(surveys: Iterable[Survey]) -> list[Episode]:
    """Every host's surveys as episodes: the rounds of one slot (same `interval_s`) merged across hosts,
    slots no more than MAX_EPISODE_GAP apart in one episode. A slot some host of its episode took no round
    in (it joined late) is a partial look and left out. A rank seen on two hosts keeps the first."""
    by_interval: dict[float, list[Survey]] = {}
    for survey in surveys:
        if survey.rounds:
            by_interval.setdefault(survey.interval_s, []).append(survey)
    out = []
    for interval, group in sorted(by_interval.items()):
        slots: dict[int, dict[int, RankLook]] = {}
        owners: dict[int, list[Survey]] = {}
        host_of: dict[int, str] = {}
        for survey in group:
            for rnd in survey.rounds:
                merged = slots.setdefault(rnd.slot, {})
                owners.setdefault(rnd.slot, []).append(survey)
                for rank, look in rnd.ranks.items():
                    if rank not in merged:
                        merged[rank] = look
                        host_of.setdefault(rank, survey.host)
        run: list[int] = []
        for slot in sorted(slots):
            if run and slot - run[-1] > MAX_EPISODE_GAP:
                out.append(_episode(run, slots, owners, host_of, interval))
                run = []
            run.append(slot)
        if run:
            out.append(_episode(run, slots, owners, host_of, interval))
    return sorted(out, key=lambda e: min(s.started_t for s in e.surveys))


def _episode(run, slots, owners, host_of, interval) -> Episode:
    surveys: dict[int, Survey] = {}
    for slot in run:
        for survey in owners[slot]:
            surveys.setdefault(id(survey), survey)
    hosts = {s.host for s in surveys.values()}
    run = [slot for slot in run if {s.host for s in owners[slot]} == hosts]
    ranks = {r for slot in run for r in slots[slot]}
    return Episode(tuple(surveys.values()), tuple(slots[slot] for slot in run),
                   {r: h for r, h in host_of.items() if r in ranks}, interval)
