"""The rules, listed explicitly, and the loop that runs them over loaded evidence.

Each rule is one module here with `ID`, `READS` (the views of the evidence it reads, analysis/views.py),
a frozen `Config` (documented thresholds), `HINTS` (its remedy text) and `check(run, cfg) ->
Iterator[Finding]`, whose `run` serves the declared views only. Adding a rule: one new file, one
line in `RULES`, and its test in tests/analysis/ (a test checks all three).

Typical use:
    findings, warnings = run_rules(load_evidence(["runs/job-17"]))
    findings, warnings = run_rules(evidence, configs=rule_configs(["dead-step.min_consecutive_steps=3"]))
"""
from __future__ import annotations

from types import ModuleType
from typing import Any

from grpo_doctor.analysis.findings import Finding
from grpo_doctor.analysis.incidents import link_incidents
from grpo_doctor.analysis.load import Evidence
from grpo_doctor.analysis.rules import (
    collective_mismatch,
    config_mismatch,
    constant_reward,
    cuda_oom,
    dead_step,
    entropy_collapse,
    fail_slow,
    gpu_fault,
    hang,
    host_oom,
    length_collapse,
    memory_growth,
    nan_loss,
    nccl_error,
    nccl_ras,
    nccl_timeout,
    rank_crash,
    rendezvous_failure,
    seed_collision,
    stale_rollout_weights,
    straggler,
    version_mismatch,
    vllm_memory,
    zero_kl,
    zero_std_groups,
)
from grpo_doctor.analysis.views import RuleEvidence

RULES: list[ModuleType] = [hang, rank_crash, cuda_oom, nccl_timeout, config_mismatch, version_mismatch, straggler,
                           fail_slow,  # a rank outside the others' stack in most of watch's rounds (issue 24)
                           nccl_error, rendezvous_failure, host_oom, vllm_memory, collective_mismatch,
                           memory_growth,  # memory creeping toward an OOM, with its projection (issue 25)
                           gpu_fault,  # machine faults: Xid events, ECC, NVLink (issue 24)
                           nccl_ras,  # NCCL's RAS report: the lost ranks' node, GPU, pid (issue 24)
                           # degenerate rollouts (issue 5)
                           seed_collision, nan_loss, dead_step, constant_reward, zero_std_groups, zero_kl,
                           length_collapse, entropy_collapse, stale_rollout_weights]


def rule_name(rule: ModuleType) -> str:
    return rule.__name__.rpartition(".")[2]


def run_rules(evidence: Evidence, rules: list[ModuleType] | None = None,
              configs: dict[str, Any] | None = None) -> tuple[list[Finding], list[str]]:
    """Every rule's findings, grouped into incidents (analysis/incidents.py: each root cause first, its
    consequences after it, incidents most severe first), and the warnings: the evidence's own, and one per
    rule that failed (a broken rule must not hide what the others found; a read of a view the rule does not
    declare is such a failure). `configs` ({rule id: Config}, from report/rule_settings.py) replaces the
    default thresholds of the rules it names."""
    findings: list[Finding] = []
    warnings = list(evidence.warnings)
    for rule in RULES if rules is None else rules:
        try:
            cfg = configs[rule.ID] if configs and rule.ID in configs else rule.Config()
            findings.extend(rule.check(RuleEvidence(evidence, rule.READS, rule_name(rule)), cfg))
        except Exception as exc:  # noqa: BLE001 - reported, never fatal
            warnings.append(f"rule {rule_name(rule)} failed ({type(exc).__name__}: {exc}); its findings are missing")
    return link_incidents(findings), warnings
