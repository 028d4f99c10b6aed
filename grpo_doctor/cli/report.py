"""`grpo-doctor report PATH...`: findings with remedies from run directories and raw logs.

PATH is any mix of run directories (one per node, or one shared) and raw log files of runs that
were never instrumented (torchrun / ms-swift / TRL output, dmesg, flight-recorder dumps).
report.html and findings.json are written into the first run directory (or the current directory
when only log files are given); `--out FILE.html` puts the report elsewhere, findings.json beside it.
The findings are printed most severe first. `--set RULE_ID.FIELD=VALUE` and `--rules-config FILE.toml`
change a rule's thresholds (docs/findings.md lists them); --set wins over the file.

Typical use:
    grpo-doctor report grpo-doctor-runs/20261121-101502-p4711
    grpo-doctor report node0/run node1/run node1-stderr.log --json
    grpo-doctor report RUN --set dead-step.min_consecutive_steps=3 --rules-config thresholds.toml
"""
from __future__ import annotations

import sys
from pathlib import Path

from grpo_doctor.cli.errors import UserError
from grpo_doctor.report.console import format_findings

EXIT_HELP = ("exit status: 0 no critical finding; 1 at least one critical finding; "
             "2 bad input (missing path, unusable setting); 3 nothing was recognised in any input "
             "(no records, failure messages or metrics): no verdict.")


def add_parser(sub) -> None:
    p = sub.add_parser("report", help="findings with remedies from run directories and raw logs",
                       description=__doc__.split("\n\n")[0], epilog=EXIT_HELP)
    p.add_argument("paths", nargs="+", metavar="PATH", help="run directory or raw log file (any mix)")
    p.add_argument("--json", action="store_true", help="print findings.json to stdout")
    p.add_argument("--out", metavar="FILE", type=Path,
                   help="report path (default: report.html in the first run directory, else the current "
                        "directory); findings.json is written beside it")
    p.add_argument("--set", action="append", default=[], dest="settings", metavar="RULE_ID.FIELD=VALUE",
                   help="change a rule's threshold, e.g. dead-step.min_consecutive_steps=3 (repeatable; "
                        "fields: docs/findings.md)")
    p.add_argument("--rules-config", type=Path, metavar="FILE.toml",
                   help="thresholds from a TOML file, one table per rule id: [seed-collision] "
                        "min_identical_frac = 0.6; --set wins over it")
    p.set_defaults(run=run)


def run(args) -> int:
    from grpo_doctor.analysis.load import EvidenceError
    from grpo_doctor.analysis.rule_settings import RuleSettingsError, rule_configs

    try:
        configs = rule_configs(args.settings, args.rules_config)
    except RuleSettingsError as exc:
        raise UserError(str(exc), exc.hint) from None
    try:
        out, html_path, findings_path = write_report(args.paths, args.out, configs)
    except EvidenceError as exc:
        raise UserError(str(exc), exc.hint) from None
    if args.json:
        print(out.to_json())
    else:
        print(format_findings(out))
        print(f"report: {html_path}\nfindings: {findings_path}", file=sys.stderr)
    if out.has_critical:
        return 1
    return 3 if out.nothing_recognised else 0


def write_report(paths: list, out: Path | None = None, configs: dict | None = None):
    """Loads the evidence, runs the rules (with `configs`, {rule id: Config}, in place of their default
    thresholds), writes findings.json and report.html; returns (FindingsFile, report path, findings path).
    Raises EvidenceError for unusable paths."""
    # pandas and matplotlib are imported here, not at module level: `grpo-doctor watch` must start light.
    from grpo_doctor.analysis.coverage import describe_coverage
    from grpo_doctor.analysis.findings import FindingsFile
    from grpo_doctor.analysis.load import load_evidence
    from grpo_doctor.analysis.rule_settings import changed_settings
    from grpo_doctor.analysis.rules import run_rules
    from grpo_doctor.report.render import render_report
    from grpo_doctor.runlog.eventlog import paused_gc

    # A big run's millions of records live until the page is written, and each pass of the cyclic
    # collector over them costs seconds (2 M records: about 2.5 s a pass, several passes while the
    # rules and plots allocate). They hold no cycles: reference counting frees them below, before
    # the collector resumes, and it then has only the plots' few cycles left to find.
    with paused_gc():
        evidence = load_evidence(paths)
        findings, warnings = run_rules(evidence, configs=configs)
        inputs, not_checked, unrecognised = describe_coverage(evidence)
        result = FindingsFile(run=[str(p) for p in paths], findings=findings, warnings=unrecognised + warnings,
                              settings=changed_settings(configs or {}), inputs=[i.to_dict() for i in inputs],
                              not_checked=not_checked)
        html_path = _report_path(out, evidence.paths)
        findings_path = result.write(html_path.with_name("findings.json"))
        render_report(evidence, result, html_path)
        del evidence
    return result, html_path, findings_path


def _report_path(out: Path | None, paths: list[Path]) -> Path:
    if out is None:
        return next((p for p in paths if p.is_dir()), Path.cwd()) / "report.html"
    if out.is_dir():
        raise UserError(f"--out {out} is a directory", f"name the report file, e.g. --out {out / 'report.html'}")
    return out
