"""Join a message that a log collector (or the program itself) wrapped over several lines.

A `JoinSpec` says how a message starts, how one knows it is complete, and which words its
continuation lines use. When a line starts such a message without completing it, the `Joiner`
holds it for that stream (ranks interleave, so each stream joins its own lines) and appends the
stream's next lines, joined with spaces, until the message is complete, `max_lines` is reached,
or a line comes that cannot continue it (then that line is scanned on its own as usual). A text
that ends with a colon ("Last error:") takes the next line whatever it says. A collector that
wraps a long line does not repeat its prefix, so a line without any prefix right after a held
line may continue that line's message (`offer_adjacent`).

Typical use:
    joiner = Joiner((JoinSpec("oom", lambda t: "CUDA out of memory" in t, lambda t: "unallocated" in t, ("GPU",)),))
    joiner.start("[rank0]", 0, "CUDA out of memory. Tried to allocate 2.00 MiB.", 1)   # True: held
    taken, done = joiner.offer("[rank0]", "GPU 0 has a total capacity of ... unallocated.", 2)
    done.text  # both lines, joined with a space
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple


@dataclass(frozen=True)
class JoinSpec:
    name: str
    starts: Callable[[str], bool]
    complete: Callable[[str], bool]
    vocabulary: tuple[str, ...] = ()  # a continuation holds one of these; empty: any line may continue
    max_lines: int = 8
    refuse: tuple[str, ...] = ()  # a line holding one of these starts something else: never a continuation


class Joined(NamedTuple):
    spec: JoinSpec
    rank: int | None
    line_index: int  # of the first line
    text: str


@dataclass
class _Pending:
    spec: JoinSpec
    rank: int | None
    line_index: int
    last_line_index: int
    parts: list[str] = field(default_factory=list)


class Joiner:
    def __init__(self, specs: tuple[JoinSpec, ...]) -> None:
        self._specs = specs
        self.held: dict[str, _Pending] = {}  # by stream; read-only outside (truthy: something is held)

    def holds(self, source: str) -> bool:
        return source in self.held

    def start(self, source: str, rank: int | None, text: str, line_index: int) -> bool:
        """Hold `text` if it starts a message it does not complete; True when held."""
        for spec in self._specs:
            if spec.starts(text) and not spec.complete(text):
                self.held[source] = _Pending(spec, rank, line_index, line_index, [text])
                return True
        return False

    def offer(self, source: str, text: str, line_index: int) -> tuple[bool, Joined | None]:
        """(whether `text` continued the held message, the message if it is now finished)."""
        pending = self.held[source]
        spec = pending.spec
        if not self._continues(pending, text):
            return False, self._pop(source)
        pending.parts.append(text.strip())
        pending.last_line_index = line_index
        if len(pending.parts) >= spec.max_lines or spec.complete(" ".join(part.rstrip() for part in pending.parts)):
            return True, self._pop(source)
        return True, None

    def offer_adjacent(self, text: str, line_index: int) -> tuple[bool, Joined | None]:
        """Like `offer`, for a line without a prefix: it may continue the message held on the
        line just before it, whichever stream that was; nothing is finished if it does not."""
        for source, pending in self.held.items():
            if pending.last_line_index == line_index - 1 and self._continues(pending, text):
                return self.offer(source, text, line_index)
        return False, None

    def expire(self, line_index: int, max_age_lines: int) -> list[Joined]:
        """Messages whose stream has said nothing for `max_age_lines` lines, finished as they are."""
        stale = [s for s, p in self.held.items() if line_index - p.last_line_index > max_age_lines]
        return [self._pop(s) for s in stale]

    def flush(self) -> list[Joined]:
        return [self._pop(s) for s in list(self.held)]

    def _continues(self, pending: _Pending, text: str) -> bool:
        if pending.parts[-1].rstrip().endswith(":"):
            return True
        spec = pending.spec
        if any(word in text for word in spec.refuse) or any(s.starts(text) for s in self._specs):
            return False
        return not spec.vocabulary or any(word in text for word in spec.vocabulary)

    def _pop(self, source: str) -> Joined:
        p = self.held.pop(source)
        return Joined(p.spec, p.rank, p.line_index, " ".join(part.rstrip() for part in p.parts))
