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
from grpo_doctor.analysis.hang_stacks import hang_captures, main_frames
from grpo_doctor.analysis.load import Evidence
from grpo_doctor.checks.stack_groups import format_frame
from grpo_doctor.report.coverage import Coverage
from grpo_doctor.report.incident_groups import FindingGroup, group_findings
from grpo_doctor.report.sections import evidence_items
from grpo_doctor.schema.ranks import format_ranks

STACK_KEYS = ("culprit_stacks", "culprit_code", "culprit_kind", "culprit_frames", "stack_groups",
              "waiting_calls")  # evidence shown as the culprit's stack, not in the table
MAX_TRACEBACK_LINES = 30
MAX_SUMMARY_TITLES = 2
MAX_SUMMARY_TITLE_CHARS = 120
MAX_FULL_FRAMES = 400  # a culprit's whole stack as watch took it; a runaway recursion is cut here
# What the culprit's stack shows it waiting on (the hang rule's `culprit_kind`), in words.
KIND_TEXT = {"reward": "in a reward function", "data-loader": "waiting for its data loader",
             "server-request": "waiting for a server's answer", "collective": "in a collective the other ranks are not in"}


def finding_blocks(findings: FindingsFile, run: Evidence) -> list[dict[str, Any]]:
    blocks = []
    for group in group_findings(list(findings.findings)):
        # A finding that stands alone shows a stack only where its own evidence holds one (a hang that watch
        # ended, with no consequence): never a traceback borrowed from its rank's log.
        own = any(group.lead.evidence.get(k) for k in STACK_KEYS)
        stack = culprit_stack(group.lead, run, group.consequences) if group.is_incident or own else {}
        hidden = STACK_KEYS if stack else ()
        blocks.append({"root": group.is_incident, "lead": _card(group.lead, hidden),
                       "stack": stack, "summary": consequence_summary(group),
                       "consequences": [_card(f) for f in group.consequences]})
    return blocks


def verdict(findings: FindingsFile, cov: Coverage) -> dict[str, Any]:
    counts = {s: sum(f.severity == s for f in findings.findings) for s in SEVERITIES}
    groups = group_findings(list(findings.findings))
    if not groups:
        none = {"counts": counts, "root": False, "num_consequences": 0}
        if cov.nothing_recognised:
            return {**none, "severity": "unknown", "headline": "Nothing in the input was recognised, so nothing "
                    "could be checked.", "empty_text": "No findings: nothing in the input was recognised."}
        if not cov.complete:
            return {**none, "severity": "unknown", "headline": "No findings in what could be checked; some of it "
                    "could not be.", "empty_text": "No findings in what could be checked (below: what was read and "
                    "what could not be checked)."}
        return {**none, "severity": "ok", "headline": "No known failure was found in this run.",
                "empty_text": "No findings: nothing grpo-doctor knows to go wrong was seen."}
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


def culprit_stack(f: Finding, run: Evidence, consequences: tuple[Finding, ...] = ()) -> dict[str, Any]:
    """What the root cause's rank(s) were doing, from the finding's evidence (the hang rule's
    `culprit_stacks` {rank: frames innermost first} with `culprit_code`, or a flat `culprit_frames`;
    `stack_groups`, one line per group of identical stacks; `waiting_calls`, where the others
    waited) and, for a rank that raised, the end of its last traceback; {} when none is known.
    Keys: `ranks`, `stacks` ([{"rank", "where", "kind", "frames"}]: every frame of the rank's main thread
    where the hang report is loaded, `kind` what the stack shows it waiting on, in words), `groups`,
    `waiting`, `traceback`.
    A root with no stacks of its own (a rank that died after watch captured it hanging) borrows them
    from the first of its consequences that has some about the same rank(s)."""
    evidence = f.evidence
    if not any(evidence.get(k) for k in STACK_KEYS):
        evidence = next((c.evidence for c in consequences if set(c.ranks) & set(f.ranks)
                         and any(c.evidence.get(k) for k in STACK_KEYS)), evidence)
    code = {str(r): c for r, c in (evidence.get("culprit_code") or {}).items() if isinstance(c, dict)}
    kinds = {str(r): c for r, c in (evidence.get("culprit_kind") or {}).items() if isinstance(c, dict)}
    stacks = [{"rank": str(r), "where": _where(code.get(str(r))), "kind": _kind_text(kinds.get(str(r))),
               "frames": _full_frames(run, evidence, r) or [str(x) for x in frames]}
              for r, frames in (evidence.get("culprit_stacks") or {}).items() if frames]
    if evidence.get("culprit_frames"):
        stacks.append({"rank": format_ranks(f.ranks), "where": "", "kind": "",
                       "frames": [str(x) for x in evidence["culprit_frames"]]})
    groups = [str(x) for x in evidence.get("stack_groups") or []]
    waiting = [f"rank {r}: {_call_text(call)}" for r, call in (evidence.get("waiting_calls") or {}).items() if call]
    traceback: list[str] = []
    rank = f.ranks[0] if len(f.ranks) == 1 else None
    if not stacks and rank is not None and rank in run.rank_logs:
        errors = [e for e in run.rank_logs[rank].errors if e.traceback]
        if errors:
            traceback = errors[-1].traceback.rstrip("\n").splitlines()[-MAX_TRACEBACK_LINES:]
    if not (stacks or groups or waiting or traceback):
        return {}
    return {"ranks": format_ranks(f.ranks), "stacks": stacks, "groups": groups, "waiting": waiting,
            "traceback": traceback}


def _full_frames(run: Evidence, evidence: dict[str, Any], rank: Any) -> list[str]:
    """Every frame of the rank's main thread in the hang report the finding was made from (the evidence
    keeps the first 40): what `py-spy dump` showed, innermost first. [] where the report is not loaded."""
    try:
        wanted = int(rank)
    except (TypeError, ValueError):
        return []
    hang_file = evidence.get("hang_file")
    for report in run.hangs:
        if not hang_file or report.file != hang_file:
            continue
        for capture in hang_captures(report):
            if capture.rank == wanted:
                return [format_frame(frame) for frame in main_frames(capture)[:MAX_FULL_FRAMES]]
    return []


def _kind_text(kind: dict[str, Any] | None) -> str:
    """"in a reward function: reward (train_grpo.py:33), called by GRPOTrainer._calculate_rewards (...)"."""
    if not kind or kind.get("kind") not in KIND_TEXT:
        return ""
    text = KIND_TEXT[kind["kind"]]
    if kind.get("frame"):
        text += f": {kind['frame']}"
    if kind.get("caller"):
        text += f", called by {kind['caller']}"
    return text


def _where(code: dict[str, Any] | None) -> str:
    if not code:
        return ""
    where = str(code.get("where") or code.get("user_frame") or "")
    return f"in user code: {where}" if code.get("in_user_code") and where else where


def _call_text(call: Any) -> str:
    if not isinstance(call, dict):
        return str(call)
    frame = call.get("op_frame") or call.get("op") or ""
    caller = call.get("caller") or call.get("site") or ""
    return f"{frame} <- {caller}" if frame and caller and caller not in frame else str(frame or caller)


def _card(f: Finding, hidden_keys: tuple[str, ...] = ()) -> dict[str, Any]:
    data = f.to_dict()
    shown = {k: v for k, v in data["evidence"].items() if k not in hidden_keys}
    return {**data, "key": f.key, "ranks_text": format_ranks(f.ranks), "evidence_items": evidence_items(shown)}


def _cut(text: str) -> str:
    return text if len(text) <= MAX_SUMMARY_TITLE_CHARS else text[:MAX_SUMMARY_TITLE_CHARS - 3] + "..."
