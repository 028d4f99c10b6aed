"""Renders report.html from the loaded evidence and the findings, with jinja2 autoescaping on.

Every string from the run (completions, log lines, host names, paths, phase names) reaches the
page through the template's `{{ }}` and so is escaped: a completion holding `<script>` renders as
text. Bidi embeddings, overrides and isolates in any value are written as visible escapes
(`\u202e`) before that, so a host name cannot reverse the text around it. The page carries a
Content-Security-Policy that allows no script and no network at all, so
it opens offline and a mistake in escaping still cannot run code.

The page leads with the verdict and the findings: each root cause with its culprit's stack and the
phase timeline right under it and its consequences folded beneath (finding_blocks.py); with no
findings, what was read and what could not be checked (coverage.py).

Typical use:
    path = render_report(evidence, FindingsFile(run=[...], findings=findings, warnings=warnings), out_path)
"""
from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import jinja2
from markupsafe import Markup

from grpo_doctor._version import __version__
from grpo_doctor.analysis.findings import FindingsFile
from grpo_doctor.analysis.load import Evidence
from grpo_doctor.logs.terminal_text import without_bidi_controls
from grpo_doctor.report import plots, sections
from grpo_doctor.report.coverage import coverage
from grpo_doctor.report.excerpts import log_excerpts
from grpo_doctor.report.figure_png import close_figures
from grpo_doctor.report.finding_blocks import finding_blocks, verdict
from grpo_doctor.report.plan_section import plan_section
from grpo_doctor.report.rollout_plots import rollout_section
from grpo_doctor.schema.safe_write import write_file

T = TypeVar("T")
TEMPLATES = Path(__file__).parent / "templates"


def render_html(evidence: Evidence, findings: FindingsFile) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=False, finalize=_inert_bidi)
    cov = coverage(findings)
    blocks = finding_blocks(findings, evidence)
    notes = list(findings.warnings)
    figures = {"timeline": _drawn("phase timeline", plots.phase_timeline, evidence, notes),
               "memory": _drawn("memory figure", plots.memory_over_time, evidence, notes),
               "metrics": _drawn("step-metric figures", plots.step_metrics, evidence, notes)}
    rollouts = _drawn("rollout section", rollout_section, evidence, notes)
    return env.get_template("report.html.j2").render(
        run_paths=[str(p) for p in findings.run], generated=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        version=__version__, verdict=verdict(findings, cov), blocks=blocks, warnings=notes,
        inputs=[row.text for row in cov.inputs], checked=list(cov.checked), not_checked=list(cov.not_checked),
        ranks=sections.rank_rows(evidence), plots=figures,
        stacks=sections.stack_sections(evidence), environment=sections.environment_table(evidence),
        excerpts=log_excerpts(evidence.signature_rows), rollouts=rollouts,
        memory_plans=plan_section(evidence),
    )


def _drawn(what: str, draw: Callable[[Evidence], T], evidence: Evidence, notes: list[str]) -> T | None:
    """A figure, or None and a note saying why: values a damaged run holds (a time of 2**64 s) can make
    matplotlib fail, and one figure must not cost the page its findings."""
    try:
        return draw(evidence)
    except Exception as exc:  # the findings are already judged: say what is missing, keep the page
        notes.append(f"{what} not drawn: {type(exc).__name__}: {str(exc)[:200]} (a value in the run's records "
                     "out of any plausible range?)")
        close_figures()  # the one the failed drawing left open
        return None


def _inert_bidi(value):
    """Every `{{ }}` value on its way out: bidi controls written as escapes. Markup (a block the
    template built) stays Markup; the escapes hold no character HTML gives a meaning to."""
    if isinstance(value, Markup):
        return Markup(without_bidi_controls(str(value)))
    if isinstance(value, str):
        return without_bidi_controls(value)
    return value


def render_report(evidence: Evidence, findings: FindingsFile, path: str | Path) -> Path:
    """Writes the page atomically (a reader never sees half a report) and returns its path; a device
    or a FIFO is written through, never replaced (schema/safe_write.py: UnwritableFile, one line)."""
    return write_file(path, render_html(evidence, findings))
