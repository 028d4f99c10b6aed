"""Findings as a person reads them: each root cause with the consequences it explains, then the rest.

analysis/incidents.py sets `role` and `caused_by` on the findings; this module only arranges them
for display, shared by the terminal (console.py) and the HTML page (render.py) so that both lead
with the same verdict. Standard library only: `grpo-doctor watch` imports it and must start light.

Order: root causes in the order the findings list gives them (the analysis ranks incidents), each
followed by its consequences; then the findings that stand alone, most severe first. A consequence
whose root is not in the list stands alone, so a finding is never lost.

Typical use:
    for group in group_findings(findings_file.findings):
        print(group.lead.title, [c.id for c in group.consequences])
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from grpo_doctor.analysis.findings import SEVERITIES, Finding


@dataclass(frozen=True)
class FindingGroup:
    """One block of the findings: `lead` and, when it is a root cause, the findings it explains."""

    lead: Finding
    consequences: tuple[Finding, ...] = ()

    @property
    def is_incident(self) -> bool:
        return self.lead.role == "root-cause" or bool(self.consequences)


def group_findings(findings: Sequence[Finding]) -> list[FindingGroup]:
    by_key: dict[str, Finding] = {}
    for f in findings:
        by_key.setdefault(f.key, f)
    # A consequence hangs under the finding it names, whatever that finding's own role says: the
    # link is the analysis's statement, the role only its summary. A chain (a consequence of a
    # consequence) hangs under the first finding of the chain.
    children: dict[int, list[Finding]] = {}
    attached: set[int] = set()
    for f in findings:
        top = _top_of_chain(f, by_key)
        if top is not f:
            children.setdefault(id(top), []).append(f)
            attached.add(id(f))
    incidents, alone = [], []
    for f in findings:
        if id(f) in attached:
            continue
        if f.role == "root-cause" or id(f) in children:
            incidents.append(FindingGroup(f, tuple(children.get(id(f), ()))))
        else:
            alone.append(FindingGroup(f))
    alone.sort(key=lambda g: SEVERITIES.index(g.lead.severity))
    return incidents + alone


def _top_of_chain(f: Finding, by_key: dict[str, Finding]) -> Finding:
    seen, top = {id(f)}, f
    while top.role == "consequence" and (parent := by_key.get(top.caused_by or "")) is not None:
        if id(parent) in seen:
            return f  # a cycle names no root: the finding stands alone rather than vanish
        seen.add(id(parent))
        top = parent
    return top
