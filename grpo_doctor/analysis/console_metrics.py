"""Step metrics printed to the console by the trainers, read from any raw log and recognised by content.

Read (one row per logged step; `MetricLog.format` says which):
  trl-console       Hugging Face Trainer / TRL: `{'loss': 0.0, 'grad_norm': 0.5, ..., 'epoch': 0.01}` (a Python
                    dict repr, printed by the progress callback). It holds no step number: rows are numbered
                    in the order they were printed (1, 2, ...), so a row's "step" is the n-th logged step.
  ms-swift-console  ms-swift: the same dict as JSON (or as a repr) with `"global_step/max_steps": "5/100"`.
  openrlhf-console  OpenRLHF: `✨ Global step 12: {'policy_loss': ..., 'actor_lr': ..., ...}` (the step from the
                    text in front; a dict of OpenRLHF's names without it is numbered in order).
  verl-console      verl's console logger: `step:12 - actor/entropy:1.23 - critic/score/mean:0.5 - ...`; a step
                    with validation metrics only (`step:0 - val-core/...`) is no training step and is left out.
  metric-lines, metric-block, metric-table, wandb-summary
                    any other step metrics (logs/metric_text.py, the general reader): lines of name/number
                    pairs in any syntax (mlx-lm's `Iter N: Train loss ...`, `key=value`, JSON), blocks of one
                    pair a line (NeMo-RL's bulleted step summary), tables with a header row, W&B's `Run summary:`;
                    its names mapped onto the vocabulary by rules (schema/metric_name_rules.py). Source "text".
Lines may carry any prefix (timestamps, `[rank0]:`, Ray's `(TaskRunner pid=1234)`, a logger's header) and a
progress bar redrawn with "\\r" in the same line. A verl line that a terminal or a paste broke in two
(`critic` / `/rewards/min:-1.0 - ...`) is joined again. Values: numbers, nan / inf (Python), NaN / Infinity
(JSON), numpy reprs (`np.float64(0.5)`); quoted strings stay strings; anything else is skipped.

Cheap on big logs: each chunk of the file (logs.lines.iter_chunks) is searched for marker bytes (bytes.find),
and only the lines holding one are decoded and parsed. The line parser itself is logs/metric_lines.py (standard
library only): watch reads the job's output live with the same one.

Typical use:
    for log in read_console_metrics(Path("train.log")):
        log.format, log.num_rows, log.steps[0]["entropy"]
"""
from __future__ import annotations

from pathlib import Path

from grpo_doctor.analysis.metric_logs import MetricLog, add_steps
from grpo_doctor.logs.lines import iter_chunks
from grpo_doctor.logs.metric_lines import MARKERS, MetricLineReader, dict_pairs, parse_value  # noqa: F401 - re-exported
from grpo_doctor.logs.metric_text import MetricTextReader, Record
from grpo_doctor.schema.metric_vocab import OPENRLHF, SWIFT, TEXT, TRL, VERL

_FORMATS = {TRL: "trl-console", SWIFT: "ms-swift-console", OPENRLHF: "openrlhf-console", VERL: "verl-console"}
_TEXT_FORMATS = {"line": "metric-lines", "block": "metric-block", "table": "metric-table",
                 "wandb-summary": "wandb-summary"}


def read_console_metrics(path: Path, max_bytes: int | None = None) -> list[MetricLog]:
    """One MetricLog per format whose metric lines `path` holds (none: an empty list)."""
    reader, text_reader = MetricLineReader(), MetricTextReader()
    for chunk in iter_chunks(path, max_bytes):
        reader.feed_chunk(chunk)
        if not reader.rows:  # once a framework reader has read steps, the general reader's would be left out
            text_reader.feed_chunk(chunk)
    reader.flush()
    logs = []
    for framework, entries in reader.rows.items():
        log = MetricLog(path=path, source=framework, format=_FORMATS[framework])
        add_steps(log, entries)
        if log.steps:
            logs.append(log)
    # Where a framework's own lines were read, the general reader's records are the same steps printed
    # another way (a W&B summary at the end, a trainer's own step banner): judged once, from the exact reader.
    logs = logs or _text_logs(path, text_reader.records)
    if not logs and text_reader.unjudged:
        logs = [MetricLog(path=path, source=TEXT, format="metric-lines", unjudged_rows=text_reader.unjudged)]
    return logs


def _text_logs(path: Path, records: list[Record]) -> list[MetricLog]:
    """One MetricLog per syntax the general reader found; a record without a step is numbered in order."""
    by_syntax: dict[str, list[dict]] = {}
    for number, record in enumerate(records, start=1):
        step = record.step if record.step is not None else number
        by_syntax.setdefault(record.syntax, []).append({**record.metrics, "step": step})
    logs = []
    for syntax, entries in by_syntax.items():
        log = MetricLog(path=path, source=TEXT, format=_TEXT_FORMATS[syntax])
        add_steps(log, entries)
        if log.steps:
            logs.append(log)
    return logs
