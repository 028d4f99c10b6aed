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
Lines may carry any prefix (timestamps, `[rank0]:`, Ray's `(TaskRunner pid=1234)`, a logger's header) and a
progress bar redrawn with "\\r" in the same line. A verl line that a terminal or a paste broke in two
(`critic` / `/rewards/min:-1.0 - ...`) is joined again. Values: numbers, nan / inf (Python), NaN / Infinity
(JSON), numpy reprs (`np.float64(0.5)`); quoted strings stay strings; anything else is skipped.

Cheap on big logs: each chunk of the file (logs.lines.iter_chunks) is searched for marker bytes (bytes.find),
and only the lines holding one are decoded and parsed.

Typical use:
    for log in read_console_metrics(Path("train.log")):
        log.format, log.num_rows, log.steps[0]["entropy"]
"""
from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from grpo_doctor.analysis.metric_logs import MetricLog, add_steps, with_swift_step
from grpo_doctor.analysis.metric_names import OPENRLHF, SWIFT, TRL, VERL, framework_entry, framework_of
from grpo_doctor.logs.lines import iter_chunks

# A metric line holds one of these; any line without is never decoded.
MARKERS = (b"'loss'", b'"loss"', b"_loss'", b'_loss"', b"step:")
_FORMATS = {TRL: "trl-console", SWIFT: "ms-swift-console", OPENRLHF: "openrlhf-console", VERL: "verl-console"}
# A training row has one of these (an evaluation dict has eval_* names, a config dump none of them)
_TRAINING_KEYS = frozenset({"loss", "grad_norm", "reward", "policy_loss", "actor_grad_norm"})
_VALUE = (r"'[^']*'|\"[^\"]*\"|np\.float\d+\([^()]*\)|[-+]?(?:nan|NaN|inf|Infinity|\d[\d.]*(?:[eE][-+]?\d+)?"
          r"|\.\d+(?:[eE][-+]?\d+)?)")
_PAIR = re.compile(r"(['\"])([^'\"]{1,200})\1:\s*(" + _VALUE + r")")
_GLOBAL_STEP = re.compile(r"Global step (\d+)\b")
_VERL_START = re.compile(r"(?:^|(?<=[\s)\]>|]))step:(\d+) - ")
_VERL_PAIR = re.compile(r"^([^\s:]+):(" + _VALUE + r")$")
# What is left of a verl line that a paste broke: fragments of " - key:value" pairs and no new message
_CONTINUATION = re.compile(r"^\S+(?: - \S+)*(?: -)?\s*$")
_SPECIAL = {"nan": math.nan, "NaN": math.nan, "inf": math.inf, "+inf": math.inf, "Infinity": math.inf,
            "+Infinity": math.inf, "-inf": -math.inf, "-Infinity": -math.inf}


def read_console_metrics(path: Path, max_bytes: int | None = None) -> list[MetricLog]:
    """One MetricLog per format whose metric lines `path` holds (none: an empty list)."""
    reader = _Reader()
    for chunk in iter_chunks(path, max_bytes):
        done = 0  # bytes of the chunk already fed
        if reader.pending is not None:  # a verl line that ended the last chunk may go on in this one
            done = _feed_following(reader, chunk, 0)
        for start in _marked_line_starts(chunk):
            if start >= done:
                end = _line_end(chunk, start)
                reader.feed(chunk[start:end])
                done = _feed_following(reader, chunk, end + 1) if reader.pending is not None else end + 1
    reader.flush()
    logs = []
    for framework, entries in reader.rows.items():
        log = MetricLog(path=path, source=framework, format=_FORMATS[framework])
        add_steps(log, entries)
        if log.steps:
            logs.append(log)
    return logs


def _marked_line_starts(chunk: bytes) -> list[int]:
    """Where the lines holding a marker start, in order: found by bytes.find, so that the lines without
    one (nearly all of a big log) never reach Python code."""
    starts = set()
    for marker in MARKERS:
        at = chunk.find(marker)
        while at >= 0:
            start = chunk.rfind(b"\n", 0, at) + 1
            starts.add(start)
            at = chunk.find(marker, _line_end(chunk, start))
    return sorted(starts)


def _line_end(chunk: bytes, start: int) -> int:
    end = chunk.find(b"\n", start)
    return len(chunk) if end < 0 else end


def _feed_following(reader: _Reader, chunk: bytes, start: int) -> int:
    """Feeds the lines from `start` while a verl line may be continued by them; where feeding stopped."""
    while reader.pending is not None and start < len(chunk):
        end = _line_end(chunk, start)
        reader.feed(chunk[start:end])
        start = end + 1
    return start


def parse_value(text: str) -> Any:
    """A printed value: float (nan / inf included), or the string inside quotes; None when neither."""
    if text[:1] in "'\"":
        return text[1:-1]
    if text.startswith("np."):
        text = text[text.index("(") + 1:-1]
    if text in _SPECIAL:
        return _SPECIAL[text]
    try:
        return float(text)
    except ValueError:
        return None


def dict_pairs(text: str) -> dict[str, Any]:
    """The 'key': value pairs of a printed dict (Python repr or JSON), even one cut short by a paste."""
    out = {}
    for _, key, value in _PAIR.findall(text):
        parsed = parse_value(value)
        if parsed is not None:
            out[key] = parsed
    return out


class _Reader:
    """Lines in, rows out ({framework: [entry, ...]}); `pending` holds a verl line that may continue."""

    def __init__(self) -> None:
        self.rows: dict[str, list[dict[str, Any]]] = {}
        self.pending: str | None = None
        self.numbered: dict[str, int] = {}  # rows numbered in order, for dicts without a step

    def feed(self, raw: bytes) -> None:
        if self.pending is not None:
            text = raw.decode("utf-8", "replace").rstrip("\r\n")
            if b"step:" not in raw and _CONTINUATION.match(text) and (" - " in text or text.startswith(":")):
                self.pending += text.strip()
                return
            self.flush()
        if not any(marker in raw for marker in MARKERS):
            return
        for segment in raw.decode("utf-8", "replace").split("\r"):  # a progress bar redrawn in the same line
            if (start := _VERL_START.search(segment)) is not None:
                self.pending = segment[start.start():].rstrip()
            elif (pair := _PAIR.search(segment)) is not None:
                brace = segment.rfind("{", 0, pair.start())
                self._add_dict(segment, brace if brace >= 0 else pair.start())

    def flush(self) -> None:
        if self.pending is None:
            return
        line, self.pending = self.pending, None
        start = _VERL_START.match(line)
        entry: dict[str, Any] = {}
        for piece in line[start.end():].removesuffix(" -").split(" - "):
            if (pair := _VERL_PAIR.match(piece.strip())) is not None:
                value = parse_value(pair.group(2))
                if isinstance(value, float):
                    entry[pair.group(1)] = value
        if any(not key.startswith(("val-", "val/")) for key in entry):  # not a validation-only line
            self.rows.setdefault(VERL, []).append({**entry, "step": int(start.group(1))})

    def _add_dict(self, segment: str, brace: int) -> None:
        """A printed dict starting at `brace` (its "{", or its first pair where a paste lost the brace)."""
        entry = dict_pairs(segment[brace:])
        if not _TRAINING_KEYS.intersection(entry) or any(key.startswith("eval_") for key in entry):
            return
        framework = framework_of(entry)
        global_step = _GLOBAL_STEP.search(segment[:brace])
        if global_step is not None:
            framework = OPENRLHF
        entry = framework_entry(entry, framework)
        if framework == SWIFT:
            entry = with_swift_step(entry)
        elif global_step is not None:
            entry["step"] = int(global_step.group(1))
        else:
            entry["step"] = self.numbered[framework] = self.numbered.get(framework, 0) + 1
        self.rows.setdefault(framework, []).append(entry)
