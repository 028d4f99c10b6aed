"""watch's stack rounds for a job that moves, but slowly (fail-slow): what it wrote, for the report.

`supervisor/<host>/fail-slow.json` (WatchPaths.fail_slow), rewritten whole (atomically) after each
round, holds this host's surveys, the latest last:

    {"schema": 1, "host": "node1",
     "surveys": [{"id": "node1-2", "host": "node1", "why": "pace", "interval_s": 5.0, "planned": 10,
                  "started_t": 1765432100.0, "pace": {"unit": "step lines", "per_min": 6.0, "baseline_per_min": 14.0},
                  "rounds": [{"t": 1765432105.0, "slot": 353086421,
                              "ranks": {"0": {"sig": "3f2a...", "waiting": true, "idle": false,
                                              "where": "all_gather (torch/distributed/distributed_c10d.py:4287) <- ..."}},
                              "errors": {"1": "timeout: ..."},
                              "links": {"addrs": ["10.0.0.2"], "rtt_ms": {"10.0.0.1": 0.3, "10.0.0.3": 151.0}}}],
                  "verdict": {"line": "fail-slow: rank 1 on node1 outside ...", "scope": "rank", ...}}]}

A round is one look at every rank of the host, all at once (py-spy dump, supervisor/stacks.py); its `slot`
is the wall-clock time divided by `interval_s`, so the rounds of several hosts' watches taken in one slot
are one look at the whole job (checks/stack_rounds.py merges them). `why` is "start" (the survey every run
gets once its steps are under way), "pace" (the job's output rate fell) or "fleet" (another node's watch
started it). A rank's look: `sig` (its main thread's stack signature, checks/stack_groups.py), `waiting`
(in a collective), `idle` (waiting for work in an event loop), `where` (the stack's headline). A round's
`links` (absent where `ss` is not there): the ranks' busy TCP connections' round trips by peer address, which
tell a slow link's host where every rank waits in the same collective (checks/slow_links.py).

Typical use:
    survey = Survey.from_dict(data["surveys"][0])     # FormatError when damaged
    survey.rounds[0].ranks[1].where
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from grpo_doctor.schema.json_shapes import (
    Check,
    FormatError,
    by_rank,
    check_object,
    dict_of,
    int_keys,
    list_of,
    opt,
    str_keys,
)

SCHEMA = 1
WHYS = ("start", "pace", "fleet")
_int, _num, _str, _bool = opt(int), opt(int, float), opt(str), opt(bool)


@dataclass(frozen=True)
class RankLook:
    """One rank's main thread in one round."""

    sig: str
    waiting: bool = False  # in a collective (checks/stack_groups.is_waiting_in_collective)
    idle: bool = False  # idle in an event loop: waiting for work, never anyone's straggler
    where: str = ""  # the stack's headline

    FIELDS: ClassVar[dict[str, Check]] = {"sig": opt(str), "waiting": _bool, "idle": _bool, "where": _str}

    def to_dict(self) -> dict[str, Any]:
        return {"sig": self.sig, "waiting": self.waiting, "idle": self.idle, "where": self.where}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RankLook:
        check_object(data, cls.FIELDS)
        return cls(sig=str(data.get("sig") or ""), waiting=bool(data.get("waiting")), idle=bool(data.get("idle")),
                   where=str(data.get("where") or ""))


@dataclass(frozen=True)
class LinkRtts:
    """The ranks' busy TCP connections of one host at one moment (host/tcp_links.py): this host's addresses on
    them, and the median round trip to each peer address."""

    addrs: tuple[str, ...] = ()
    rtt_ms: dict[str, float] = field(default_factory=dict)

    FIELDS: ClassVar[dict[str, Check]] = {"addrs": list_of(lambda v: type(v) is str),
                                          "rtt_ms": dict_of(lambda v: type(v) in (int, float) and v >= 0)}

    def to_dict(self) -> dict[str, Any]:
        return {"addrs": list(self.addrs), "rtt_ms": dict(self.rtt_ms)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LinkRtts:
        check_object(data, cls.FIELDS)
        return cls(addrs=tuple(data.get("addrs") or ()), rtt_ms={k: float(v) for k, v in (data.get("rtt_ms") or {}).items()})


@dataclass(frozen=True)
class SlowRound:
    """Every rank of one host at one moment (`t`, wall s; `slot` = t // interval_s)."""

    t: float
    slot: int
    ranks: dict[int, RankLook] = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)  # ranks whose stack could not be taken, and why
    links: LinkRtts | None = None  # the ranks' TCP round trips then; None where not sampled (no ss)

    FIELDS: ClassVar[dict[str, Check]] = {"t": _num, "slot": _int, "ranks": by_rank(RankLook.FIELDS),
                                          "errors": by_rank(value=lambda v: type(v) is str), "links": opt(dict)}

    def to_dict(self) -> dict[str, Any]:
        out = {"t": round(self.t, 3), "slot": self.slot,
               "ranks": str_keys({r: look.to_dict() for r, look in self.ranks.items()}),
               "errors": str_keys(self.errors)}
        if self.links is not None:
            out["links"] = self.links.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SlowRound:
        check_object(data, cls.FIELDS)
        return cls(t=float(data.get("t") or 0.0), slot=int(data.get("slot") or 0),
                   ranks={r: RankLook.from_dict(v) for r, v in int_keys(data.get("ranks")).items()},
                   errors=int_keys(data.get("errors")),
                   links=LinkRtts.from_dict(data["links"]) if data.get("links") is not None else None)


@dataclass(frozen=True)
class Survey:
    """Several rounds, `interval_s` apart, on one host; the verdict this host's watch gave them."""

    id: str
    host: str
    why: str  # one of WHYS
    interval_s: float
    planned: int
    started_t: float
    pace: dict[str, Any] | None = None  # {"unit", "per_min", "baseline_per_min"} when the pace fell
    rounds: tuple[SlowRound, ...] = ()
    verdict: dict[str, Any] | None = None  # checks/stack_rounds.py's SlowVote.to_dict() and its `line`

    FIELDS: ClassVar[dict[str, Check]] = {
        "id": _str, "host": _str, "why": _str, "interval_s": _num, "planned": _int, "started_t": _num,
        "pace": dict_of(lambda v: v is None or type(v) in (int, float, str)),
        "rounds": list_of(lambda v: type(v) is dict), "verdict": opt(dict)}

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "host": self.host, "why": self.why, "interval_s": self.interval_s,
                "planned": self.planned, "started_t": round(self.started_t, 3), "pace": self.pace,
                "rounds": [r.to_dict() for r in self.rounds], "verdict": self.verdict}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Survey:
        check_object(data, cls.FIELDS)
        interval = float(data.get("interval_s") or 0.0)
        if not interval > 0:
            raise FormatError("field interval_s is not a positive number")
        return cls(id=str(data.get("id") or ""), host=str(data.get("host") or ""), why=str(data.get("why") or "start"),
                   interval_s=interval, planned=int(data.get("planned") or 0),
                   started_t=float(data.get("started_t") or 0.0), pace=data.get("pace"),
                   rounds=tuple(SlowRound.from_dict(r) for r in data.get("rounds") or ()),
                   verdict=data.get("verdict"))


def fail_slow_json(host: str, surveys: list[Survey]) -> dict[str, Any]:
    return {"schema": SCHEMA, "host": host, "surveys": [s.to_dict() for s in surveys]}
