"""Step metrics from a Weights & Biases run history that a user exported, recognised by its content.

Shapes read:
  wandb-csv   the web app's chart export: "Step","<run> - <metric>","<run> - <metric>__MIN",
              "<run> - <metric>__MAX" (every run drawn in the chart; one metric per chart, so a run's
              metrics usually come in several files: rows of one run and step are merged across files);
              or a history saved as CSV (`api.run(...).history().to_csv(...)`): a `_step` column and one
              column per metric.
  wandb-json  the same history as JSON: a list of records (`to_json(orient="records")`, `scan_history()`),
              one record a line (wandb-history.jsonl of a local run directory), or pandas' default
              column layout ({metric: {row: value}}). Every record has `_step`.
The step is the trainer's where it logged one (`train/global_step`: HF Trainer, OpenRLHF), else W&B's
`_step` (verl logs with step=global step). Names lose HF's and OpenRLHF's train/ prefix; eval/ and
validation metrics, W&B's own columns (_runtime, _timestamp) and __MIN / __MAX columns are left out.
A file with several runs gives one MetricLog per run, its source "<framework> (<run>)".

Typical use:
    logs = read_wandb_export(Path("wandb_export_2025-06-01.csv"), head_text)   # [] when it is no W&B export
"""
from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from grpo_doctor.analysis.console_metrics import parse_value
from grpo_doctor.analysis.metric_logs import MetricLog, add_steps
from grpo_doctor.analysis.metric_names import framework_entry, framework_of, logged_name
from grpo_doctor.schema.safe_read import loads_bounded, open_text, read_text

MAX_EXPORT_BYTES = 512 * 2**20  # a JSON export is read whole, so capped; a CSV is read a row at a time

_STEP_COLUMNS = ("train/global_step", "_step", "Step")


def read_wandb_export(path: Path, head: str) -> list[MetricLog]:
    """The runs in `path` (its first bytes decoded: `head`), or [] when it is no W&B export."""
    first_line = head.split("\n", 1)[0]
    if head.startswith(("[", "{")):
        if '"_step"' not in head:
            return []
        return _logs(path, "wandb-json", _json_runs(path))
    try:
        header = next(csv.reader([first_line.rstrip("\r")]), [])
    except csv.Error:  # text with a stray carriage return: no CSV
        return []
    if "_step" in header or (header[:1] == ["Step"] and any(" - " in c for c in header[1:])):
        try:
            return _logs(path, "wandb-csv", _csv_runs(path))
        except csv.Error as exc:  # a cell over csv's field limit, a NUL byte: the export is damaged
            log = MetricLog(path=path, source="", format="wandb-csv")
            log.warnings.append(f"{path}: a W&B export that cannot be read ({exc}); left out")
            return [log]
    return []


def _logs(path: Path, fmt: str, runs: dict[str, list[dict[str, Any]]]) -> list[MetricLog]:
    logs = []
    for run, rows in runs.items():
        framework = framework_of({key for row in rows for key in row})
        log = MetricLog(path=path, source=f"{framework} ({run})" if len(runs) > 1 else framework, format=fmt)
        add_steps(log, [framework_entry(row, framework) for row in rows])
        logs.append(log)
    return logs


def _csv_runs(path: Path) -> dict[str, list[dict[str, Any]]]:
    with open_text(path, newline="") as f:  # never a FIFO or a device (schema/safe_read.py)
        table = list(csv.DictReader(f))
    runs: dict[str, dict[int, dict[str, Any]]] = {}
    for record in table:
        if "_step" in record:  # one run's history
            _add_record(runs, "", record)
            continue
        step = record.get("Step")
        for column, cell in record.items():  # a chart export: "<run> - <metric>" columns
            run, sep, metric = (column or "").rpartition(" - ")
            if sep and not metric.endswith(("__MIN", "__MAX")) and cell not in ("", None):
                _add_record(runs, run, {"Step": step, metric: cell})
    return {run: list(rows.values()) for run, rows in runs.items()}


def _json_runs(path: Path) -> dict[str, list[dict[str, Any]]]:
    text = read_text(path, cap=MAX_EXPORT_BYTES, errors="replace", what="a W&B export")
    try:
        data = loads_bounded(text)
        records = data if isinstance(data, list) else _columns_to_records(data)
    except ValueError:  # one record a line
        records = []
        for line in text.splitlines():
            try:
                records.append(loads_bounded(line))
            except ValueError:
                continue
    runs: dict[str, dict[int, dict[str, Any]]] = {}
    for record in records:
        if isinstance(record, dict):
            _add_record(runs, "", record)
    return {run: list(rows.values()) for run, rows in runs.items()}


def _columns_to_records(data: dict[str, Any]) -> list[dict[str, Any]]:
    """pandas' to_json default: {column: {row index: value}}; a single record passes as it is."""
    if not all(isinstance(v, dict) for v in data.values()):
        return [data]
    rows: dict[str, dict[str, Any]] = {}
    for column, cells in data.items():
        for index, value in cells.items():
            rows.setdefault(index, {})[column] = value
    return list(rows.values())


def _add_record(runs: dict[str, dict[int, dict[str, Any]]], run: str, record: dict[str, Any]) -> None:
    """Merges a record's metrics into its run's row for its step (W&B logs a step's metrics in several calls)."""
    step = next((_number(record[c]) for c in _STEP_COLUMNS if _number(record.get(c)) is not None), None)
    if step is None:
        return
    metrics = {}
    for key, value in record.items():
        name = logged_name(str(key)) if key not in _STEP_COLUMNS else None
        number = _number(value)
        if name is not None and number is not None:
            metrics[name] = number
    if metrics:
        runs.setdefault(run, {}).setdefault(int(step), {"step": int(step)}).update(metrics)


def _number(value: Any) -> float | None:
    """A cell as a float (nan / inf included); None for text, bools and empty cells."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    parsed = parse_value(str(value).strip()) if str(value).strip() else None
    return parsed if isinstance(parsed, float) else None
