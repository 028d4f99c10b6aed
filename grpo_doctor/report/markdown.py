"""The report as GitHub-flavoured Markdown, to paste into an issue, a pull request or a chat.

What the page leads with, in the same order (incident_groups.py): the verdict, each root cause
with its consequences, its evidence, the culprit's stack and the remedies; then the findings that
stand alone, the notes on the evidence, a table of the ranks that did not end cleanly and a few
log excerpts. Run data goes through markdown_text.py (escaped, or inside a fence longer than any
backtick run in it): no raw HTML reaches the output, and nothing here writes any.

GitHub refuses a comment over 65,536 characters. The text is built from parts, each with a tier
(how much the reader loses without it); when they do not all fit in `max_chars`, the parts of the
lowest tiers are left out first, and a note under the verdict says what was left out and that
report.html holds everything.

Typical use:
    md = render_markdown(evidence, findings_file, html_path=Path("run/report.html"))
    assert len(md) <= MAX_CHARS
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from grpo_doctor._version import __version__
from grpo_doctor.analysis.findings import Finding, FindingsFile
from grpo_doctor.analysis.load import Evidence
from grpo_doctor.report.coverage import coverage
from grpo_doctor.report.excerpts import log_excerpts
from grpo_doctor.report.finding_blocks import STACK_KEYS, culprit_stack, verdict
from grpo_doctor.report.incident_groups import FindingGroup, group_findings
from grpo_doctor.report.markdown_text import code, fenced, prose, table, text
from grpo_doctor.report.sections import evidence_items, rank_rows
from grpo_doctor.schema.ranks import format_ranks

GITHUB_COMMENT_MAX_CHARS = 65_536
MAX_CHARS = 60_000  # headroom under GitHub's limit for what a person adds around the paste
NOTE_RESERVE_CHARS = 1_000  # kept free for the note that says what was left out
MAX_STACKS = 4  # culprit stacks shown per incident
MAX_FRAMES = 40
MAX_LIST_LINES = 20  # grouped stacks, waiting calls, consequences
MAX_EVIDENCE_ITEMS = 30
MAX_RANK_ROWS = 32
MAX_EXCERPTS = 4

# Tiers, kept in this order when space runs out (lower is kept first).
VERDICT, LEAD, LEAD_STACK, LEAD_EVIDENCE, NOTES, OTHER, RANKS, OTHER_STACK, OTHER_EVIDENCE, EXCERPTS = range(10)


@dataclass(frozen=True)
class Part:
    text: str
    tier: int
    what: str  # named in the note when it is left out: "log excerpts", "evidence tables", ...


def render_markdown(run: Evidence, findings: FindingsFile, html_path: Path | None = None,
                    max_chars: int = MAX_CHARS) -> str:
    groups = group_findings(list(findings.findings))
    parts = [Part(_verdict(findings, groups), VERDICT, "the verdict")]
    for i, group in enumerate(groups):
        parts += _group_parts(group, run, lead=i == 0)
    if not groups:
        parts.append(Part(_coverage_text(findings), LEAD, "what was read"))
    if findings.warnings:
        notes = [f"- {text(w, 500)}" for w in findings.warnings[:MAX_LIST_LINES]]
        if len(findings.warnings) > MAX_LIST_LINES:
            notes.append(f"- ... and {len(findings.warnings) - MAX_LIST_LINES} more (findings.json lists them)")
        parts.append(Part("### Notes on the evidence\n\n" + "\n".join(notes), NOTES, "notes on the evidence"))
    ranks = _ranks_table(run)
    if ranks:
        parts.append(Part(ranks, RANKS, "ranks table"))
    parts += [Part(x, EXCERPTS, "log excerpts") for x in _excerpts(run)]
    runs = ", ".join(code(p, 200) for p in findings.run[:3]) + (f" and {len(findings.run) - 3} more"
                                                                  if len(findings.run) > 3 else "")
    footer = (f"*grpo-doctor {text(__version__)}; run: {runs}"
              + (f"; full report: {code(html_path.name)} (attach it, or open it where it was written)*"
                 if html_path is not None else "*"))
    return _fit(parts, footer, max_chars)


def _verdict(findings: FindingsFile, groups: list[FindingGroup]) -> str:
    v = verdict(findings, coverage(findings))
    lines = ["## grpo-doctor report", ""]
    if v["severity"] in ("ok", "unknown"):
        lines.append(f"**{'Healthy as far as grpo-doctor can tell.' if v['severity'] == 'ok' else 'No findings.'}** "
                     f"{text(v['headline'])}")
        return "\n".join(lines)
    counts = v["counts"]
    head = (f"**Verdict: {counts['critical']} critical, {counts['warning']} warning(s), {counts['info']} note(s).** ")
    lead = groups[0]
    if v["root"]:
        explains = v["num_consequences"]
        head += f"Root cause ({code(lead.lead.id)}): {prose(v['headline'])}"
        head += f" (explains {explains} other finding{'s' if explains > 1 else ''})" if explains else ""
    else:
        head += f"Most severe ({code(lead.lead.id)}): {prose(v['headline'])}"
    lines.append(head)
    return "\n".join(lines)


def _group_parts(group: FindingGroup, run: Evidence, lead: bool) -> list[Part]:
    f = group.lead
    core_tier = LEAD if lead else OTHER
    stack = culprit_stack(f, run, group.consequences)
    kind = "Root cause" if group.is_incident else f.severity.capitalize()
    head = [f"### {kind}: {code(f.id)}" + ("" if kind == f.severity.capitalize() else f" ({f.severity})"), "",
            prose(f.title)]
    where = _where(f)
    if where:
        head += ["", where]
    if group.consequences:
        head += ["", f"**Consequences** ({len(group.consequences)}, explained by this root cause):", ""]
        head += [f"- {_who(c)}{code(c.id)} ({c.severity}): {prose(c.title, 300)}"
                 for c in group.consequences[:MAX_LIST_LINES]]
        if len(group.consequences) > MAX_LIST_LINES:
            head.append(f"- ... and {len(group.consequences) - MAX_LIST_LINES} more (findings.json lists them)")
    parts = [Part("\n".join(head), core_tier, "findings")]
    items = evidence_items({k: v for k, v in f.evidence.items() if not (stack and k in STACK_KEYS)})
    if items:
        rows = [[k, v] for k, v in items[:MAX_EVIDENCE_ITEMS]]
        parts.append(Part("**Evidence**\n\n" + table(["evidence", "value"], rows),
                          LEAD_EVIDENCE if lead else OTHER_EVIDENCE, "evidence tables"))
    if stack:
        parts.append(Part(_stack_text(stack), LEAD_STACK if lead else OTHER_STACK, "culprit stacks"))
    if f.hints:
        parts.append(Part("**What to change**\n\n" + "\n".join(f"{i}. {prose(h, 2000)}" for i, h in enumerate(f.hints, 1)),
                          core_tier, "remedy lists"))
    return parts


def _where(f: Finding) -> str:
    where = []
    if f.ranks:
        where.append(f"ranks {text(format_ranks(f.ranks))}")
    if f.hosts:
        where.append(f"hosts {text(', '.join(f.hosts))}")
    if f.phase:
        where.append(f"phase {code(f.phase, 200)}")
    if f.step is not None:
        where.append(f"step {text(f.step)}")
    return " · ".join(where)


def _who(f: Finding) -> str:
    return f"rank{'s' if len(set(f.ranks)) > 1 else ''} {text(format_ranks(f.ranks))}: " if f.ranks else ""


def _stack_text(stack: dict) -> str:
    out = ["**Culprit's stack**"]
    for st in stack["stacks"][:MAX_STACKS]:
        where = f", {prose(st['where'], 300)}" if st["where"] else ""
        out += ["", f"rank {text(st['rank'])}{where}: its own frames, innermost first", "",
                fenced(st["frames"][:MAX_FRAMES])]
    if len(stack["stacks"]) > MAX_STACKS:
        out += ["", f"... and {len(stack['stacks']) - MAX_STACKS} more ranks' stacks (report.html shows them)"]
    # The end of a traceback is where it failed; of the other lists, the first lines.
    for title, lines in (("where the others waited", stack["waiting"][:MAX_LIST_LINES]),
                         ("the end of its traceback", stack["traceback"][-MAX_FRAMES:]),
                         ("every rank's stack, ranks with the same stack grouped", stack["groups"][:MAX_LIST_LINES])):
        if lines:
            out += ["", f"{title}:", "", fenced(lines)]
    return "\n".join(out)


def _coverage_text(findings: FindingsFile) -> str:
    cov = coverage(findings)
    lines = ["### What was read and checked", ""]
    lines += [f"- read: {text(row.text)}" for row in cov.inputs]
    if cov.checked:
        lines.append(f"- checked: {text(', '.join(cov.checked))}")
    if cov.not_checked:
        lines.append(f"- not checked (no evidence reached them): {text(', '.join(cov.not_checked))}")
    return "\n".join(lines)


def _ranks_table(run: Evidence) -> str:
    """The ranks that did not end cleanly (all of them when there are few), at most MAX_RANK_ROWS."""
    rows = rank_rows(run)
    shown = rows if len(rows) <= 8 else [r for r in rows if r["odd"]]
    if not shown:
        return ""
    lines = ["### Ranks" + ("" if shown is rows else " that did not end cleanly"), "",
             table(["rank", "host", "step", "ended", "open phase", "last error"],
                   [[r["rank"], r["host"], "-" if r["last_step"] is None else r["last_step"], r["end"],
                     r["open_path"], r["error"]] for r in shown[:MAX_RANK_ROWS]])]
    left = len(rows) - min(len(shown), MAX_RANK_ROWS)
    if left:
        lines += ["", f"{left} more rank{'s' if left > 1 else ''} not listed (report.html lists every rank)."]
    return "\n".join(lines)


def _excerpts(run: Evidence) -> list[str]:
    out = []
    for i, x in enumerate(log_excerpts(run.signature_rows, max_excerpts=MAX_EXCERPTS)):
        heading = "### Log excerpts\n\n" if i == 0 else ""
        known = x["rank"] is not None and x["rank"] == x["rank"]  # a NaN rank (from a table) is no rank
        rank = f", rank {text(int(x['rank']))}" if known else ""
        out.append(f"{heading}{code(x['kind'])} in {code(Path(str(x['source'])).name, 200)} line "
                   f"{text(x['line_number'])}{rank}:\n\n" + fenced((">> " if hit else "   ") + str(line)
                                                                  for _, line, hit in x["lines"]))
    return out


def _fit(parts: list[Part], footer: str, max_chars: int) -> str:
    """The parts in order, those of the lowest tiers left out until the whole fits in max_chars."""
    budget = max_chars - len(footer) - NOTE_RESERVE_CHARS
    kept, used, full = set(), 0, set()
    for i in sorted(range(len(parts)), key=lambda i: (parts[i].tier, i)):
        size = len(parts[i].text) + 2
        # Within a tier, the first part that does not fit ends it: findings are kept from the top,
        # not a later one in place of an earlier; a smaller part of a lower tier may still fit.
        if parts[i].tier not in full and used + size <= budget:
            kept.add(i)
            used += size
        else:
            full.add(parts[i].tier)
    left_out = Counter(p.what for i, p in enumerate(parts) if i not in kept and p.what)
    out = [p.text for i, p in enumerate(parts) if i in kept]
    if left_out:
        what = ", ".join(f"{what} ({n})" for what, n in left_out.items())
        note = (f"> **Shortened to stay under GitHub's {GITHUB_COMMENT_MAX_CHARS:,}-character comment limit.** "
                f"Left out: {what}. report.html and findings.json hold everything.")
        out.insert(1 if 0 in kept else 0, note)
    return "\n\n".join([*out, footer]) + "\n"
