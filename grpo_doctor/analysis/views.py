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
    """A part of the evidence, what it holds; `RuleEvidence` below declares the attributes that serve each."""

    RANK_TABLES = "tables from rank records (+ metrics)"
    ROLLOUT_TABLES = "rollout records and sampled texts"
    RANKS = "who ran where: rank headers, hosts, world"
    RANK_LOGS = "the rank logs as read, around the tables (every attempt's header, errors, the end)"
    LOG_SIGNATURES = "what the log parsers recognised in raw logs and watch's saved output"
    WATCH_ARTIFACTS = "grpo-doctor watch's files"
    FLIGHT_RECORDER = "PyTorch flight-recorder dumps"
    FRAMEWORK_METRICS = "TRL / ms-swift / verl / W&B / TensorBoard files and printed metric lines"
    PROBE_RESULTS = "what `grpo-doctor probe` found before training"
    LAUNCH_COMMAND = "run.json's command and its environment"


class UndeclaredView(LookupError):
    """A rule read a part of the evidence its READS does not name. Not an AttributeError: `hasattr` or
    `getattr(run, name, default)` on an undeclared view would then answer quietly instead of failing the rule."""


class _Served(Generic[T]):
    """One attribute of the evidence as a rule's view serves it: typed for mypy, its view checked when read."""

    __slots__ = ("name", "view")

    def __init__(self, view: View) -> None:
        self.view = view

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, run: None, owner: type) -> _Served[T]: ...
    @overload
    def __get__(self, run: RuleEvidence, owner: type) -> T: ...
    def __get__(self, run: RuleEvidence | None, owner: type) -> T | _Served[T]:
        return self if run is None else run._served(self.name, self.view)


class RuleEvidence:
    """The evidence as one rule sees it: a read of a declared view's attribute passes through to the
    `Evidence`; a read of any other raises UndeclaredView naming the rule, the attribute and its view."""

    __slots__ = ("_evidence", "_reads", "_rule")

    phases: _Served[pd.DataFrame] = _Served(View.RANK_TABLES)
    steps: _Served[pd.DataFrame] = _Served(View.RANK_TABLES)
    errors: _Served[pd.DataFrame] = _Served(View.RANK_TABLES)
    memory: _Served[pd.DataFrame] = _Served(View.RANK_TABLES)
    clock_offsets: _Served[dict[str, float]] = _Served(View.RANK_TABLES)
    rollouts: _Served[pd.DataFrame] = _Served(View.ROLLOUT_TABLES)
    rng: _Served[pd.DataFrame] = _Served(View.ROLLOUT_TABLES)
    completions: _Served[pd.DataFrame] = _Served(View.ROLLOUT_TABLES)
    rollout_records: _Served[list[Rollout]] = _Served(View.ROLLOUT_TABLES)
    headers: _Served[dict[int, Header]] = _Served(View.RANKS)
    host_of: _Served[Callable[[int | None], str | None]] = _Served(View.RANKS)
    known_ranks: _Served[set[int]] = _Served(View.RANKS)
    world_size: _Served[int | None] = _Served(View.RANKS)
    rank_logs: _Served[dict[int, RankLog]] = _Served(View.RANK_LOGS)
    signature_rows: _Served[list[dict[str, Any]]] = _Served(View.LOG_SIGNATURES)
    hangs: _Served[list[HangReport]] = _Served(View.WATCH_ARTIFACTS)
    summaries: _Served[dict[str, WatchSummary]] = _Served(View.WATCH_ARTIFACTS)
    samples: _Served[pd.DataFrame] = _Served(View.WATCH_ARTIFACTS)
    memory_plans: _Served[dict[str, dict[str, Any]]] = _Served(View.WATCH_ARTIFACTS)
    slow_surveys: _Served[list[Survey]] = _Served(View.WATCH_ARTIFACTS)
    flight_dumps: _Served[list[FlightDump]] = _Served(View.FLIGHT_RECORDER)
    metric_logs: _Served[list[MetricLog]] = _Served(View.FRAMEWORK_METRICS)
    probe: _Served[ProbeEvidence | None] = _Served(View.PROBE_RESULTS)
    command: _Served[tuple[str, ...]] = _Served(View.LAUNCH_COMMAND)
    launch_env: _Served[dict[str, str]] = _Served(View.LAUNCH_COMMAND)

    def __init__(self, evidence: Evidence, reads: Iterable[View], rule: str) -> None:
        self._evidence = evidence
        self._reads = frozenset(reads)
        self._rule = rule

    def _served(self, name: str, view: View) -> Any:
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


# Each attribute a rule may read -> its view, as RuleEvidence declares them.
VIEW_OF: dict[str, View] = {name: served.view for name, served in vars(RuleEvidence).items()
                            if isinstance(served, _Served)}

# What a rule receives (its RuleEvidence), or the whole run where other code calls a rule's helpers.
RunView = Union[RuleEvidence, "Evidence"]


def loaded_run(run: RunView) -> Evidence:
    """The object behind a rule's view of the run (the `Evidence` itself): the key of caches kept per run,
    which every rule's view then shares (parallel_layout.py's layout)."""
    return run._evidence if isinstance(run, RuleEvidence) else run
