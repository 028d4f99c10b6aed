"""The general metric reader: step metrics in any log, recognised by structure rather than by framework.

The framework readers (metric_lines.py: TRL's dicts, ms-swift's, verl's and OpenRLHF's lines) are exact and
keep their lines; this reader catches the rest, as records of name/number pairs (metric_syntax.py):
  line      a line of several pairs: `step=5 loss=0.1`, `Loss: 0.1 | Reward: 0.3`, JSON, mlx-lm's
            `Iter 5: Train loss 0.120, Total rewards mean 0.250, ...`
  block     consecutive lines of one pair each: NeMo-RL's bulleted step summary (`• Avg Reward: 0.18`),
            a key-value table (stable-baselines' `| loss | 3.98 |`), W&B's `Run summary:` (`wandb: name value`)
  table     a header row of names, then rows of numbers (markdown, box-drawing, whitespace, TSV, pandas)
The step is what counts in the record (step, global_step, iter, iteration, an integer epoch), else a
`Step N` / `Iter N` in the line or in a header line a little above a block, else the record's order.
Names are mapped onto the metric vocabulary by schema/metric_name_rules.py; a record whose names show no LLM
rollout (or show episodes: classic RL; policy entropy and KL alone show none, every policy-gradient method
logs them) keeps only its loss, grad_norm, learning rate and epoch; one left with none of them is counted in
`unjudged` (read, and not the tool's to judge), not kept.
W&B's `Run history:` holds sparklines, no numbers: it is skipped.

Cheap on big logs: a chunk is lowered once and searched for a few words (loss, reward, entropy, grad,
kl, run summary) with bytes.find; only the lines around a hit are decoded.

Typical use:
    reader = MetricTextReader()
    reader.feed_chunk(b"Iter 1: Train loss 0.100, Total rewards mean 0.250, Total rewards std 0.1, KL 0.0\\n")
    reader.records   # [Record(syntax="line", step=1, metrics={"loss": 0.1, "reward": 0.25, ...})]
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

from grpo_doctor.logs.lines import line_at
from grpo_doctor.logs.metric_lines import is_framework_line
from grpo_doctor.logs.metric_syntax import cells, is_number, line_pairs, lone_pair, number
from grpo_doctor.logs.prefixes import split_prefix_tuple
from grpo_doctor.schema.metric_name_rules import (
    ALWAYS_KEPT,
    STEP_NAMES,
    canonical_of,
    episode_metrics,
    is_evaluation,
    metric_name,
    rollout_names_allowed,
    step_name,
)
from grpo_doctor.schema.metric_vocab import FUNC_STD, SUMMARY_NAMES

# A record holds at least one of these (a config dump's learning rate or max length alone is no logged step).
MEASURED = frozenset({"loss", "grad_norm", "reward", "reward_std_batch", "reward_std_group_mean", "entropy", "kl",
                      "reward_func_std_max", "frac_reward_zero_std", "completion_length_mean"})
POLICY_TERMS = frozenset({"entropy", "kl"})  # measured by classic policy-gradient RL as much as by GRPO
HIT_WORDS = (b"loss", b"reward", b"entropy", b"grad", b"kl", b"run summary")
MAX_BLOCK_LINES = 200  # a block or table is read this far at most
STEP_LOOKBACK_LINES = 40  # a `Step N` header this far above a block gives its step
_STEP_IN_TEXT = re.compile(r"(?i)\b(global[_ ]step|step|iteration|iter|epoch)\b\s*[:#=]?\s*(\d+)\b(?![.,]\d)")
_STEP_HEADER = re.compile(r"(?i)^[\W_]*(?:step|iteration|iter)\s*[:#]?\s*(\d+)(?:\s*/\s*\d+)?[\W_]*$")
_SEPARATOR = re.compile(r"^[\s|+:=\-─━═┄┈╌┡┩┢┪┣┫┏┓┗┛┌┐└┘├┤┬┴┼╇╈╋╪╞╡╤╧╥╨╔╗╚╝╠╣╦╩╬│┃║]*$")
_WANDB = re.compile(r"^wandb:\s?")
# Matched on the line without its trailing spaces and bars (`_section_text`): a lazy name before `[\s|│┃]*$`
# rescanned a long run of tabs from every character.
_SECTION = re.compile(r"^[\s|│┃]*([^\d\s|│┃:][^|│┃:]*?)[/:]?$")  # "| rollout/ |  |", "Training Results:"


@dataclass
class Record:
    """One logged step as read: `syntax` ("line", "block", "table", "wandb-summary"), its step (None: numbered
    later, in order) and its metrics under the vocabulary's names."""

    syntax: str
    step: int | None
    metrics: dict[str, float] = field(default_factory=dict)


class MetricTextReader:
    """Chunks of whole lines in, `records` out (see the module docstring).

    A record of the policy's entropy and KL alone is held back (`_policy_terms_only`) until the log shows
    what trained: once any record of it measures a GRPO quantity (a reward, a completion length, ...), the
    held records are that run's too (entropy printed on its own line beside the reward's) and are judged."""

    def __init__(self) -> None:
        # (the record as judged now, or None; the whole record if it measured only entropy and KL, or None)
        self._entries: list[tuple[Record | None, Record | None]] = []
        self._unjudged = 0  # records of another kind of training (episodes, no LLM rollout): read, not judged
        self._held_unjudged = 0  # of those, the held records that kept nothing
        self._rollout_seen = False  # a judged record measured a GRPO quantity beyond entropy, KL and the loss

    @property
    def records(self) -> list[Record]:
        if self._rollout_seen:
            return [full or now for now, full in self._entries if (full or now) is not None]
        return [now for now, _ in self._entries if now is not None]

    @property
    def unjudged(self) -> int:
        return self._unjudged - (self._held_unjudged if self._rollout_seen else 0)

    def feed_chunk(self, chunk: bytes) -> None:
        done = 0
        for start in _hit_line_starts(chunk):
            if start >= done:
                done = self._read_at(chunk, start)

    def _read_at(self, chunk: bytes, start: int) -> int:
        """Reads what the line at `start` begins or belongs to; where reading stopped."""
        raw, end = line_at(chunk, start)
        text = _message(raw)
        if is_framework_line(text):
            return end
        if _WANDB.match(text):
            return self._wandb(chunk, start, text, end)
        row = cells(text)
        if len(row) >= 2 and not any(is_number(c) for c in row):
            read = self._table(chunk, row, end)
            if read is not None:
                return read
        pairs = line_pairs(text)
        if len(pairs) >= 2:
            self._add("line", pairs, text, chunk, start)
            return end
        if lone_pair(text) is not None:
            return self._block(chunk, start)
        return end

    def _wandb(self, chunk: bytes, start: int, text: str, end: int) -> int:
        """W&B's closing summary: `wandb: Run summary:` then `wandb: <name> <value>` lines."""
        rest = _WANDB.sub("", text).strip()
        if rest != "Run summary:":
            if rest == "Run history:":  # sparklines: read past them
                return _skip_block(chunk, end, lambda t: bool(_WANDB.match(t)) and _WANDB.sub("", t).strip() != "")
            return end
        pairs: list[tuple[str, float]] = []
        pos = end
        for _ in range(MAX_BLOCK_LINES):
            if pos >= len(chunk):
                break
            line, after = line_at(chunk, pos)
            inner = _message(line)
            if not _WANDB.match(inner) or not (body := _WANDB.sub("", inner).strip()):
                break
            pair = lone_pair(body)
            if pair is not None:
                pairs.append(pair)
            pos = after
        self._add("wandb-summary", pairs, "", chunk, start)
        return pos

    def _table(self, chunk: bytes, header: list[str], pos: int) -> int | None:
        """Rows of numbers under a header of names; None when `header` heads no such rows."""
        if not any(metric_name(name) or step_name(name) for name in header):
            return None
        rows: list[list[float]] = []
        for _ in range(MAX_BLOCK_LINES):
            if pos >= len(chunk):
                break
            line, after = line_at(chunk, pos)
            text = _message(line)
            if _SEPARATOR.match(text):
                if rows and not text.strip():
                    break
                pos = after
                continue
            row = cells(text)
            if len(row) == len(header) + 1:  # pandas prints the row's index first
                row = row[1:]
            if len(row) != len(header) or not all(is_number(c) for c in row):
                break
            rows.append([v for c in row if (v := number(c)) is not None])  # each is one: checked above
            pos = after
        if not rows:
            return None
        for values in rows:
            self._add("table", list(zip(header, values, strict=True)), "", chunk, None)
        return pos

    def _block(self, chunk: bytes, start: int) -> int:
        """Consecutive lines of one pair each (section headers between them allowed), around `start`."""
        first = start
        for _ in range(MAX_BLOCK_LINES):
            if first == 0:
                break
            before = chunk.rfind(b"\n", 0, first - 1) + 1
            kind = _block_line(_message(line_at(chunk, before)[0]))
            if kind is None:
                break
            first = before
        pairs: list[tuple[str, float]] = []
        pos, section = first, ""
        for _ in range(2 * MAX_BLOCK_LINES):
            if pos >= len(chunk):
                break
            line, after = line_at(chunk, pos)
            text = _message(line)
            kind = _block_line(text)
            if kind is None:
                break
            if kind == "pair":
                name, value = lone_pair(text)
                pairs.append((section + name if section.endswith("/") else name, value))
            elif kind:
                section = kind
            pos = after
        self._add("block", pairs, "", chunk, first)
        return pos

    def _add(self, syntax: str, pairs: list[tuple[str, float]], text: str, chunk: bytes, start: int | None) -> None:
        """A record of `pairs` when any of them is a metric of the vocabulary."""
        metrics: dict[str, float] = {}
        steps: dict[str, float] = {}
        if any(name in SUMMARY_NAMES for name, _ in pairs):  # the HF Trainer's end-of-training summary
            return
        for name, value in pairs:
            counter = step_name(name)
            if counter is not None:
                steps.setdefault(counter, value)
                continue
            mapped = _mapped(name)
            if mapped is not None:
                metrics.setdefault(mapped, value)
        allowed = rollout_names_allowed(name for name, _ in pairs)
        held = allowed and _policy_terms_only(metrics)
        whole = dict(metrics) if held else None
        judged = allowed and not held
        if judged and {canonical_of(k) for k in metrics} - POLICY_TERMS - set(ALWAYS_KEPT):
            self._rollout_seen = True
        if not judged:
            self._unjudged += bool(metrics) or episode_metrics(name for name, _ in pairs)
            metrics = {k: v for k, v in metrics.items() if canonical_of(k) in ALWAYS_KEPT}
        kept = any(canonical_of(k) in MEASURED or FUNC_STD.match(k) for k in metrics)
        if not kept and not held:
            return
        if kept:
            self._unjudged -= not judged  # its loss or grad norm is judged: counted as a record
        else:
            self._held_unjudged += 1
        if "epoch" in steps:
            metrics.setdefault("epoch", steps["epoch"])
            if whole is not None:
                whole.setdefault("epoch", steps["epoch"])
        step = _step(steps, text)
        if step is None and start is not None:
            step = _header_step(chunk, start)
        self._entries.append((Record(syntax, step, metrics) if kept else None,
                              Record(syntax, step, whole) if whole is not None else None))


def _policy_terms_only(metrics: dict[str, float]) -> bool:
    """Whether the record measures only the policy's entropy and KL (besides ALWAYS_KEPT): every policy-gradient
    method logs them, so alone they do not tell an LLM rollout from a classic-RL table that the excerpt cut
    (Spinning Up's `Entropy` / `KL` / `Time` rows without its `EpRet` ones); such a record is read, not judged."""
    measured = {canonical_of(k) for k in metrics} - set(ALWAYS_KEPT)
    return bool(measured) and measured <= POLICY_TERMS


@functools.lru_cache(maxsize=4096)  # the same names every step
def _mapped(name: str) -> str | None:
    """`metric_name` of the name, or of its shorter endings ("done Avg Reward" -> "Avg Reward")."""
    if is_evaluation(name):
        return None
    mapped = metric_name(name)
    words = name.split(" ")
    for i in range(1, len(words)):
        if mapped is not None:
            break
        mapped = metric_name(" ".join(words[i:]))
    return mapped


def _step(steps: dict[str, float], text: str) -> int | None:
    for counter in STEP_NAMES:
        value = steps.get(counter)
        if value is not None and value == value and float(value).is_integer():
            return int(value)
    m = _STEP_IN_TEXT.search(text) if text else None
    return int(m.group(2)) if m else None


def _header_step(chunk: bytes, start: int) -> int | None:
    """The `Step N` of a header line (`==== Step 3/100 ====`) up to STEP_LOOKBACK_LINES above `start`."""
    pos = start
    for _ in range(STEP_LOOKBACK_LINES):
        if pos == 0:
            return None
        pos = chunk.rfind(b"\n", 0, pos - 1) + 1
        line = _message(line_at(chunk, pos)[0])
        if "tep" in line or "ter" in line:
            m = _STEP_HEADER.match(line)
            if m:
                return int(m.group(1))
    return None


def _block_line(text: str) -> str | None:
    """"pair" for a line of one name and number, the section's name for a header line inside a block
    ("rollout/", "Training Results"), None for anything else (a blank line ends a block)."""
    if not text.strip():
        return None
    if lone_pair(text) is not None:
        return "pair"
    if text.lstrip().startswith(("...", "…")):  # "... and 7 more reward metrics": the block goes on
        return ""
    if line_pairs(text):
        return None
    m = _SECTION.match(text.rstrip(" \t\n\r\f\v|│┃"))
    if m and (text.rstrip().endswith(":") or m.group(1).strip().endswith("/")):
        return m.group(1).strip().rstrip(":") + ("/" if m.group(1).strip().endswith("/") else "")
    return None


def _skip_block(chunk: bytes, pos: int, inside) -> int:
    for _ in range(MAX_BLOCK_LINES):
        if pos >= len(chunk):
            break
        line, after = line_at(chunk, pos)
        if not inside(_message(line)):
            break
        pos = after
    return pos


def _message(line: str) -> str:
    """The line without its prefixes (ranks, times, Ray tags, colours) and its line end."""
    return split_prefix_tuple(line)[2].rstrip()


def _hit_line_starts(chunk: bytes) -> list[int]:
    """Where the lines holding a hit word start, in order: found by bytes.find in the lowered chunk."""
    low = chunk.lower()
    starts = set()
    for word in HIT_WORDS:
        at = low.find(word)
        while at >= 0:
            start = low.rfind(b"\n", 0, at) + 1
            starts.add(start)
            end = low.find(b"\n", at)
            if end < 0:
                break
            at = low.find(word, end)
    return sorted(starts)
