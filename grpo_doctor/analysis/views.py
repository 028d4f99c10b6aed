"""The views of a loaded run that a rule may read, each named for what it holds, and the run as one rule sees it.

`Evidence` (load.py) holds everything one run left behind; a rule needs a few parts of it. Each rule
declares them (`READS`, a set of `View`s) and `run_rules` hands it a `RuleEvidence` that serves those
views only: a read of an undeclared one fails the rule (a warning naming the rule and the view), so a
declaration cannot drift from what the rule reads, and a reader sees at the top of a rule what it
depends on (the rules that reach around the tables to the raw rank logs, directly or through a helper, say
`View.RANK_LOGS`).

Typed: `RuleEvidence` declares each attribute a view serves with its type, and has no catch-all for
the type checker, so mypy knows what `run.phases` or `run.hangs` is and rejects a read of anything
else (`run.warnings`, a misspelt name). `RunView` (a rule's view, or the whole `Evidence`) is the one
name for what rules and the helpers they hand the run to receive.

Typical use:
    READS = {View.RANK_TABLES, View.RANKS}           # in a rule module
    def check(run: RunView, cfg: Config) -> Iterator[Finding]: ...
    findings = rule.check(RuleEvidence(evidence, rule.READS, "straggler"), cfg)
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from enum import Enum
from typing import TYPE_CHECKING, Any, Generic, TypeVar, Union, overload

if TYPE_CHECKING:
    import pandas as pd

    from grpo_doctor.analysis.load import Evidence
    from grpo_doctor.analysis.metric_logs import MetricLog
    from grpo_doctor.analysis.probe_evidence import ProbeEvidence
    from grpo_doctor.logs.flight_recorder import FlightDump
    from grpo_doctor.runlog.rank_log import RankLog
    from grpo_doctor.schema import Header, Rollout
    from grpo_doctor.schema.slow_rounds import Survey
    from grpo_doctor.schema.watch_files import HangReport, WatchSummary

T = TypeVar("T")


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


class _Served(Generic[T]):
    """One attribute of the evidence as a rule's view serves it: typed for mypy, its view checked when read."""

    __slots__ = ("name",)

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, run: None, owner: type) -> _Served[T]: ...
    @overload
    def __get__(self, run: RuleEvidence, owner: type) -> T: ...
    def __get__(self, run: RuleEvidence | None, owner: type) -> T | _Served[T]:
        return self if run is None else run._served(self.name)


class RuleEvidence:
    """The evidence as one rule sees it: a read of a declared view's attribute passes through to the
    `Evidence`; a read of any other raises UndeclaredView naming the rule, the attribute and its view."""

    __slots__ = ("_evidence", "_reads", "_rule")

    # View.RANK_TABLES
    phases: _Served[pd.DataFrame] = _Served()
    steps: _Served[pd.DataFrame] = _Served()
    errors: _Served[pd.DataFrame] = _Served()
    memory: _Served[pd.DataFrame] = _Served()
    clock_offsets: _Served[dict[str, float]] = _Served()
    # View.ROLLOUT_TABLES
    rollouts: _Served[pd.DataFrame] = _Served()
    rng: _Served[pd.DataFrame] = _Served()
    completions: _Served[pd.DataFrame] = _Served()
    rollout_records: _Served[list[Rollout]] = _Served()
    # View.RANKS
    headers: _Served[dict[int, Header]] = _Served()
    host_of: _Served[Callable[[int | None], str | None]] = _Served()
    known_ranks: _Served[set[int]] = _Served()
    world_size: _Served[int | None] = _Served()
    # View.RANK_LOGS
    rank_logs: _Served[dict[int, RankLog]] = _Served()
    # View.LOG_SIGNATURES
    signature_rows: _Served[list[dict[str, Any]]] = _Served()
    # View.WATCH_ARTIFACTS
    hangs: _Served[list[HangReport]] = _Served()
    summaries: _Served[dict[str, WatchSummary]] = _Served()
    samples: _Served[pd.DataFrame] = _Served()
    memory_plans: _Served[dict[str, dict[str, Any]]] = _Served()
    slow_surveys: _Served[list[Survey]] = _Served()
    # View.FLIGHT_RECORDER
    flight_dumps: _Served[list[FlightDump]] = _Served()
    # View.FRAMEWORK_METRICS
    metric_logs: _Served[list[MetricLog]] = _Served()
    # View.PROBE_RESULTS
    probe: _Served[ProbeEvidence | None] = _Served()
    # View.LAUNCH_COMMAND
    command: _Served[tuple[str, ...]] = _Served()
    launch_env: _Served[dict[str, str]] = _Served()

    def __init__(self, evidence: Evidence, reads: Iterable[View], rule: str) -> None:
        self._evidence = evidence
        self._reads = frozenset(reads)
        self._rule = rule

    def _served(self, name: str) -> Any:
        view = VIEW_OF[name]
        if view not in self._reads:
            raise UndeclaredView(f"rule {self._rule} reads `{name}` (view {view.name}), which its READS does not declare")
        try:
            return getattr(self._evidence, name)
        except AttributeError as exc:  # from inside a property: raised as is, Python would ask __getattr__ instead
            raise RuntimeError(f"reading `{name}` failed: {exc}") from exc

    if not TYPE_CHECKING:  # hidden from mypy, which then rejects a read of a name no view serves
        def __getattr__(self, name: str) -> Any:
            if name.startswith("_"):  # the slots before __init__ set them (copy, pickle), and dunder lookups
                raise AttributeError(name)
            raise UndeclaredView(f"rule {self._rule} reads `{name}` (no view a rule may read), which its READS "
                                 "does not declare")


# What a rule receives (its RuleEvidence), or the whole run where other code calls a rule's helpers.
RunView = Union[RuleEvidence, "Evidence"]


def loaded_run(run: RunView) -> Evidence:
    """The object behind a rule's view of the run (the `Evidence` itself): the key of caches kept per run,
    which every rule's view then shares (parallel_layout.py's layout)."""
    return run._evidence if isinstance(run, RuleEvidence) else run
