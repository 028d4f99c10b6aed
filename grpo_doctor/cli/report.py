"""`grpo-doctor report PATH...`: findings with remedies from run directories and raw logs.

PATH is any mix of run directories (one per node, or one shared) and raw log files of runs that
were never instrumented (torchrun / ms-swift / TRL output, dmesg, flight-recorder dumps).
report.html and findings.json go into `--out DIR` (created if needed); without it, into the first
run directory, or the current directory when only log files are given (a findings.json there that
holds another report is never overwritten). `--html FILE` puts the page alone elsewhere.
`--format` picks what goes to stdout: `html` (the default) the findings as terminal text, most
severe first (the page is report.html); `json` findings.json (`--json` is the same); `md` the
report as GitHub-flavoured Markdown to paste into an issue or a chat (verdict, root cause,
evidence, the culprit's stack, remedies; shortened to stay under GitHub's 65,536-character comment
limit, saying so). `--md FILE` (or `--out FILE.md`) writes the Markdown to FILE instead of stdout,
whatever the format. `--set RULE_ID.FIELD=VALUE` and `--rules-config FILE.toml`
change a rule's thresholds (docs/findings.md lists them); --set wins over the file.

Typical use:
    grpo-doctor report grpo-doctor-runs/20261121-101502-p4711
    grpo-doctor report node0/run node1/run node1-stderr.log --out /tmp/verdict
    grpo-doctor report RUN --set dead-step.min_consecutive_steps=3 --rules-config thresholds.toml
    grpo-doctor report RUN --format md | gh issue comment 123 --body-file -
"""
from __future__ import annotations

import sys
from pathlib import Path

from grpo_doctor.cli.errors import UserError
from grpo_doctor.report.build import build_report, refuse_foreign_findings
from grpo_doctor.report.console import format_findings
from grpo_doctor.schema import RunPaths
from grpo_doctor.schema.safe_write import write_file

# The pipeline (load, rules, findings.json, report.html) is report/build.py: this module parses and prints.

FORMATS = ("html", "json", "md")

EXIT_HELP = """\
exit status: 0 no critical finding; 1 at least one critical finding; 2 bad input (missing path,
unusable setting); 3 nothing was recognised in any input (no records, failure messages or
metrics): no verdict."""


def add_parser(sub) -> None:
    p = sub.add_parser("report", help="findings with remedies from run directories and raw logs",
                       description=__doc__.split("\n\nTypical use")[0], epilog=EXIT_HELP)
    p.add_argument("paths", nargs="+", metavar="PATH", help="run directory or raw log file (any mix)")
    p.add_argument("--format", choices=FORMATS, default="html",
                   help="what goes to stdout: html, the findings as terminal text (report.html is the page); "
                        "json, findings.json; md, the report as GitHub Markdown for an issue or a chat (the "
                        "files are written in every format; default: html)")
    p.add_argument("--json", action="store_true", help="the same as --format json")
    p.add_argument("--out", metavar="DIR", type=Path,
                   help="directory for report.html and findings.json, created if needed (default: the first "
                        "run directory, else the current directory); --out FILE.md means --md FILE.md with "
                        "the other files beside it")
    p.add_argument("--html", metavar="FILE", type=Path,
                   help="write the page to FILE instead (default: report.html beside findings.json)")
    p.add_argument("--md", metavar="FILE", type=Path,
                   help="write the Markdown report to FILE (default: none; with --format md, stdout)")
    p.add_argument("--set", action="append", default=[], dest="settings", metavar="RULE_ID.FIELD=VALUE",
                   help="change a rule's threshold, e.g. dead-step.min_consecutive_steps=3 (repeatable; "
                        "fields: docs/findings.md; default: none)")
    p.add_argument("--rules-config", type=Path, metavar="FILE.toml",
                   help="thresholds from a TOML file, one table per rule id: [seed-collision] "
                        "min_identical_frac = 0.6; --set wins over it (default: the rules' own thresholds)")
    p.add_argument("--full-read", action="store_true",
                   help="read every line of every rank file (default: a big run's rank files beyond their share "
                        "of a 64 MB read budget are read by window: the head, the latest steps in full, samples "
                        "of the middle; a warning says when)")
    p.set_defaults(run=run)


def run(args) -> int:
    from grpo_doctor.report.rule_settings import rule_configs

    out_dir, html_path, md_path = args.out, args.html, args.md
    fmt = _format(args)
    if out_dir is not None and out_dir.suffix.lower() == ".md" and not out_dir.is_dir():
        if md_path is not None:
            raise UserError(f"--out {out_dir} names a Markdown file and --md {md_path} another",
                            "pass one of them; --out is otherwise the directory for report.html and findings.json")
        out_dir, md_path = out_dir.parent, out_dir
        # findings.json goes beside the Markdown, in a folder nobody named as the output: never over another's.
        refuse_foreign_findings(RunPaths(out_dir).findings_json, [str(p) for p in args.paths])
    if md_path is not None and md_path.is_dir():
        raise UserError(f"--md {md_path} is a directory", f"name the file, e.g. --md {md_path / 'report.md'}")
    if out_dir is not None and out_dir.suffix.lower() in (".html", ".htm") and not out_dir.is_dir():
        # --out once named the page, findings.json beside it: still so for scripts that pass a page name,
        # said on stderr, and never over another report's findings.json.
        if html_path is not None:
            raise UserError(f"--out {out_dir} names a page and --html {html_path} another",
                            "--out is the directory for report.html and findings.json; --html the page alone")
        out_dir, html_path = out_dir.parent, out_dir
        print(f"grpo-doctor: --out {html_path}: --out now names a directory; this spelling means --out {out_dir} "
              f"--html {html_path}", file=sys.stderr)
        refuse_foreign_findings(RunPaths(out_dir).findings_json, [str(p) for p in args.paths])
    configs = rule_configs(args.settings, args.rules_config)
    built = build_report(args.paths, out_dir=out_dir, configs=configs, html_path=html_path, full_read=args.full_read,
                         markdown=fmt == "md" or md_path is not None)
    if md_path is not None:
        write_file(md_path, built.markdown)  # atomically; never over a device (UnwritableFile, one line)
    if fmt == "json":
        print(built.findings.to_json())
    elif fmt == "md" and md_path is None:
        sys.stdout.write(built.markdown)
    else:
        print(format_findings(built.findings))
    if fmt != "json":
        print(f"report: {built.html_path}\nfindings: {built.findings_path}"
              + (f"\nmarkdown: {md_path}" if md_path is not None else ""), file=sys.stderr)
    if built.findings.has_critical:
        return 1
    return 3 if built.findings.nothing_recognised else 0


def _format(args) -> str:
    if args.json and args.format not in ("html", "json"):
        raise UserError(f"--json and --format {args.format} ask for two outputs on stdout",
                        f"pass one: --json is --format json; valid formats: {', '.join(FORMATS)}")
    return "json" if args.json else args.format
