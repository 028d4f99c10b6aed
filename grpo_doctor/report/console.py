"""The findings as terminal text, one formatter for `grpo-doctor report` and `watch` (same verdict).

Root causes lead, each with its consequences indented under it, one line each; then the findings
that stand alone, most severe first; then the warnings about the evidence. With no findings it
says what was read and what could not be checked, so an unread file never passes for a healthy
run. Every line is made terminal-safe (`terminal_safe`): titles, phases, hosts and warnings carry
run data, and an escape sequence in a phase name must not clear the screen. Standard library only: `grpo-doctor watch` imports it and must start light.

    CRITICAL hang: hang on vm: the other ranks wait for rank(s) 1 in rollout at step 2 (root cause)
             ranks 1; hosts vm; phase rollout; step 2
             fix: ...
      <- rank 0: rank-crash: rank(s) 0 crashed: RuntimeError in reward at step 2 (consequence)
    WARNING  straggler: ...
    warning: ...

Typical use:
    print(format_findings(findings_file))
"""
from __future__ import annotations

from typing import Any

from grpo_doctor.analysis.findings import Finding
from grpo_doctor.logs.terminal_text import terminal_safe
from grpo_doctor.report.coverage import coverage
from grpo_doctor.report.incident_groups import group_findings
from grpo_doctor.schema.ranks import format_ranks

INDENT = " " * 9  # under the title, past "CRITICAL "


def format_findings(findings_file: Any) -> str:
    lines: list[str] = []
    for group in group_findings(list(findings_file.findings)):
        lines += _lead_lines(group.lead, root=group.is_incident)
        lines += [_consequence_line(f) for f in group.consequences]
    if not lines:
        lines = _no_findings_lines(findings_file)
    lines += [f"warning: {w}" for w in findings_file.warnings]
    # Line by line: a newline inside a title is escaped too, so it cannot forge a finding.
    return "\n".join(terminal_safe(line) for line in lines)


def _lead_lines(f: Finding, root: bool) -> list[str]:
    lines = [f"{f.severity.upper():8} {f.id}: {f.title}" + (" (root cause)" if root else "")]
    where = []
    if f.ranks:
        where.append(f"ranks {format_ranks(f.ranks)}")
    if f.hosts:
        where.append(f"hosts {', '.join(f.hosts)}")
    if f.phase:
        where.append(f"phase {f.phase}")
    if f.step is not None:
        where.append(f"step {f.step}")
    if where:
        lines.append(INDENT + "; ".join(where))
    if f.hints:
        lines.append(f"{INDENT}fix: {f.hints[0]}")
    return lines


def _consequence_line(f: Finding) -> str:
    who = f"rank{'s' if len(set(f.ranks)) > 1 else ''} {format_ranks(f.ranks)}: " if f.ranks else ""
    return f"  <- {who}{f.id}: {f.title} (consequence)"


def _no_findings_lines(findings_file: Any) -> list[str]:
    cov = coverage(findings_file)
    if cov.nothing_recognised:
        lines = ["no findings: nothing in the input was recognised, so nothing could be checked"]
    else:
        lines = ["no findings: nothing known to go wrong was seen"]
    lines += [f"read: {row.text}" for row in cov.inputs]
    if cov.checked:
        lines.append(f"checked: {', '.join(cov.checked)}")
    if cov.not_checked:
        lines.append(f"not checked (no evidence reached them): {', '.join(cov.not_checked)}")
    return lines
