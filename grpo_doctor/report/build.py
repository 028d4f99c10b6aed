"""The report pipeline: load the evidence, run the rules, write findings.json and report.html.

One place for what `grpo-doctor report`, `watch` (at the end of a job), `demo` and the benchmarks
all do. Where the two files go:
- `out_dir` given: both inside it (created if needed);
- else both in the first run directory among `paths`, or the current directory when only log
  files were given;
- `html_path` given: the page there instead, findings.json where the rules above put it.
A findings.json that is neither in a directory the caller named nor one of this run's (an input
run directory, or one written earlier for the same inputs) is never overwritten: that is a
`DoctorError` naming it, so two runs reported from one directory cannot clobber each other.

Typical use:
    built = build_report([Path("grpo-doctor-runs/20261121-101502-p4711")])
    print(built.html_path, built.findings.has_critical)
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_doctor.schema import RunPaths
from grpo_doctor.schema.errors import DoctorError
from grpo_doctor.schema.safe_read import read_json
from grpo_doctor.schema.safe_write import make_dirs

MAX_FINDINGS_BYTES = 64 * 2**20  # findings.json of a big run is well under a megabyte
OUT_HINT = "pass --out DIR (or --html FILE) where you can write"


@dataclass(frozen=True)
class BuiltReport:
    findings: Any  # analysis.findings.FindingsFile (imported late: see build_report)
    html_path: Path
    findings_path: Path
    markdown: str = ""  # the report as Markdown (report/markdown.py), when asked for


def build_report(paths: list, out_dir: Path | None = None, configs: dict | None = None,
                 html_path: Path | None = None, full_read: bool = False, markdown: bool = False) -> BuiltReport:
    """Loads the evidence, runs the rules (with `configs`, {rule id: Config}, in place of their default
    thresholds), writes findings.json and report.html, and with `markdown` renders the Markdown
    report too (from the same evidence: it is not read twice). Raises DoctorError for unusable paths."""
    # pandas and matplotlib are imported here, not at module level: `grpo-doctor watch` must start
    # light. The benchmarks time these functions by wrapping the module attributes, which works
    # because they are looked up at call time.
    from grpo_doctor.analysis.coverage import describe_coverage
    from grpo_doctor.analysis.findings import FindingsFile
    from grpo_doctor.analysis.load import load_evidence
    from grpo_doctor.analysis.rules import run_rules
    from grpo_doctor.report.markdown import render_markdown
    from grpo_doctor.report.render import render_report
    from grpo_doctor.report.rule_settings import changed_settings
    from grpo_doctor.runlog.decode import paused_gc

    inputs = [str(p) for p in paths]
    # A big run's millions of records live until the page is written, and each pass of the cyclic
    # collector over them costs seconds (2 M records: about 2.5 s a pass, several passes while the
    # rules and plots allocate). They hold no cycles: reference counting frees them below, before
    # the collector resumes, and it then has only the plots' few cycles left to find.
    with paused_gc():
        evidence = load_evidence(paths, read_budget_bytes=None) if full_read else load_evidence(paths)
        directory = _output_dir(out_dir, evidence.paths)
        findings_path = RunPaths(directory).findings_json
        if out_dir is None:
            refuse_foreign_findings(findings_path, inputs)
        html = html_path if html_path is not None else RunPaths(directory).report_html
        if html.is_dir():
            raise DoctorError(f"--html {html} is a directory",
                              f"name the page, e.g. --html {RunPaths(html).report_html}, or pass --out {html}")
        findings, warnings = run_rules(evidence, configs=configs)
        read, not_checked, unrecognised = describe_coverage(evidence)
        result = FindingsFile(run=inputs, findings=findings, warnings=unrecognised + warnings,
                              settings=changed_settings(configs or {}), inputs=[i.to_dict() for i in read],
                              not_checked=not_checked)
        make_dirs(directory, hint=OUT_HINT)  # UnwritableFile, one line: /proc, a read-only disk, a link loop
        make_dirs(html.parent, hint=OUT_HINT)
        written = result.write(findings_path)
        render_report(evidence, result, html)
        text = render_markdown(evidence, result, html_path=html) if markdown else ""
        del evidence
    return BuiltReport(findings=result, html_path=html, findings_path=written, markdown=text)


def _output_dir(out_dir: Path | None, paths: list[Path]) -> Path:
    if out_dir is not None:
        if out_dir.exists() and not out_dir.is_dir():
            raise DoctorError(f"--out {out_dir} is a file, not a directory",
                              "--out names the directory that gets report.html and findings.json; "
                              f"for the page alone use --html {out_dir}")
        return out_dir
    return next((p for p in paths if p.is_dir()), Path.cwd())


def refuse_foreign_findings(findings_path: Path, inputs: list[str]) -> None:
    """A findings.json outside the input run directories, in a directory nobody named as the output
    (the current directory, when only logs were given), is replaced only when it holds a report of
    these same inputs; else DoctorError."""
    if not findings_path.exists() or any(findings_path.parent.resolve() == Path(p).resolve()
                                         for p in inputs if Path(p).is_dir()):
        return
    try:  # a device, a FIFO, a file past the cap or nested too deeply: not a report (schema/safe_read.py)
        earlier = read_json(findings_path, cap=MAX_FINDINGS_BYTES, errors="replace", what="findings.json").get("run")
        earlier = [str(Path(p).resolve()) for p in earlier]  # ./x.log and x.log are one input
    except (OSError, ValueError, AttributeError, TypeError):  # UnreadableFile is both of the first two
        earlier = None
    if earlier != [str(Path(p).resolve()) for p in inputs]:
        raise DoctorError(f"{findings_path} exists and is not a report of {' '.join(inputs)}; not overwriting it",
                          "pass --out DIR to write report.html and findings.json there")
