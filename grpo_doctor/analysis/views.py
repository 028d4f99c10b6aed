"""The views of a loaded run that a rule may read, each named for what it holds, and the run as one rule sees it.

`Evidence` (load.py) holds everything one run left behind; a rule needs a few parts of it. Each rule
declares them (`READS`, a set of `View`s) and `run_rules` hands it a `RuleEvidence` that serves those
views only: a read of an undeclared one fails the rule (a warning naming the rule and the view), so a
declaration cannot drift from what the rule reads, and a reader sees at the top of a rule what it
depends on (the rules that reach around the tables to the raw rank logs, directly or through a helper, say
`View.RANK_LOGS`).

Typical use:
    READS = {View.RANK_TABLES, View.RANKS}           # in a rule module
    findings = rule.check(RuleEvidence(evidence, rule.READS, "straggler"), cfg)
"""
from __future__ import annotations

from collections.abc import Iterable
from enum import Enum
from typing import Any


class View(Enum):
    """A part of the evidence; its value lists the `Evidence` attributes that serve it."""

    RANK_TABLES = ("phases", "steps", "errors", "memory", "clock_offsets")  # tables from rank records (+ metrics)
    ROLLOUT_TABLES = ("rollouts", "rng", "completions", "rollout_records")  # rollout records and sampled texts
    RANKS = ("headers", "host_of", "known_ranks", "world_size")  # who ran where: rank headers, hosts, world
    RANK_LOGS = ("rank_logs",)  # the rank logs as read, around the tables (every attempt's header, errors, the end)
    LOG_SIGNATURES = ("signature_rows",)  # what the log parsers recognised in raw logs and watch's saved output
    WATCH_ARTIFACTS = ("hangs", "summaries", "samples", "memory_plans", "slow_surveys")  # grpo-doctor watch's files
    FLIGHT_RECORDER = ("flight_dumps",)  # PyTorch flight-recorder dumps
    FRAMEWORK_METRICS = ("metric_logs",)  # TRL / ms-swift / verl / W&B / TensorBoard files and printed metric lines
    PROBE_RESULTS = ("probe",)  # what `grpo-doctor probe` found before training
    LAUNCH_COMMAND = ("command", "launch_env")  # run.json's command and its environment


VIEW_OF: dict[str, View] = {name: view for view in View for name in view.value}


class UndeclaredView(LookupError):
    """A rule read a part of the evidence its READS does not name. Not an AttributeError: `hasattr` or
    `getattr(run, name, default)` on an undeclared view would then answer quietly instead of failing the rule."""


class RuleEvidence:
    """The evidence as one rule sees it: attribute reads of the declared views pass through to the
    `Evidence`; any other read raises UndeclaredView naming the rule, the attribute and its view."""

    __slots__ = ("_evidence", "_reads", "_rule")

    def __init__(self, evidence: Any, reads: Iterable[View], rule: str) -> None:
        self._evidence = evidence
        self._reads = frozenset(reads)
        self._rule = rule

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # the slots before __init__ set them (copy, pickle), and dunder lookups
            raise AttributeError(name)
        view = VIEW_OF.get(name)
        if view is None or view not in self._reads:
            said = f"view {view.name}" if view is not None else "no view a rule may read"
            raise UndeclaredView(f"rule {self._rule} reads `{name}` ({said}), which its READS does not declare")
        return getattr(self._evidence, name)


def loaded_run(run: Any) -> Any:
    """The object behind a rule's view of the run (the `Evidence` itself): the key of caches kept per run,
    which every rule's view then shares (parallel_layout.py's layout)."""
    return run._evidence if isinstance(run, RuleEvidence) else run
