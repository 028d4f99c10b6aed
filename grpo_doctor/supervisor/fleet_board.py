"""The heartbeat each node's watch publishes to the others, and what one watch makes of them all: which
nodes are live, which watch decides, which nodes went silent and for how long.

A beat (`NodeBeat`, about 170 bytes plus 45 per rank) says where this node's ranks are:
`state` is "progress" (some rank made progress within its stall timeout), "stalled" (every running
rank stalled: this node suspects a hang) or "idle" (no rank running: not started yet, or ended);
`ranks` holds each local rank's step, open phase, seconds since progress and pid. The deciding watch
also puts in it the look it asks every node for (`look`) and its latest verdict's id (`verdict`);
every node says which look it answered (`answered`) and which verdict it applied (`seen`). Each beat carries
the watch's address toward the store (`addr`); the store's host names its heir (`heir`: the live node with
the lowest id after its own, and that node's address), who hosts a new store when it dies
(fleet_takeover.py); at the job's end the store's host keeps it up until every live node is done or says it
heard the host's "done" beat (`saw_done`). A node taking
fail-slow stack rounds names them (`survey`: "FIRST_SLOT:ROUNDS:INTERVAL", supervisor/fail_slow.py), so the
other nodes take theirs at the same moments.

Liveness is judged on the reader's own clock, by the beat's `seq` changing: a node whose beat has not
changed for `stale_s` is silent ("node 3: no report for 40 s"), as is one never heard from since this
watch started `stale_s` ago. The decider is the live node with the lowest node id (NODE_RANK,
SLURM_NODEID); this watch counts itself live. A watch that is not the decider needs only the beats of
the nodes below it, up to the first live one: with node 0 alive, one read per poll.

Typical use:
    board = Board(me=1, nnodes=4, stale_s=10.0, start_mono=time.monotonic())
    board.update({0: NodeBeat.from_message(message)}, time.monotonic())
    board.decider(now), board.live(now), board.silent(now)    # 0, [0, 1], {2: "no report since ...", ...}
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

STATES = ("progress", "stalled", "idle")
RankState = tuple  # (step, open phase, seconds since progress, pid), each possibly None


@dataclass(frozen=True)
class NodeBeat:
    node: int
    host: str
    seq: int = 0
    t: float = 0.0  # wall s when published
    state: str = "idle"  # one of STATES
    stall: str | None = None  # names this node's current stall (its ranks' record counts), while stalled
    idle_s: float | None = None  # seconds since the node's ranks last made progress, while stalled
    ranks: dict[int, RankState] = field(default_factory=dict)
    look: str | None = None  # the decider: the look it asks every node's stacks for
    answered: str | None = None  # the look this node's stacks (kind "stacks") answer
    verdict: str | None = None  # the decider: the id of its latest verdict (kind "verdict")
    seen: str | None = None  # the latest verdict this node applied
    done: bool = False  # this node's job ended and its summary is written
    on_hang: str = "report"
    survey: str | None = None  # fail-slow stack rounds this node takes (fail_slow.FailSlow.token)
    addr: str | None = None  # this watch's address toward the store: where it would host the next one
    heir: tuple[int, str] | None = None  # the store's host: the node (and its addr) to host it after it
    saw_done: int | None = None  # the store's host (node id) whose "done" beat this watch heard: it may close now

    def to_message(self) -> dict[str, Any]:
        out = {"node": self.node, "host": self.host, "seq": self.seq, "t": round(self.t, 3), "state": self.state,
               "ranks": {str(r): list(v) for r, v in sorted(self.ranks.items())}, "on_hang": self.on_hang}
        optional = {"stall": self.stall, "idle_s": self.idle_s, "look": self.look, "answered": self.answered,
                    "verdict": self.verdict, "seen": self.seen, "survey": self.survey, "addr": self.addr,
                    "heir": list(self.heir) if self.heir else None, "saw_done": self.saw_done}
        return out | {k: v for k, v in optional.items() if v is not None} | ({"done": True} if self.done else {})

    def to_bytes(self) -> bytes:
        return json.dumps(self.to_message(), separators=(",", ":")).encode()

    @classmethod
    def from_message(cls, message: Mapping[str, Any]) -> NodeBeat | None:
        """A beat read back, or None where it is not one (another version's, damaged)."""
        try:
            ranks = {int(r): tuple(v)[:4] for r, v in (message.get("ranks") or {}).items() if isinstance(v, list)}
            beat = cls(node=int(message["node"]), host=str(message.get("host") or ""), seq=int(message["seq"]),
                       t=float(message.get("t") or 0.0), state=str(message.get("state")),
                       stall=_opt_str(message.get("stall")), idle_s=_opt_num(message.get("idle_s")), ranks=ranks,
                       look=_opt_str(message.get("look")), answered=_opt_str(message.get("answered")),
                       verdict=_opt_str(message.get("verdict")), seen=_opt_str(message.get("seen")),
                       done=message.get("done") is True, on_hang=str(message.get("on_hang") or "report"),
                       survey=_opt_str(message.get("survey")), addr=_opt_str(message.get("addr")),
                       heir=_heir(message.get("heir")), saw_done=_opt_node(message.get("saw_done")))
        except (KeyError, TypeError, ValueError, AttributeError):
            return None
        return beat if beat.state in STATES else None


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _heir(value: Any) -> tuple[int, str] | None:
    if isinstance(value, list) and len(value) == 2 and type(value[0]) is int and isinstance(value[1], str):
        return value[0], value[1]
    return None


def _opt_node(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None


def _opt_num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


class Board:
    """Every node's latest beat as this watch heard it, and when each last changed (its own clock)."""

    def __init__(self, me: int, nnodes: int, stale_s: float, start_mono: float) -> None:
        self.me, self.nnodes, self.stale_s, self.start_mono = me, nnodes, stale_s, start_mono
        self.beats: dict[int, NodeBeat] = {}
        self._changed_mono: dict[int, float] = {}

    def update(self, beats: Mapping[int, NodeBeat], now: float) -> None:
        for node, beat in beats.items():
            if node == self.me or not 0 <= node < self.nnodes:
                continue
            old = self.beats.get(node)
            if old is None or beat.seq != old.seq or beat.t != old.t:
                self._changed_mono[node] = now
            self.beats[node] = beat

    def is_live(self, node: int, now: float) -> bool:
        if node == self.me:
            return True
        changed = self._changed_mono.get(node)
        return changed is not None and now - changed < self.stale_s

    def live(self, now: float) -> list[int]:
        return [n for n in range(self.nnodes) if self.is_live(n, now)]

    def decider(self, now: float) -> int:
        return next(n for n in range(self.nnodes) if self.is_live(n, now) or n == self.me)

    def connected(self, now: float) -> bool:
        """Whether any other node's watch is heard from now."""
        return any(self.is_live(n, now) for n in range(self.nnodes) if n != self.me)

    def silent(self, now: float) -> dict[int, str]:
        """node -> why it counts as absent: "no report for 40 s", or never heard from."""
        out = {}
        for node in range(self.nnodes):
            if self.is_live(node, now):
                continue
            changed = self._changed_mono.get(node)
            if changed is None:
                out[node] = f"no report since this watch started {now - self.start_mono:.0f} s ago"
            else:
                out[node] = f"no report for {now - changed:.0f} s"
        return out

    def to_read(self, now: float) -> list[int]:
        """The other nodes whose beats this watch needs: all of them as the decider, else those below it
        up to the first live one (which decides)."""
        if self.decider(now) == self.me:
            return [n for n in range(self.nnodes) if n != self.me]
        out = []
        for node in range(self.me):
            out.append(node)
            if self.is_live(node, now):
                break
        return out

    def host_of(self, node: int) -> str | None:
        beat = self.beats.get(node)
        return beat.host if beat is not None else None
