"""What a report could and could not look at: findings.json's `inputs` and `not_checked` as text.

"No findings" means something only next to what was read: an empty file, random text or a log in
an unknown format must not read as a healthy run. The terminal (console.py) and the page
(render.py) both say it with these lines. Standard library only (watch imports it).

FindingsFile's `inputs` (per input: path, recognised, lines_read, rows_used, unmatched_lines,
areas; analysis/coverage.py) and `not_checked` (areas such as "hangs", "memory") are read with
getattr and defaults, so any object shaped like a findings file renders.

Typical use:
    cov = coverage(findings_file)
    for row in cov.inputs:
        print(row.text)          # "node0.log: nothing recognised (120 lines read)"
    print(cov.checked, cov.not_checked)   # ("crashes", "rollouts") ("hangs", "memory")
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class InputRow:
    path: str
    recognised: str  # "" when nothing in the input was recognised
    lines_read: int | None
    rows_used: int | None
    unmatched_lines: int | None
    areas: tuple[str, ...] = ()  # what this input let grpo-doctor check: "crashes", "hangs", ...

    @property
    def text(self) -> str:
        """One line naming the input and what was made of it."""
        counts = ", ".join(part for part in (
            _count(self.lines_read, "line read", "lines read"),
            _count(self.rows_used, "record or metric row used", "records or metric rows used"),
            _count(self.unmatched_lines, "line matched nothing", "lines matched nothing")) if part)
        if not self.recognised:
            read = _count(self.lines_read, "line read", "lines read")
            return f"{self.path}: nothing recognised" + (f" ({read})" if read else "")
        return f"{self.path}: {self.recognised}" + (f"; {counts}" if counts else "")


@dataclass(frozen=True)
class Coverage:
    inputs: tuple[InputRow, ...]
    not_checked: tuple[str, ...]

    @property
    def checked(self) -> tuple[str, ...]:
        """The areas some input reached, in the order the inputs name them."""
        return tuple(dict.fromkeys(area for row in self.inputs for area in row.areas))

    @property
    def nothing_recognised(self) -> bool:
        """Inputs were named and not one of them held anything grpo-doctor knows."""
        return bool(self.inputs) and not any(row.recognised for row in self.inputs)

    @property
    def complete(self) -> bool:
        """Every area was reached by some evidence and every input was recognised."""
        return not self.not_checked and all(row.recognised for row in self.inputs)


def coverage(findings_file: Any) -> Coverage:
    inputs = tuple(_input_row(item) for item in getattr(findings_file, "inputs", None) or ())
    return Coverage(inputs=inputs, not_checked=tuple(str(a) for a in getattr(findings_file, "not_checked", None) or ()))


def _input_row(item: Any) -> InputRow:
    if hasattr(item, "to_dict"):
        item = item.to_dict()
    elif dataclasses.is_dataclass(item) and not isinstance(item, type):
        item = dataclasses.asdict(item)
    data = dict(item)
    return InputRow(path=str(data.get("path", "")), recognised=_recognised_text(data.get("recognised")),
                    lines_read=data.get("lines_read"), rows_used=data.get("rows_used"),
                    unmatched_lines=data.get("unmatched_lines"),
                    areas=tuple(str(a) for a in data.get("areas") or ()))


def _recognised_text(value: Any) -> str:
    """The analysis may say what it recognised as a list of kinds, {kind: count}, a phrase or a flag."""
    if not value:
        return ""
    if isinstance(value, dict):
        return ", ".join(f"{kind} ({count})" if count not in (None, True) else str(kind)
                         for kind, count in value.items() if count)
    if isinstance(value, (list, tuple, set, frozenset)):
        return ", ".join(str(v) for v in value)
    if value is True:
        return "recognised"
    return str(value)


def _count(value: int | None, one: str, many: str) -> str:
    if value is None:
        return ""
    return f"{value} {one if value == 1 else many}"
