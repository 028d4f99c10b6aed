"""Everything known about a run, gathered from any mix of run directories and raw log files.

A run directory contributes its rank files (via `eventlog.load_run`, each file read by the one
decoder, `decoder.read_rank_file`, in worker processes for a big run: its phase and memory records
go to the tables, not to `run.ranks[rank].records`) and the artifacts of each
node's `grpo-doctor watch` under `supervisor/<host>/` (summary.json, hang-N.json,
signatures.jsonl); a directory with `supervisor/` but no `ranks/` is an uninstrumented watched
run. PyTorch flight-recorder dumps (`fr/`, or any file that starts like one) become `flight_dumps`;
one that cannot be read is a warning. Any other file is read as raw text (torchrun / ms-swift / TRL
output, dmesg) through the signature parsers: binary, empty or huge files are fine, unknown text is no error.

Tables (pandas, only inside analysis/ and report/):
  phases:     rank, host, step, phase, path, begin_t, end_t, duration_s, error  (open phases: end_t NaN)
  steps:      rank, host, step, t, and one column per metric
  errors:     rank, host, step, t, exc_type, message, phase, path
  signature_rows (dicts, not a table: rules walk them): kind, rank, host, source, line_number, text,
              fields (the kind's dict, see logs.kinds), repeats aggregated (signature_rows.py)
  memory:     rank, host, step, t, tag, host_rss_bytes, device, allocated_bytes, reserved_bytes,
              peak_allocated_bytes, inactive_split_bytes, free_bytes, total_bytes, num_alloc_retries,
              host_vms_bytes
  samples:    watch's samples.jsonl: host, kind ("gpu" | "proc"), t, and the sample's fields
  rollouts, rng, completions: rollout_tables.py (hashes stay in `rollout_records`)
Framework metrics (metric_files.py: TRL's trainer_state.json, ms-swift's logging.jsonl, verl's file
logger, W&B exports, TensorBoard event files; console_metrics.py: metric lines printed in any raw log)
add `steps` rows with the framework as source, in metric_names.py's vocabulary; event-log rows have
source "grpo-doctor" and the trainer's own names.
Times (`t`, `begin_t`, `end_t`) are wall seconds on one clock: hosts found skewed (see clock.py)
are shifted to the host of the lowest rank, and `clock_offsets` says by how much.

Typical use:
    ev = load_evidence(["runs/job-17", "node1-stderr.log"])
    print(ev.phases.groupby("rank").duration_s.median())
"""
from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from grpo_doctor.analysis import metric_logs as framework_logs
from grpo_doctor.analysis import rollout_tables
from grpo_doctor.analysis.clock import describe_offsets, host_offsets, shift_times
from grpo_doctor.analysis.column_frames import joined
from grpo_doctor.analysis.console_metrics import read_console_metrics
from grpo_doctor.analysis.hang_reports import combine_hangs
from grpo_doctor.analysis.metric_files import read_metric_files
from grpo_doctor.analysis.probe_evidence import ProbeEvidence, load_probe, probe_files
from grpo_doctor.analysis.signature_rows import SignatureRows, file_signatures
from grpo_doctor.analysis.watch_files import (
    read_fail_slow,
    read_memory_plan,
    read_run_command,
    read_watch_dir,
)
from grpo_doctor.logs.flight_recorder import FlightDump, FlightDumpError, is_flight_dump, read_flight_dump
from grpo_doctor.logs.signatures import Signature
from grpo_doctor.runlog.columns import Column, repeated
from grpo_doctor.runlog.decode import paused_gc
from grpo_doctor.runlog.eventlog import (
    RANK_FILE_GLOB,
    RunDirError,
    regular_files,
    special_file_kind,
)
from grpo_doctor.runlog.lines import lines_of
from grpo_doctor.runlog.parallel_read import read_run
from grpo_doctor.runlog.rank_log import RankLog, RunLog
from grpo_doctor.runlog.window import RUN_BUDGET_BYTES, sampled_files_warning
from grpo_doctor.schema import Error, Header, Rng, Rollout, RunPaths, Step
from grpo_doctor.schema.errors import DoctorError
from grpo_doctor.schema.field_checks import MAX_WORLD_SIZE, within_depth
from grpo_doctor.schema.run_paths import WatchPaths
from grpo_doctor.schema.safe_read import open_regular
from grpo_doctor.schema.slow_rounds import Survey
from grpo_doctor.schema.watch_files import HangReport, WatchSummary

PHASE_COLUMNS = ["rank", "host", "step", "phase", "path", "begin_t", "end_t", "duration_s", "error"]
STEP_COLUMNS = ["rank", "host", "step", "t", "source"]
ERROR_COLUMNS = ["rank", "host", "step", "t", "exc_type", "message", "phase", "path"]
MEMORY_COLUMNS = ["rank", "host", "step", "t", "tag", "host_rss_bytes", "device", "allocated_bytes", "reserved_bytes",
                  "peak_allocated_bytes", "inactive_split_bytes", "free_bytes", "total_bytes", "num_alloc_retries",
                  "host_vms_bytes"]
SAMPLE_COLUMNS = ["host", "kind", "t"]
# watch samples every few seconds: a week of a 64-GPU node is a few million rows; past this, rows are dropped.
MAX_SAMPLE_ROWS = 2_000_000


class EvidenceError(DoctorError):
    """A path given to `load_evidence` cannot be used; carries a hint for the user."""


@dataclass
class Evidence:
    """The loaded run: rank logs, watch artifacts, signatures from logs, and the tables above."""

    paths: list[Path]
    run: RunLog | None = None
    hangs: list[HangReport] = field(default_factory=list)  # every host's hang-N.json, in order
    summaries: dict[str, WatchSummary] = field(default_factory=dict)  # host -> summary.json
    signature_rows: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    phases: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=PHASE_COLUMNS))
    steps: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=STEP_COLUMNS))
    errors: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=ERROR_COLUMNS))
    memory: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=MEMORY_COLUMNS))
    samples: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=SAMPLE_COLUMNS))
    # watch's samples as read, until `samples` is built from them (then emptied: one copy, not two)
    sample_rows: list[dict[str, Any]] = field(default_factory=list, repr=False)
    clock_offsets: dict[str, float] = field(default_factory=dict)  # host -> s ahead of the reference host
    flight_dumps: list[FlightDump] = field(default_factory=list)  # from fr/ and raw dump files
    rollouts: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=rollout_tables.ROLLOUT_COLUMNS))
    rng: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=rollout_tables.RNG_COLUMNS))
    completions: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=rollout_tables.COMPLETION_COLUMNS))
    rollout_records: list[Rollout] = field(default_factory=list)  # completion / prompt hashes, sampled texts
    metric_logs: list[framework_logs.MetricLog] = field(default_factory=list)  # TRL / ms-swift files read
    probe: ProbeEvidence | None = None  # what `grpo-doctor probe` found before training
    memory_plans: dict[str, dict] = field(default_factory=dict)  # host -> watch's plan.json (plan/render.py)
    slow_surveys: list[Survey] = field(default_factory=list)  # every host's fail-slow.json (stack rounds)
    command: tuple[str, ...] = ()  # the launch command run.json records
    launch_env: dict[str, str] = field(default_factory=dict)  # the variables it ran with (NPROC_PER_NODE, ...)

    @property
    def rank_logs(self) -> dict[int, RankLog]:
        """Each rank's log as read (records beside the tables: headers of every attempt, errors, the end)."""
        return self.run.ranks if self.run is not None else {}

    @property
    def world_size(self) -> int | None:
        return self.run.world_size if self.run is not None else None

    @property
    def headers(self) -> dict[int, Header]:
        if self.run is None:
            return {}
        return {rank: log.header for rank, log in sorted(self.run.ranks.items()) if log.header is not None}

    def host_of(self, rank: int | None) -> str | None:
        if rank is None or self.run is None or rank not in self.run.ranks:
            return None
        return self.run.ranks[rank].host

    @property
    def known_ranks(self) -> set[int]:
        """Every rank any source mentions (rank files, world size, watch, signatures), below MAX_WORLD_SIZE
        (a rank number past it is garbage, and `world_size` is bounded by it already)."""
        ranks: set[int] = set()
        if self.run is not None:
            ranks |= set(self.run.ranks)
            if self.run.world_size:
                ranks |= set(range(self.run.world_size))
        for summary in self.summaries.values():
            ranks |= set(summary.ranks)
        ranks |= {row["rank"] for row in self.signature_rows if type(row["rank"]) is int}
        return {r for r in ranks if 0 <= r < MAX_WORLD_SIZE}


def load_evidence(paths: Sequence[str | Path], read_budget_bytes: int | None = RUN_BUDGET_BYTES) -> Evidence:
    """Everything the paths hold (see the module doc). Rank files beyond their share of the read
    budget are read by window (runlog/window.py), said in a warning; None reads every line."""
    if not paths:
        raise EvidenceError("no path given", "pass a run directory, or log files of a run that was not instrumented")
    ev = Evidence(paths=[Path(p) for p in paths])
    rank_sources: list[Path] = []
    for path in ev.paths:
        mode = _mode(path)
        if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):  # never opened: a FIFO would block, a device not end
            ev.warnings.append(f"{path}: {special_file_kind(mode)}, not a log file or run directory; skipped")
            continue
        if probe_files(path) and (path.is_file() or path.name == "probe"):
            continue  # read by load_probe below
        if path.is_file():
            if path.name.startswith("rank-") and path.suffix == ".jsonl":
                rank_sources.append(path)
            else:
                _add_log_file_or_warn(ev, path)
            continue
        paths_in = RunPaths(path)
        has_ranks, ranks_unreadable = _has_rank_files(ev, paths_in.ranks)
        has_supervisor = paths_in.supervisor.is_dir()
        has_fr = _load_flight_dumps(ev, paths_in.flight_recorder)
        if has_ranks:
            rank_sources.append(path)
        if has_supervisor:
            _load_supervisor(ev, paths_in.supervisor)
        if paths_in.run_json.is_file() and not ev.command:
            ev.command, ev.launch_env = read_run_command(paths_in.run_json, ev.warnings)
        if not has_ranks and not has_supervisor and not has_fr and not ranks_unreadable and not probe_files(path):
            names = _names_in(ev, path)
            if names is None:
                continue
            files = regular_files([path / n for n in names if not (path / n).is_dir()], ev.warnings)
            files += framework_logs.find_metric_logs(path)
            if not files:
                raise EvidenceError(f"{path} holds no rank files, no supervisor/ and no log files",
                                    "pass a run directory written by grpo-doctor (not its parent), or log files")
            for file in files:
                _add_log_file_or_warn(ev, file)
    # One pause over records and rows (millions on a big run): between two, the collector would walk them all.
    with paused_gc():
        if rank_sources:
            try:
                ev.run = read_run(rank_sources, run_budget_bytes=read_budget_bytes)
            except RunDirError as exc:
                raise EvidenceError(str(exc), exc.hint) from None
            ev.warnings += ev.run.warnings + sampled_files_warning(ev.run)
        _build_tables(ev)
    ev.hangs = combine_hangs(ev.hangs)  # one report per hang however many hosts' watches looked at it
    ev.probe = load_probe(ev.paths, ev.warnings)
    return ev


def _mode(path: Path) -> int:
    try:
        return os.stat(path).st_mode
    except FileNotFoundError:
        raise EvidenceError(f"{path} does not exist", "check the path; run directories are printed at start-up") from None
    except OSError as exc:  # a path component that is a file, a loop of links, no permission to look
        raise EvidenceError(f"{path} cannot be read ({exc.strerror})", "check the path and its permissions") from None


def _names_in(ev: Evidence, directory: Path) -> list[str] | None:
    """The directory's entries, sorted; None (and a warning) where it cannot be listed."""
    try:
        return sorted(os.listdir(directory))
    except OSError as exc:
        ev.warnings.append(f"{directory}: cannot be read ({exc.strerror}); nothing in it was checked")
        return None


def _has_rank_files(ev: Evidence, ranks_dir: Path) -> tuple[bool, bool]:
    """(whether ranks/ holds rank files, whether a ranks/ was there but could not be read)."""
    if not ranks_dir.is_dir():
        if os.path.lexists(ranks_dir):
            ev.warnings.append(f"{ranks_dir}: cannot be read (not a directory); the run's rank records were not checked")
            return False, True
        return False, False
    try:
        return any(RANK_FILE_GLOB.match(name) for name in os.listdir(ranks_dir)), False
    except OSError as exc:
        ev.warnings.append(f"{ranks_dir}: cannot be read ({exc.strerror}); the run's rank records were not checked")
        return False, True


def _add_log_file_or_warn(ev: Evidence, path: Path) -> None:
    """`_add_log_file`, a file that cannot be read (permissions, an I/O error) a warning."""
    try:
        _add_log_file(ev, path)
    except OSError as exc:
        ev.warnings.append(f"{path}: cannot be read ({exc.strerror or exc}); it was not checked")


def _add_log_file(ev: Evidence, path: Path) -> None:
    """A raw file: a flight-recorder dump (told by its first bytes), a metric file (metric_files.py: TRL /
    ms-swift by name, TensorBoard / W&B / verl's file logger by content), else text for the signature
    parsers and for the metric lines printed in it (console_metrics.py)."""
    if is_flight_dump(path):
        _add_flight_dump(ev, path)
        return
    logs = read_metric_files(path)
    if not logs:
        _add_signatures(ev, file_signatures(path), source=str(path), host=None)
        logs = read_console_metrics(path)
    for log in logs:
        ev.metric_logs.append(log)
        ev.warnings += log.warnings


def _load_flight_dumps(ev: Evidence, fr_dir: Path) -> bool:
    """Every file in fr/ is meant to be a dump (torch writes <prefix><rank>): one that is not becomes a warning."""
    names = _names_in(ev, fr_dir) if fr_dir.is_dir() else []
    files = regular_files([fr_dir / n for n in names or () if not (fr_dir / n).is_dir()], ev.warnings)
    for file in files:
        _add_flight_dump(ev, file)
    return bool(files)


def _add_flight_dump(ev: Evidence, path: Path) -> None:
    try:
        dump = read_flight_dump(path)
    except FlightDumpError as exc:
        ev.warnings.append(f"{exc}; left out")
        return
    if dump.rank is None:  # torch's writer appends the rank; without it the dump cannot be lined up
        ev.warnings.append(f"{path}: flight-recorder dump whose name does not end in its rank; not matched")
    ev.flight_dumps.append(dump)


def _load_supervisor(ev: Evidence, supervisor: Path) -> None:
    for host_name in _names_in(ev, supervisor) or ():
        host_dir = supervisor / host_name
        if not host_dir.is_dir():
            continue
        host = host_dir.name
        names = _names_in(ev, host_dir)
        if names is None:
            continue
        files = {p.name: p for p in regular_files([host_dir / n for n in names if not (host_dir / n).is_dir()],
                                                    ev.warnings)}
        watch = WatchPaths(host_dir)
        summary, hangs = read_watch_dir(watch, files, ev.warnings)
        if summary is not None:
            ev.summaries[host] = summary
        ev.hangs += hangs
        if watch.memory_plan.name in files:
            plan = read_memory_plan(files[watch.memory_plan.name], ev.warnings)
            if plan is not None:
                ev.memory_plans[host] = plan
        if watch.samples.name in files:
            _read_samples(ev, files[watch.samples.name], host)
        if watch.fail_slow.name in files:
            ev.slow_surveys += read_fail_slow(files[watch.fail_slow.name], host, ev.warnings)
        sig_file = files.get(watch.signatures.name)
        # watch keeps up to a few samples per (kind, rank) and may leave output unscanned when the job
        # outran it (summary.json says so): then the saved output is scanned here in full.
        # Without summary.json watch died first: its guardian kept saving the job's output, unscanned since,
        # so the saved output (where there is any) is scanned in full instead.
        saved_output = watch.stdout_log.name in files or watch.stderr_log.name in files
        scanned_live = summary.live_scan_complete if summary is not None else not saved_output
        if sig_file is not None and scanned_live:
            try:
                _add_signatures(ev, _read_signatures(ev, sig_file), source=str(sig_file), host=host)
                continue
            except OSError as exc:
                ev.warnings.append(f"{sig_file}: cannot be read ({exc.strerror}); the saved output is scanned instead")
        elif sig_file is None and summary is not None and summary.live_scan_complete:
            # watch scanned every byte and found nothing before it ended: scanning the saved output again
            # would only find what the job printed while watch ended it (torchrun's SignalException).
            continue
        # watch died before writing its signatures: scan what it saved of the output
        for name in (watch.stdout_log.name, watch.stderr_log.name):
            if name in files:
                try:
                    _add_signatures(ev, file_signatures(files[name]), source=str(files[name]), host=host)
                except OSError as exc:
                    ev.warnings.append(f"{files[name]}: cannot be read ({exc.strerror}); it was not checked")


def _json_lines(ev: Evidence, path: Path) -> Iterable[Any]:
    """Each line's JSON value (bounded lines, runlog/lines.lines_of); unreadable ones counted in one warning."""
    bad = 0
    try:
        for _, line, _ in lines_of(path):
            try:
                yield json.loads(line)
            except (ValueError, RecursionError):
                bad += 1
    except OSError as exc:
        ev.warnings.append(f"{path}: cannot be read ({exc.strerror}); left out")
    if bad:
        ev.warnings.append(f"{path}: skipped {bad} unreadable line(s)")


# The numbers of supervisor/sampler.py's GpuSample and ProcSample, which the plots do arithmetic on.
_SAMPLE_NUMBERS = ("t", "index", "util_pct", "mem_used_bytes", "mem_total_bytes", "power_w", "temp_c", "sm_clock_mhz",
                   "ecc_errors", "nvlink_replay_errors", "nvlink_recovery_errors", "nvlink_crc_errors", "rank", "pid",
                   "rss_bytes", "cpu_pct", "num_threads")


def _read_samples(ev: Evidence, path: Path, host: str) -> None:
    """watch's GPU and process samples; one whose numbers are not numbers counts as unreadable."""
    bad = 0
    for data in _json_lines(ev, path):
        if len(ev.sample_rows) >= MAX_SAMPLE_ROWS:
            ev.warnings.append(f"{path}: more than {MAX_SAMPLE_ROWS} samples; the rest left out")
            return
        if not (isinstance(data, dict) and data.get("kind") in ("gpu", "proc")):
            continue
        if (type(data.get("t")) in (int, float) and within_depth(data, 3)
                and all(type(data.get(name)) in (int, float, type(None)) for name in _SAMPLE_NUMBERS)):
            ev.sample_rows.append({**data, "host": host})
        else:
            bad += 1
    if bad:
        ev.warnings.append(f"{path}: skipped {bad} sample(s) whose numbers are not numbers")


def _read_signatures(ev: Evidence, path: Path) -> Iterable[Signature]:
    """signatures.jsonl as watch writes it; a line of another shape is counted as unreadable. Raises
    OSError here, not while iterating, when the file cannot be opened."""
    open_regular(path).close()  # a FIFO is never opened (schema/safe_read.py)
    return _signatures_in(ev, path)


def _signatures_in(ev: Evidence, path: Path) -> Iterator[Signature]:
    bad = 0
    for data in _json_lines(ev, path):
        if (type(data) is dict and type(data.get("kind")) is str and type(data.get("line_number")) is int
                and type(data.get("rank")) in (int, type(None)) and type(data.get("text", "")) is str
                and type(data.get("fields") or {}) is dict and within_depth(data.get("fields") or {}, 16)):
            yield Signature.from_dict(data)
        else:
            bad += 1
    if bad:
        ev.warnings.append(f"{path}: skipped {bad} line(s) that are no signature")


def _add_signatures(ev: Evidence, signatures: Iterable[Signature], source: str, host: str | None) -> None:
    """Rows for the signatures, repeats aggregated (signature_rows.py)."""
    ev.warnings += SignatureRows(ev.signature_rows).add_all(signatures, source, host)


def _build_tables(ev: Evidence) -> None:
    logs = sorted((ev.run.ranks if ev.run else {}).items())
    ev.phases = _rank_frame(ev, [(rank, log.tabled().phases) for rank, log in logs], PHASE_COLUMNS)
    ev.memory = _rank_frame(ev, [(rank, log.tabled().memory) for rank, log in logs], MEMORY_COLUMNS)
    errors, rng_records = [], []
    for rank, log in logs:
        host = ev.host_of(rank)
        # Phase and memory records are in columns already (decoder.py, rank_tables.RankTables); these kinds are few.
        for rec in log.records:
            if isinstance(rec, Error):
                errors.append([rank, host, rec.step, rec.t, rec.exc_type, rec.message, rec.phase, rec.path])
            elif isinstance(rec, Rollout):
                ev.rollout_records.append(rec)
            elif isinstance(rec, Rng):
                rng_records.append(rec)
    ev.steps = _step_frame(ev, logs).assign(source=rollout_tables.EVENT_LOG_SOURCE)
    ev.rollouts, ev.rng = rollout_tables.rollout_frame(ev.rollout_records), rollout_tables.rng_frame(rng_records)
    ev.errors = pd.DataFrame(errors, columns=ERROR_COLUMNS)
    ev.samples = pd.DataFrame(ev.sample_rows) if ev.sample_rows else pd.DataFrame(columns=SAMPLE_COLUMNS)
    ev.sample_rows = []
    _align_clocks(ev)
    _add_watch_console_metrics(ev)
    # Framework logs join after the clocks are aligned: their rows carry no host and no time.
    log_steps, log_completions = framework_logs.metric_log_frames(ev.metric_logs)
    if not log_steps.empty:
        ev.steps = log_steps if ev.steps.empty else pd.concat([ev.steps, log_steps], ignore_index=True)
    ev.completions = pd.DataFrame(rollout_tables.rollout_samples(ev.rollout_records) + log_completions,
                                  columns=rollout_tables.COMPLETION_COLUMNS)


def _add_watch_console_metrics(ev: Evidence) -> None:
    """The metric lines the job printed, from the output watch saved (supervisor/<host>/stdout.log and
    stderr.log), where the event log holds no step metric and no rollout: a job run under watch without
    grpo-doctor's lines is judged on what it printed, as watch judged it live (supervisor/step_feed.py).
    A job with them prints the same numbers (TRL's dict) that its rank records hold: only the records
    are judged then, so that no finding is made twice."""
    if ev.rollout_records or any(ev.steps[c].notna().any() for c in ev.steps.columns if c not in STEP_COLUMNS):
        return
    read = {log.path for log in ev.metric_logs}
    for path in ev.paths:
        supervisor = RunPaths(path).supervisor
        if not supervisor.is_dir():
            continue
        for host_dir in sorted(supervisor.iterdir()):
            watch = WatchPaths(host_dir)
            for output in (watch.stdout_log, watch.stderr_log):
                if output in read or not output.is_file():
                    continue
                try:
                    ev.metric_logs += read_console_metrics(output)
                except OSError as exc:
                    ev.warnings.append(f"{output}: cannot be read ({exc.strerror or exc}); its metric lines were "
                                       "not checked")


def _rank_frame(ev: Evidence, rank_columns: list[tuple[int, dict[str, Column]]], columns: list[str]) -> pd.DataFrame:
    """One table from every rank's columns (rank_tables.RankTables), with the rank and host of each row in front."""
    parts: dict[str, list[Column]] = {name: [] for name in columns}
    for rank, by_name in rank_columns:
        num_rows = len(next(iter(by_name.values()), ()))
        if not num_rows:
            continue
        parts["rank"].append(repeated(rank, num_rows))
        parts["host"].append(repeated(ev.host_of(rank), num_rows))
        for name in columns[2:]:
            parts[name].append(by_name[name])
    if not parts["rank"]:
        return pd.DataFrame(columns=columns)
    return pd.DataFrame({name: joined(parts[name]) for name in columns}, columns=columns)


def _step_frame(ev: Evidence, logs: list[tuple[int, RankLog]]) -> pd.DataFrame:
    """rank, host, step, t and one column per metric, as pandas builds it from a dict per step.

    From the ranks' step columns where all have the same metrics (a trainer's do); else from one
    dict per Step record, whose columns are the metrics in the order they first occur.
    """
    with_steps = [(rank, log) for rank, log in logs
                  if (steps := log.tabled().steps) is None or len(steps["step"])]
    if not with_steps:
        return pd.DataFrame(columns=STEP_COLUMNS)
    columns = [(rank, log.tabled().steps) for rank, log in with_steps]
    tabled = [(rank, steps) for rank, steps in columns if steps is not None]
    names = {tuple(steps) for _, steps in tabled}
    if len(tabled) == len(columns) and len(names) == 1:
        return _rank_frame(ev, tabled, ["rank", "host", *names.pop()])
    return pd.DataFrame([{"rank": rank, "host": ev.host_of(rank), "step": rec.step, "t": rec.t, **rec.metrics}
                         for rank, log in with_steps for rec in log.records if isinstance(rec, Step)])


def _align_clocks(ev: Evidence) -> None:
    ev.clock_offsets = host_offsets(ev.steps)
    if not ev.clock_offsets:
        return
    reference = ev.steps.loc[ev.steps["rank"].idxmin(), "host"]
    ev.warnings += describe_offsets(ev.clock_offsets, reference)
    ev.phases = shift_times(ev.phases, ev.clock_offsets, ["begin_t", "end_t"])
    for name in ("steps", "errors", "memory", "samples", "rollouts", "rng"):
        setattr(ev, name, shift_times(getattr(ev, name), ev.clock_offsets, ["t"]))
    ev.hangs = [replace(hang, detected_t=hang.detected_t - ev.clock_offsets[hang.host])
                if hang.host in ev.clock_offsets and hang.detected_t is not None else hang for hang in ev.hangs]
