"""Never silent: what each input contributed, and which areas no evidence reached.

"No findings" is only worth something next to what was read. For every path given to `report`
this says what was recognised in it (rank records, watch artifacts, failure messages by kind,
metric rows by format, flight-recorder dumps, probe results), how many lines were read and how
many matched nothing; and, for the run as a whole, which of the areas grpo-doctor judges no
input reached (`not_checked`):

  crashes   rank records, watch's summary, or a log in which something was recognised
  hangs     rank records with phases, watch (summaries, hang reports), flight-recorder dumps,
            or NCCL watchdog / collective messages or an NCCL RAS report in a log
  memory    memory snapshots, watch's GPU samples, or a log in which failure messages were recognised
            (an OOM message in it would have been found)
  rollouts  rollout records or training metrics (rank step records, framework metric logs)
  network   probe results, or rank headers from more than one host to compare

A raw log in which no failure, record or step metric was recognised but lines grpo-doctor knows were (NCCL's
INFO lines, warnings, progress bars, launchers' start-up lines: logs/known_lines.py) says "known lines: ...";
one in which nothing at all was recognised is named in one warning line.

Typical use:
    inputs, not_checked = describe_coverage(evidence)
    FindingsFile(..., inputs=inputs, not_checked=not_checked)
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_doctor.analysis.load import Evidence
from grpo_doctor.logs.known_lines import KnownLines
from grpo_doctor.schema import RunPaths
from grpo_doctor.schema.safe_read import open_regular

AREAS = ("crashes", "hangs", "memory", "rollouts", "network")
_HANG_KINDS = ("nccl-timeout", "nccl-watchdog-status", "nccl-watchdog-stuck", "nccl-error", "rendezvous-failure",
               "nccl-ras")
_COUNT_CHUNK_BYTES = 1 << 20


@dataclass(frozen=True)
class InputSummary:
    """What one path given to the report contributed. `lines_read` and `unmatched_lines` count text
    lines of raw logs (None for run directories); `rows_used` counts rank records, metric rows and
    signatures taken from it."""

    path: str
    recognised: tuple[str, ...] = ()
    lines_read: int | None = None
    rows_used: int = 0
    unmatched_lines: int | None = None
    areas: tuple[str, ...] = field(default=(), compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "recognised": list(self.recognised), "lines_read": self.lines_read,
                "rows_used": self.rows_used, "unmatched_lines": self.unmatched_lines, "areas": list(self.areas)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> InputSummary:
        return cls(path=str(data.get("path", "")), recognised=tuple(data.get("recognised") or ()),
                   lines_read=data.get("lines_read"), rows_used=int(data.get("rows_used") or 0),
                   unmatched_lines=data.get("unmatched_lines"), areas=tuple(data.get("areas") or ()))


def describe_coverage(run: Evidence) -> tuple[list[InputSummary], list[str], list[str]]:
    """(one InputSummary per input path, the areas no input reached, warnings for inputs in which
    nothing was recognised)."""
    inputs = [_describe_path(run, Path(p)) for p in run.paths]
    reached = {area for summary in inputs for area in summary.areas}
    warnings = [_unrecognised_warning(s) for s in inputs if not s.recognised]
    return inputs, [a for a in AREAS if a not in reached], warnings


def _unrecognised_warning(summary: InputSummary) -> str:
    if summary.lines_read is None and not Path(summary.path).is_dir():
        return f"{summary.path}: cannot be read, or is no regular file (a FIFO, a device); nothing in it was checked"
    if summary.lines_read == 0:
        return f"{summary.path}: empty; nothing in it was checked"
    lines = f" ({summary.lines_read} lines)" if summary.lines_read is not None else ""
    return (f"{summary.path}{lines}: nothing recognised in it (no grpo-doctor records, no failure message and no "
            "training metrics grpo-doctor knows); it was not checked")


def _under(source: str | Path | None, path: Path) -> bool:
    if source is None:
        return False
    source = Path(source)
    return source == path or path in source.parents


def _describe_path(run: Evidence, path: Path) -> InputSummary:
    recognised: list[str] = []
    areas: set[str] = set()
    rows = 0
    ranks = [log for log in run.rank_logs.values() if _under(log.path, path)]
    if ranks:
        num_records = sum(len(log.records) for log in ranks)
        num_phases = int(run.phases["rank"].isin([log.rank for log in ranks]).sum()) if not run.phases.empty else 0
        num_memory = int(run.memory["rank"].isin([log.rank for log in ranks]).sum()) if not run.memory.empty else 0
        recognised.append(f"rank records of {len(ranks)} rank(s)")
        rows += num_records + num_phases + num_memory
        areas.add("crashes")
        if num_phases:
            areas.add("hangs")
        if num_memory:
            areas.add("memory")
        ranks_set = {log.rank for log in ranks}
        if any(r.rank in ranks_set for r in run.rollout_records) or _has_steps(run, ranks_set):
            areas.add("rollouts")
        if len({log.host for log in ranks if log.host}) > 1:
            areas.add("network")
    supervisor = RunPaths(path).supervisor if path.is_dir() else None
    if supervisor is not None and supervisor.is_dir():
        hosts = sorted(p.name for p in supervisor.iterdir() if p.is_dir())
        recognised.append(f"watch output of host(s) {', '.join(hosts)}")
        areas |= {"crashes", "hangs"}
        if not run.samples.empty and (run.samples["kind"] == "gpu").any():
            areas.add("memory")
    dumps = [d for d in run.flight_dumps if _under(d.path, path)]
    if dumps:
        recognised.append(f"{len(dumps)} flight-recorder dump(s)")
        rows += sum(len(d.entries) for d in dumps)
        areas.add("hangs")
    sig_kinds = Counter(row["kind"] for row in run.signature_rows if _under(row["source"], path))
    sig_lines = sum(str(row["text"]).count("\n") + 1 for row in run.signature_rows if _under(row["source"], path))
    if sig_kinds:
        recognised.append("failure messages: " + ", ".join(f"{k} x{n}" for k, n in sorted(sig_kinds.items())))
        rows += sum(sig_kinds.values())
        areas |= {"crashes", "memory"}  # a training log read through: an OOM message would have been found
        if any(k in _HANG_KINDS for k in sig_kinds):
            areas.add("hangs")
    metric_rows = 0
    for log in run.metric_logs:
        if _under(log.path, path) and (log.steps or log.completions):
            fmt = getattr(log, "format", None) or log.source
            recognised.append(f"{len(log.steps)} metric row(s) ({fmt})")
            metric_rows += len(log.steps) + len(log.completions)
            areas.add("rollouts")
        elif _under(log.path, path) and log.unjudged_rows:
            recognised.append(f"{log.unjudged_rows} step metric row(s) of training without LLM rollouts "
                              "(episodes: not judged)")
            metric_rows += log.unjudged_rows
    rows += metric_rows
    if run.probe is not None and any(_under(f, path) for f, _ in [*run.probe.nodes, *run.probe.collectives]):
        recognised.append("probe results")
        areas.add("network")
    lines_read = unmatched = None
    if not path.is_dir() and not dumps and not ranks:
        known = KnownLines()
        lines_read = _count_lines(path, known if not recognised else None)
        unmatched = None if lines_read is None else max(0, lines_read - sig_lines - metric_rows)
        if known.families:  # nothing failing and no step metric, but lines grpo-doctor knows: read, not unknown
            recognised.append(known.describe())
            areas |= {"crashes", "memory"}  # read through: a crash or OOM message in it would have been found
    return InputSummary(path=str(path), recognised=tuple(recognised), lines_read=lines_read, rows_used=rows,
                        unmatched_lines=unmatched, areas=tuple(a for a in AREAS if a in areas))


def _has_steps(run: Evidence, ranks: set[int]) -> bool:
    if run.steps.empty or "rank" not in run.steps:
        return False
    return bool(run.steps["rank"].isin(list(ranks)).any())


def _count_lines(path: Path, known: KnownLines | None = None) -> int | None:
    """Text lines in a regular file (a last line without a newline counts), read in bounded chunks, and the
    known lines among them into `known` (logs/known_lines.py); None for a file that cannot be read (or is no
    regular file: a FIFO must not be opened)."""
    count, last = 0, b"\n"
    try:
        with open_regular(path) as f:  # UnreadableFile (an OSError) for a FIFO: never opened
            while chunk := f.read(_COUNT_CHUNK_BYTES):
                count += chunk.count(b"\n")
                last = chunk[-1:]
                if known is not None:
                    known.add(chunk)
    except OSError:
        return None
    return count + (last != b"\n")
