"""Which metric file a raw input is, told by its name (TRL / ms-swift) or by its content (the rest).

By content, whatever the file is called:
  tensorboard  a TensorBoard event file (TFRecord whose first record is an Event with `brain.Event:`):
               tensorboard_metrics.py
  verl-jsonl   verl's file logger (trainer.logger=[file]): one `{"step": N, "data": {metric: value}}` a line
  wandb-csv    a W&B chart export ("Step","<run> - <metric>",...) or a run history saved as CSV (`_step`)
  wandb-json   a W&B history as JSON: records with `_step` (a list, one object a line, or pandas' columns)
               wandb_metrics.py
Anything else is no metric file (an empty list): load.py reads it as a raw log, where console_metrics.py
finds the metric lines printed to the console.

Typical use:
    logs = read_metric_files(Path("events.out.tfevents.1718000000.node1"))   # [MetricLog(format="tensorboard")]
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grpo_doctor.analysis import metric_logs, tensorboard_metrics, wandb_metrics
from grpo_doctor.analysis.metric_logs import MetricLog, add_steps
from grpo_doctor.analysis.metric_names import framework_entry, framework_of, logged_name
from grpo_doctor.schema.safe_read import open_regular, open_text

SNIFF_BYTES = 4096


def read_metric_files(path: Path) -> list[MetricLog]:
    """The metric logs in `path` (one per run a W&B export holds), or [] when it is no metric file."""
    if metric_logs.is_metric_log(path):
        return [metric_logs.read_metric_log(path)]
    try:
        with open_regular(path) as f:  # never a FIFO or a device (schema/safe_read.py)
            head = f.read(SNIFF_BYTES)
    except OSError:
        return []
    if tensorboard_metrics.is_event_file(head):
        return [tensorboard_metrics.read_event_file(path)]
    text = head.decode("utf-8", "replace").lstrip("\ufeff \t\r\n")
    if text.startswith("{") and _is_verl_record(text):
        return [read_verl_jsonl(path)]
    return wandb_metrics.read_wandb_export(path, text)


def _is_verl_record(head: str) -> bool:
    first = head.split("\n", 1)[0]
    try:
        record = json.loads(first)
    except ValueError:
        return head.startswith('{"step":') and '"data":' in head  # a first line longer than the sniffed bytes
    return isinstance(record, dict) and isinstance(record.get("step"), int) and isinstance(record.get("data"), dict)


def read_verl_jsonl(path: Path) -> MetricLog:
    """verl's FileLogger: {"step": N, "data": {...}} a line (orjson writes NaN as null: a NaN is not seen)."""
    entries: list[dict[str, Any]] = []
    bad = 0
    with open_text(path) as f:
        for line in f:
            try:
                record = json.loads(line)
            except ValueError:
                bad += int(bool(line.strip()))
                continue
            data = record.get("data") if isinstance(record, dict) else None
            if isinstance(data, dict) and isinstance(record.get("step"), int):
                entries.append({**_training_metrics(data), "step": record["step"]})
    entries = [e for e in entries if len(e) > 1]
    log = MetricLog(path=path, source=framework_of(k for e in entries for k in e), format="verl-jsonl")
    if bad:
        log.warnings.append(f"{path}: skipped {bad} unreadable line(s)")
    add_steps(log, [framework_entry(e, log.source) for e in entries])
    return log


def _training_metrics(data: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in data.items():
        name = logged_name(str(key))
        if name is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = float(value)
    return out
