"""Warnings about many files for one reason, said once: the count and the first few files.

A run directory with 100,000 empty rank files must not print 100,000 warning lines. A reason that
few files share keeps a line per file, exactly as said of one; more share it, one line says how
many and names the first `EXAMPLES`. The number of lines is then bounded by the number of reasons,
whatever the number of files.

Typical use:
    said = FileWarnings()
    for path in empty:
        said.add("{n} rank files have no readable records", f"{path}: no readable records", str(path))
    run.warnings += said.lines()   # "100,000 rank files have no readable records: a, b, c, ... (the first 3)"
"""
from __future__ import annotations

from dataclasses import dataclass, field

EXAMPLES = 3


@dataclass
class _Reason:
    count: int = 0
    amount: int = 0  # what `{amount}` in the line counts (lines skipped in all, ...)
    alone: list[str] = field(default_factory=list)  # the first files' own lines
    examples: list[str] = field(default_factory=list)  # the first files, as named in the shared line


class FileWarnings:
    """Per-file warnings grouped by reason, in the order the reasons first came."""

    def __init__(self) -> None:
        self._reasons: dict[str, _Reason] = {}

    def add(self, many: str, alone: str, example: str, amount: int = 0) -> None:
        """One file's warning: `alone` is its line when few files share the reason; `many` the one
        line for them all (it names the reason: `{n}` becomes the count of files, `{amount}` the sum of
        `amount`); `example` names this file among the first ones."""
        reason = self._reasons.setdefault(many, _Reason())
        reason.count += 1
        reason.amount += amount
        if len(reason.alone) < EXAMPLES:
            reason.alone.append(alone)
            reason.examples.append(example)

    def lines(self) -> list[str]:
        out: list[str] = []
        for many, reason in self._reasons.items():
            if reason.count <= EXAMPLES:
                out += reason.alone
            else:
                said = many.format(n=f"{reason.count:,}", amount=f"{reason.amount:,}")
                out.append(f"{said}: {', '.join(reason.examples)}, ... (the first {EXAMPLES})")
        return out
