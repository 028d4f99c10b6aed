"""Step metrics the trainers print to the console, one line at a time: the parser behind the report's
reading of raw logs (analysis/console_metrics.py) and watch's live rules (supervisor/step_feed.py).

Recognised (docs in analysis/console_metrics.py): the Hugging Face Trainer's / TRL's printed dict
(`{'loss': 0.0, 'grad_norm': 0.5, ...}`, numbered 1, 2, ... in print order: it holds no step),
ms-swift's (its `global_step/max_steps` is the step), OpenRLHF's `Global step N: {...}` and verl's
`step:N - key:value - ...` (a line a paste broke in two joined again). Standard library only, so that
watch reads the job's output with it without the analysis stack.

Cheap on big outputs: a chunk of whole lines is searched for marker bytes (bytes.find), and only the
lines holding one are decoded and parsed.

Typical use:
    reader = MetricLineReader()
    reader.feed_chunk(b"{'loss': 0.0, 'reward': 1.0, 'reward_std': 0.0}\n")
    reader.take()          # [("trl", {"loss": 0.0, "reward": 1.0, "reward_std": 0.0, "step": 1})]
"""
from __future__ import annotations

import math
import re
from typing import Any

from grpo_doctor.schema.metric_vocab import (
    OPENRLHF,
    SWIFT,
    VERL,
    framework_entry,
    framework_of,
    with_swift_step,
)

# A metric line holds one of these; any line without is never decoded.
MARKERS = (b"'loss'", b'"loss"', b"_loss'", b'_loss"', b"step:")
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


class MetricLineReader:
    """Lines in, rows out ({framework: [entry, ...]}); `pending` holds a verl line that may continue."""

    def __init__(self) -> None:
        self.rows: dict[str, list[dict[str, Any]]] = {}
        self.pending: str | None = None
        self.numbered: dict[str, int] = {}  # rows numbered in order, for dicts without a step

    def feed_chunk(self, chunk: bytes) -> None:
        """A run of whole lines: only those holding a marker (and the lines that may continue a verl line
        before them) are decoded."""
        done = 0  # bytes of the chunk already fed
        if self.pending is not None:  # a verl line that ended the last chunk may go on in this one
            done = self._feed_following(chunk, 0)
        for start in _marked_line_starts(chunk):
            if start >= done:
                end = _line_end(chunk, start)
                self.feed(chunk[start:end])
                done = self._feed_following(chunk, end + 1) if self.pending is not None else end + 1

    def take(self) -> list[tuple[str, dict[str, Any]]]:
        """The rows read since the last call, (framework, entry) in the order read per framework; they
        are handed over, not kept (a live reader's memory stays bounded)."""
        out = [(framework, entry) for framework, entries in self.rows.items() for entry in entries]
        self.rows = {}
        return out

    def _feed_following(self, chunk: bytes, start: int) -> int:
        """Feeds the lines from `start` while a verl line may be continued by them; where feeding stopped."""
        while self.pending is not None and start < len(chunk):
            end = _line_end(chunk, start)
            self.feed(chunk[start:end])
            start = end + 1
        return start

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


def is_framework_line(line: str) -> bool:
    """Whether `line` is one the framework readers above read (a training dict, a verl step line): the
    general reader (metric_text.py) leaves those to them."""
    if "step:" in line and _VERL_START.search(line):
        return True
    if " - " in line and _CONTINUATION.match(line.strip()):  # the rest of a verl line a paste broke
        return True
    if not any(marker in line for marker in _TEXT_MARKERS):
        return False
    entry = dict_pairs(line)
    return bool(_TRAINING_KEYS.intersection(entry))


_TEXT_MARKERS = tuple(marker.decode() for marker in MARKERS)


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
