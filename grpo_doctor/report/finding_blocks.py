"""Plain data for the page's Findings section: one block per incident (root cause, its culprit's
stack, its consequences folded) or per finding that stands alone, and the verdict at the top.

Like sections.py, nothing here builds HTML: strings go to the template as they came from the run
and jinja2's autoescape escapes them.

Typical use:
    blocks = finding_blocks(findings_file, evidence)
    blocks[0]["lead"]["title"], blocks[0]["summary"]   # root cause, "2 consequences: rank 0 ..."
"""
from __future__ import annotations

from typing import Any

from grpo_doctor.analysis.findings import SEVERITIES, Finding, FindingsFile
from grpo_doctor.analysis.load import Evidence
from grpo_doctor.rankset import format_ranks
from grpo_doctor.report.coverage import Coverage
from grpo_doctor.report.incident_groups import FindingGroup, group_findings
from grpo_doctor.report.sections import evidence_items

STACK_KEYS = ("culprit_frames", "stack_groups")  # evidence shown as the culprit's stack, not in the table
MAX_TRACEBACK_LINES = 30
MAX_SUMMARY_TITLES = 2
MAX_SUMMARY_TITLE_CHARS = 120


def finding_blocks(findings: FindingsFile, ev: Evidence) -> list[dict[str, Any]]:
    blocks = []
    for group in group_findings(list(findings.findings)):
        stack = culprit_stack(group.lead, ev) if group.is_incident else {}
        hidden = STACK_KEYS if stack else ()
        blocks.append({"root": group.is_incident, "lead": _card(group.lead, hidden),
                       "stack": stack, "summary": consequence_summary(group),
                       "consequences": [_card(f) for f in group.consequences]})
    return blocks


def verdict(findings: FindingsFile, cov: Coverage) -> dict[str, Any]:
    counts = {s: sum(f.severity == s for f in findings.findings) for s in SEVERITIES}
    groups = group_findings(list(findings.findings))
    if not groups:
        if cov.nothing_recognised:
            return {"severity": "unknown", "counts": counts, "root": False, "num_consequences": 0,
                    "headline": "Nothing in the input was recognised, so nothing could be checked."}
        if not cov.complete:
            return {"severity": "unknown", "counts": counts, "root": False, "num_consequences": 0,
                    "headline": "No findings in what could be checked; some of it could not be."}
        return {"severity": "ok", "counts": counts, "root": False, "num_consequences": 0,
                "headline": "No known failure was found in this run."}
    top = groups[0]
    worst = min(SEVERITIES.index(f.severity) for f in findings.findings)
    return {"severity": SEVERITIES[worst], "counts": counts, "headline": top.lead.title, "root": top.is_incident,
            "num_consequences": len(top.consequences)}


def consequence_summary(group: FindingGroup) -> str:
    """"2 consequences: rank 0 timed out in all_reduce; ..." for the fold's one-line summary."""
    n = len(group.consequences)
    if not n:
        return ""
    titles = [_cut(f.title) for f in group.consequences[:MAX_SUMMARY_TITLES]]
    more = "; ..." if n > MAX_SUMMARY_TITLES else ""
    return f"{n} consequence{'s' if n > 1 else ''}: " + "; ".join(titles) + more


def culprit_stack(f: Finding, ev: Evidence) -> dict[str, Any]:
    """What the root cause's rank was doing: `frames` (the culprit's own frames, from the hang
    rule's `culprit_frames`), `groups` (one line per group of identical stacks) and, for a rank
    that raised, `traceback` (the tail of its last error's traceback); {} when none is known."""
    frames = [str(x) for x in f.evidence.get("culprit_frames") or []]
    groups = [str(x) for x in f.evidence.get("stack_groups") or []]
    traceback: list[str] = []
    rank = f.ranks[0] if len(f.ranks) == 1 else None
    if not frames and rank is not None and ev.run is not None and rank in ev.run.ranks:
        errors = [e for e in ev.run.ranks[rank].errors if e.traceback]
        if errors:
            traceback = errors[-1].traceback.rstrip("\n").splitlines()[-MAX_TRACEBACK_LINES:]
    if not (frames or groups or traceback):
        return {}
    return {"ranks": format_ranks(f.ranks), "frames": frames, "groups": groups, "traceback": traceback}


def _card(f: Finding, hidden_keys: tuple[str, ...] = ()) -> dict[str, Any]:
    data = f.to_dict()
    shown = {k: v for k, v in data["evidence"].items() if k not in hidden_keys}
    return {**data, "key": f.key, "ranks_text": format_ranks(f.ranks), "evidence_items": evidence_items(shown)}


def _cut(text: str) -> str:
    return text if len(text) <= MAX_SUMMARY_TITLE_CHARS else text[:MAX_SUMMARY_TITLE_CHARS - 3] + "..."
