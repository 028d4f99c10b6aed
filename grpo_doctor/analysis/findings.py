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

FINDINGS_SCHEMA = 1
SEVERITIES = ("critical", "warning", "info")


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

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity {self.severity!r} is not one of {', '.join(SEVERITIES)}")

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "severity": self.severity, "title": self.title, "ranks": list(self.ranks),
                "hosts": list(self.hosts), "step": self.step, "phase": self.phase, "evidence": self.evidence,
                "hints": list(self.hints)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Finding:
        return cls(id=data["id"], severity=data["severity"], title=data["title"],
                   ranks=tuple(data.get("ranks") or ()), hosts=tuple(data.get("hosts") or ()),
                   step=data.get("step"), phase=data.get("phase"), evidence=dict(data.get("evidence") or {}),
                   hints=tuple(data.get("hints") or ()))


def sort_findings(findings: list[Finding]) -> list[Finding]:
    """Most severe first; within a severity, in the order the rules found them."""
    return sorted(findings, key=lambda f: SEVERITIES.index(f.severity))


@dataclass(frozen=True)
class FindingsFile:
    """The contents of findings.json: `{"schema", "run", "findings", "warnings"}`, and `settings`
    ({rule id: {field: value}}, the thresholds the user changed) only when there are some."""

    run: list[str]
    findings: list[Finding]
    warnings: list[str]
    settings: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = {"schema": FINDINGS_SCHEMA, "run": [str(p) for p in self.run],
               "findings": [f.to_dict() for f in sort_findings(list(self.findings))],
               "warnings": list(self.warnings)}
        if self.settings:
            out["settings"] = self.settings
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FindingsFile:
        return cls(run=list(data.get("run") or []), findings=[Finding.from_dict(f) for f in data["findings"]],
                   warnings=list(data.get("warnings") or []), settings=dict(data.get("settings") or {}))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=str)

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".json.tmp")
        partial.write_text(self.to_json() + "\n")
        partial.replace(path)
        return path

    @property
    def has_critical(self) -> bool:
        return any(f.severity == "critical" for f in self.findings)
