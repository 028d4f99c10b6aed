"""Post-mortem analysis: run directories and raw logs -> tables (pandas) -> rules -> findings.

Typical use:
    from grpo_doctor.analysis.load import load_evidence
    from grpo_doctor.analysis.rules import run_rules
    findings, warnings = run_rules(load_evidence(["runs/job-17", "job.log"]))
"""
