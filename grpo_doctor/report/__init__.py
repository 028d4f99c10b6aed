"""The HTML report: one self-contained file (figures embedded, no network) built from loaded evidence.

Typical use:
    from grpo_doctor.report.render import render_report
    render_report(evidence, findings_file, "runs/job-17/report.html")
"""
