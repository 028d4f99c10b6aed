"""A rendezvous that names who is missing: every member posts a JSON payload to a c10d store and
waits, until a deadline, for the payloads of all expected members.

A member id posted twice (two nodes launched with the same NODE_RANK) is kept twice and said.

Typical use:
    got = gather_over_store(store, "grpo-doctor-probe/node", me=1, expected=range(4), payload={...},
                            deadline_mono=time.monotonic() + 60)
    got.payloads     # {0: [{...}], 1: [{...}], 3: [{...}]}
    got.missing      # [2]
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

POLL_S = 0.2


@dataclass
class Gathered:
    payloads: dict[int, list[dict[str, Any]]] = field(default_factory=dict)  # member -> its posts (usually one)
    missing: list[int] = field(default_factory=list)
    waited_s: float = 0.0

    def first(self) -> dict[int, dict[str, Any]]:
        return {member: posts[0] for member, posts in sorted(self.payloads.items())}

    def duplicated(self) -> dict[int, list[dict[str, Any]]]:
        return {member: posts for member, posts in self.payloads.items() if len(posts) > 1}


def gather_over_store(store: Any, prefix: str, *, me: int, expected: Iterable[int], payload: dict[str, Any],
                      deadline_mono: float, on_wait: Callable[[list[int], float], None] | None = None,
                      wait_note_every_s: float = 10.0) -> Gathered:
    """Post my payload, then poll (store.check never blocks) until every expected member posted
    or the deadline passed. on_wait(missing, seconds_left) is called every wait_note_every_s."""
    started = time.monotonic()
    slot = store.add(f"{prefix}/count/{me}", 1)
    store.set(f"{prefix}/post/{me}/{slot}", json.dumps(payload, default=str))
    expected = sorted(set(expected) | {me})
    present: set[int] = set()
    next_note = started + wait_note_every_s
    while True:
        present |= {m for m in expected if m not in present and store.check([f"{prefix}/post/{m}/1"])}
        now = time.monotonic()
        if len(present) == len(expected) or now >= deadline_mono:
            break
        if on_wait is not None and now >= next_note:
            on_wait([m for m in expected if m not in present], deadline_mono - now)
            next_note = now + wait_note_every_s
        time.sleep(min(POLL_S, max(0.0, deadline_mono - now)))
    got = Gathered(missing=[m for m in expected if m not in present], waited_s=time.monotonic() - started)
    for member in sorted(present):
        count = store.add(f"{prefix}/count/{member}", 0)
        got.payloads[member] = [json.loads(store.get(f"{prefix}/post/{member}/{k}")) for k in range(1, count + 1)]
    return got


def finish_together(store: Any, prefix: str, *, me: int, members: Iterable[int], is_server: bool,
                    timeout_s: float = 10.0) -> None:
    """Every member says it has read what it needs; the member serving the store waits for that
    (or the timeout) before it closes the store under the others."""
    store.set(f"{prefix}/read/{me}", "1")
    if not is_server:
        return
    deadline = time.monotonic() + timeout_s
    waiting = [m for m in members if m != me]
    while waiting and time.monotonic() < deadline:
        waiting = [m for m in waiting if not store.check([f"{prefix}/read/{m}"])]
        time.sleep(POLL_S if waiting else 0)
