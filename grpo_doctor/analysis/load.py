"""Everything known about a run, gathered from any mix of run directories and raw log files.

A run directory contributes its rank files (via `eventlog.load_run`, each file read by
`rank_tables.read_rank_tables`, in worker processes for a big run: its phase and memory records
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
  signatures: kind, rank, host, source, line_number, text, fields (the kind's dict, see logs.kinds)
  memory:     rank, host, step, t, tag, host_rss_bytes, device, allocated_bytes, reserved_bytes,
              peak_allocated_bytes, inactive_split_bytes, free_bytes, total_bytes
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
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from grpo_doctor.analysis import metric_logs as framework_logs
from grpo_doctor.analysis import rollout_tables
from grpo_doctor.analysis.clock import describe_offsets, host_offsets, shift_times
from grpo_doctor.analysis.columns import Column, joined, repeated
from grpo_doctor.analysis.console_metrics import read_console_metrics
from grpo_doctor.analysis.metric_files import read_metric_files
from grpo_doctor.analysis.parallel_read import read_rank_files
from grpo_doctor.analysis.probe_evidence import ProbeEvidence, load_probe, probe_files
from grpo_doctor.analysis.rank_tables import TabledRankLog
from grpo_doctor.eventlog import RunDirError, RunLog, load_run, paused_gc
from grpo_doctor.logs.flight_recorder import FlightDump, FlightDumpError, is_flight_dump, read_flight_dump
from grpo_doctor.logs.signatures import Signature, scan_file
from grpo_doctor.schema import Error, Header, Rng, Rollout, RunPaths, Step

PHASE_COLUMNS = ["rank", "host", "step", "phase", "path", "begin_t", "end_t", "duration_s", "error"]
STEP_COLUMNS = ["rank", "host", "step", "t", "source"]
ERROR_COLUMNS = ["rank", "host", "step", "t", "exc_type", "message", "phase", "path"]
SIGNATURE_COLUMNS = ["kind", "rank", "host", "source", "line_number", "text", "fields"]
MEMORY_COLUMNS = ["rank", "host", "step", "t", "tag", "host_rss_bytes", "device", "allocated_bytes", "reserved_bytes",
                  "peak_allocated_bytes", "inactive_split_bytes", "free_bytes", "total_bytes"]
SAMPLE_COLUMNS = ["host", "kind", "t"]


class EvidenceError(Exception):
    """A path given to `load_evidence` cannot be used; carries a hint for the user."""

    def __init__(self, message: str, hint: str):
        super().__init__(message)
        self.hint = hint


@dataclass
class Evidence:
    """The loaded run: rank logs, watch artifacts, signatures from logs, and the tables above."""

    paths: list[Path]
    run: RunLog | None = None
    hangs: list[dict[str, Any]] = field(default_factory=list)  # hang-N.json contents, plus "file"
    summaries: dict[str, dict[str, Any]] = field(default_factory=dict)  # host -> summary.json
    signature_rows: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    phases: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=PHASE_COLUMNS))
    steps: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=STEP_COLUMNS))
    errors: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=ERROR_COLUMNS))
    signatures: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=SIGNATURE_COLUMNS))
    memory: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=MEMORY_COLUMNS))
    samples: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=SAMPLE_COLUMNS))
    sample_rows: list[dict[str, Any]] = field(default_factory=list)
    clock_offsets: dict[str, float] = field(default_factory=dict)  # host -> s ahead of the reference host
    flight_dumps: list[FlightDump] = field(default_factory=list)  # from fr/ and raw dump files
    rollouts: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=rollout_tables.ROLLOUT_COLUMNS))
    rng: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=rollout_tables.RNG_COLUMNS))
    completions: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=rollout_tables.COMPLETION_COLUMNS))
    rollout_records: list[Rollout] = field(default_factory=list)  # completion / prompt hashes, sampled texts
    metric_logs: list[framework_logs.MetricLog] = field(default_factory=list)  # TRL / ms-swift files read
    probe: ProbeEvidence | None = None  # what `grpo-doctor probe` found before training

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
        """Every rank any source mentions (rank files, world size, watch, signatures)."""
        ranks: set[int] = set()
        if self.run is not None:
            ranks |= set(self.run.ranks)
            if self.run.world_size:
                ranks |= set(range(self.run.world_size))
        for summary in self.summaries.values():
            ranks |= {int(r) for r in summary.get("ranks", {})}
        ranks |= {int(row["rank"]) for row in self.signature_rows if row["rank"] is not None}
        return ranks


def load_evidence(paths: Sequence[str | Path]) -> Evidence:
    if not paths:
        raise EvidenceError("no path given", "pass a run directory, or log files of a run that was not instrumented")
    ev = Evidence(paths=[Path(p) for p in paths])
    rank_sources: list[Path] = []
    for path in ev.paths:
        if not path.exists():
            raise EvidenceError(f"{path} does not exist", "check the path; run directories are printed at start-up")
        if probe_files(path) and (path.is_file() or path.name == "probe"):
            continue  # read by load_probe below
        if path.is_file():
            if path.name.startswith("rank-") and path.suffix == ".jsonl":
                rank_sources.append(path)
            else:
                _add_log_file(ev, path)
            continue
        paths_in = RunPaths(path)
        has_ranks = paths_in.ranks.is_dir() and any(paths_in.ranks.glob("rank-*.jsonl"))
        has_supervisor = paths_in.supervisor.is_dir()
        has_fr = _load_flight_dumps(ev, paths_in.flight_recorder)
        if has_ranks:
            rank_sources.append(path)
        if has_supervisor:
            _load_supervisor(ev, paths_in.supervisor)
        if not has_ranks and not has_supervisor and not has_fr and not probe_files(path):
            files = sorted(p for p in path.iterdir() if p.is_file()) + framework_logs.find_metric_logs(path)
            if not files:
                raise EvidenceError(f"{path} holds no rank files, no supervisor/ and no log files",
                                    "pass a run directory written by grpo-doctor (not its parent), or log files")
            for file in files:
                _add_log_file(ev, file)
    # One pause over records and rows (millions on a big run): between two, the collector would walk them all.
    with paused_gc():
        if rank_sources:
            try:
                ev.run = load_run(rank_sources, read_files=read_rank_files)
            except RunDirError as exc:
                raise EvidenceError(str(exc), exc.hint) from None
            ev.warnings += ev.run.warnings
        _build_tables(ev)
    ev.probe = load_probe(ev.paths, ev.warnings)
    return ev


def _add_log_file(ev: Evidence, path: Path) -> None:
    """A raw file: a flight-recorder dump (told by its first bytes), a metric file (metric_files.py: TRL /
    ms-swift by name, TensorBoard / W&B / verl's file logger by content), else text for the signature
    parsers and for the metric lines printed in it (console_metrics.py)."""
    if is_flight_dump(path):
        _add_flight_dump(ev, path)
        return
    logs = read_metric_files(path)
    if not logs:
        _add_signatures(ev, scan_file(path), source=str(path), host=None)
        logs = read_console_metrics(path)
    for log in logs:
        ev.metric_logs.append(log)
        ev.warnings += log.warnings


def _load_flight_dumps(ev: Evidence, fr_dir: Path) -> bool:
    """Every file in fr/ is meant to be a dump (torch writes <prefix><rank>): one that is not becomes a warning."""
    files = sorted(p for p in fr_dir.iterdir() if p.is_file()) if fr_dir.is_dir() else []
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
    for host_dir in sorted(p for p in supervisor.iterdir() if p.is_dir()):
        host = host_dir.name
        summary = host_dir / "summary.json"
        if summary.is_file():
            data = _read_json(ev, summary)
            if isinstance(data, dict):
                ev.summaries[host] = data
        for hang_file in sorted(host_dir.glob("hang-*.json"), key=_hang_number):
            data = _read_json(ev, hang_file)
            if isinstance(data, dict):
                ev.hangs.append({**data, "host": data.get("host") or host, "file": str(hang_file)})
        if (host_dir / "samples.jsonl").is_file():
            _read_samples(ev, host_dir / "samples.jsonl", host)
        sig_file = host_dir / "signatures.jsonl"
        # watch keeps up to a few samples per (kind, rank) and may leave output unscanned when the job
        # outran it (summary.json says so): then the saved output is scanned here in full.
        scanned_live = ev.summaries.get(host, {}).get("live_scan_complete", True) is not False
        if sig_file.is_file() and scanned_live:
            _add_signatures(ev, _read_signatures(ev, sig_file), source=str(sig_file), host=host)
        else:  # watch died before writing its signatures: scan what it saved of the output
            for name in ("stdout.log", "stderr.log"):
                if (host_dir / name).is_file():
                    _add_signatures(ev, scan_file(host_dir / name), source=str(host_dir / name), host=host)


def _hang_number(path: Path) -> int:
    digits = path.stem.rpartition("-")[2]
    return int(digits) if digits.isdigit() else 0


def _read_json(ev: Evidence, path: Path) -> Any:
    try:
        return json.loads(path.read_text(errors="replace"))
    except (OSError, ValueError) as exc:
        ev.warnings.append(f"{path}: cannot be read ({exc}); left out")
        return None


def _read_samples(ev: Evidence, path: Path, host: str) -> None:
    bad = 0
    with path.open(errors="replace") as f:
        for line in f:
            try:
                data = json.loads(line)
            except ValueError:
                bad += 1
                continue
            if isinstance(data, dict) and data.get("kind") in ("gpu", "proc") and "t" in data:
                ev.sample_rows.append({**data, "host": host})
    if bad:
        ev.warnings.append(f"{path}: skipped {bad} unreadable line(s)")


def _read_signatures(ev: Evidence, path: Path) -> list[Signature]:
    out, bad = [], 0
    with path.open(errors="replace") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                out.append(Signature.from_dict(json.loads(line)))
            except (ValueError, KeyError, TypeError):
                bad += 1
    if bad:
        ev.warnings.append(f"{path}: skipped {bad} unreadable line(s)")
    return out


def _add_signatures(ev: Evidence, signatures: list[Signature], source: str, host: str | None) -> None:
    for sig in signatures:
        ev.signature_rows.append({"kind": sig.kind, "rank": sig.rank, "host": host, "source": source,
                                  "line_number": sig.line_number, "text": sig.text, "fields": sig.fields})


def _build_tables(ev: Evidence) -> None:
    logs = sorted((ev.run.ranks if ev.run else {}).items())
    ev.phases = _rank_frame(ev, [(rank, log.phase_columns) for rank, log in logs], PHASE_COLUMNS)
    ev.memory = _rank_frame(ev, [(rank, log.memory_columns) for rank, log in logs], MEMORY_COLUMNS)
    errors, rng_records = [], []
    for rank, log in logs:
        host = ev.host_of(rank)
        # Phase and memory records are in columns already (rank_tables.py); these kinds are few.
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
    ev.signatures = pd.DataFrame(ev.signature_rows, columns=SIGNATURE_COLUMNS)
    ev.samples = pd.DataFrame(ev.sample_rows) if ev.sample_rows else pd.DataFrame(columns=SAMPLE_COLUMNS)
    _align_clocks(ev)
    # Framework logs join after the clocks are aligned: their rows carry no host and no time.
    log_steps, log_completions = framework_logs.metric_log_frames(ev.metric_logs)
    if not log_steps.empty:
        ev.steps = log_steps if ev.steps.empty else pd.concat([ev.steps, log_steps], ignore_index=True)
    ev.completions = pd.DataFrame(rollout_tables.rollout_samples(ev.rollout_records) + log_completions,
                                  columns=rollout_tables.COMPLETION_COLUMNS)


def _rank_frame(ev: Evidence, rank_columns: list[tuple[int, dict[str, Column]]], columns: list[str]) -> pd.DataFrame:
    """One table from every rank's columns (rank_tables.py), with the rank and host of each row in front."""
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


def _step_frame(ev: Evidence, logs: list[tuple[int, TabledRankLog]]) -> pd.DataFrame:
    """rank, host, step, t and one column per metric, as pandas builds it from a dict per step.

    From the ranks' step columns where all have the same metrics (a trainer's do); else from one
    dict per Step record, whose columns are the metrics in the order they first occur.
    """
    with_steps = [(rank, log) for rank, log in logs if log.step_columns is None or len(log.step_columns["step"])]
    if not with_steps:
        return pd.DataFrame(columns=STEP_COLUMNS)
    names = {tuple(log.step_columns) if log.step_columns is not None else None for _, log in with_steps}
    if len(names) == 1 and None not in names:
        return _rank_frame(ev, [(rank, log.step_columns) for rank, log in with_steps], ["rank", "host", *names.pop()])
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
    for hang in ev.hangs:
        if hang.get("host") in ev.clock_offsets and isinstance(hang.get("detected_t"), (int, float)):
            hang["detected_t"] -= ev.clock_offsets[hang["host"]]
