"""What a rule concludes (`Finding`) and the findings.json file that holds a run's conclusions.

Finding ids are a public interface (users' scripts and tests rely on them); evidence keys carry
their unit in the name (`_bytes`, `_s`, `_ms`) and are documented in each rule's module.

Typical use:
    f = Finding(id="rank-crash", severity="critical", title="rank 1 crashed", ranks=(1,), hosts=("node-0",),
                step=3, phase="backward", evidence={"exc_type": "RuntimeError"}, hints=("read its traceback",))
    FindingsFile(run=["runs/job-17"], findings=[f], warnings=[]).write("runs/job-17/findings.json")
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_doctor.analysis.finding_facts import Facts
from grpo_doctor.schema.safe_write import write_file

FINDINGS_SCHEMA = 1
SEVERITIES = ("critical", "warning", "info")
ROLES = (None, "root-cause", "consequence")


@dataclass(frozen=True)
class Finding:
    id: str
    severity: str  # one of SEVERITIES
    title: str
    ranks: tuple[int, ...] = ()
    hosts: tuple[str, ...] = ()
    step: int | None = None
    phase: str | None = None
    evidence: dict[str, Any] = field(default_factory=dict)
    hints: tuple[str, ...] = ()
    # Set by analysis/incidents.py: "root-cause" or "consequence" (None: stands alone), and on a
    # consequence the `key` of the root finding that explains it.
    role: str | None = None
    caused_by: str | None = None
    # The evidence other code judges by, typed (analysis/finding_facts.py); not written to findings.json,
    # whose `evidence` holds the same values under the same names.
    facts: Facts | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity {self.severity!r} is not one of {', '.join(SEVERITIES)}")
        if self.role not in ROLES:
            raise ValueError(f"role {self.role!r} is not one of {', '.join(map(str, ROLES))}")

    @property
    def key(self) -> str:
        """Names this finding among a run's findings: its id, and its ranks where it has some
        (two rank-crash findings of one run differ by their ranks)."""
        return f"{self.id}@{','.join(map(str, self.ranks))}" if self.ranks else self.id

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "severity": self.severity, "title": self.title, "ranks": list(self.ranks),
                "hosts": list(self.hosts), "step": self.step, "phase": self.phase, "evidence": self.evidence,
                "hints": list(self.hints), "role": self.role, "caused_by": self.caused_by}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Finding:
        return cls(id=data["id"], severity=data["severity"], title=data["title"],
                   ranks=tuple(data.get("ranks") or ()), hosts=tuple(data.get("hosts") or ()),
                   step=data.get("step"), phase=data.get("phase"), evidence=dict(data.get("evidence") or {}),
                   hints=tuple(data.get("hints") or ()), role=data.get("role"), caused_by=data.get("caused_by"))


def sort_findings(findings: list[Finding]) -> list[Finding]:
    """Root causes (analysis/incidents.py) first, then the findings that stand alone; each most severe
    first, else in the order given. A consequence follows its root cause, whatever its own severity.
    The terminal and the HTML (report/incident_groups.py) show the same order."""
    roots = {f.key: f for f in findings if f.role == "root-cause"}
    heads = sorted((f for f in findings if f.role != "consequence" or f.caused_by not in roots),
                   key=lambda f: (f.role != "root-cause", SEVERITIES.index(f.severity)))
    out: list[Finding] = []
    for head in heads:
        out.append(head)
        if head.role == "root-cause" and roots.pop(head.key, None) is not None:  # a repeated key: the first root
            out += sorted((f for f in findings if f.role == "consequence" and f.caused_by == head.key),
                          key=lambda f: SEVERITIES.index(f.severity))
    return out


@dataclass(frozen=True)
class FindingsFile:
    """The contents of findings.json: `{"schema", "run", "findings", "warnings", "inputs",
    "not_checked"}`, and `settings` ({rule id: {field: value}}, the thresholds the user changed) only
    when there are some. `inputs`: one dict per path given (analysis/coverage.py: path, recognised,
    lines_read, rows_used, unmatched_lines, areas); `not_checked`: the areas no input reached."""

    run: list[str]
    findings: list[Finding]
    warnings: list[str]
    settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    inputs: list[dict[str, Any]] = field(default_factory=list)
    not_checked: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out = {"schema": FINDINGS_SCHEMA, "run": [str(p) for p in self.run],
               "findings": [f.to_dict() for f in sort_findings(list(self.findings))],
               "warnings": list(self.warnings), "inputs": list(self.inputs), "not_checked": list(self.not_checked)}
        if self.settings:
            out["settings"] = self.settings
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FindingsFile:
        return cls(run=list(data.get("run") or []), findings=[Finding.from_dict(f) for f in data["findings"]],
                   warnings=list(data.get("warnings") or []), settings=dict(data.get("settings") or {}),
                   inputs=list(data.get("inputs") or []), not_checked=list(data.get("not_checked") or []))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=str)

    def write(self, path: str | Path) -> Path:
        """Atomically, never over a device or a FIFO (schema/safe_write.py: UnwritableFile, one line)."""
        return write_file(path, self.to_json() + "\n")

    @property
    def has_critical(self) -> bool:
        return any(f.severity == "critical" for f in self.findings)

    @property
    def nothing_recognised(self) -> bool:
        """No input contributed anything: "no findings" would mean nothing (report exits 3)."""
        return bool(self.inputs) and not any(i.get("recognised") for i in self.inputs)
