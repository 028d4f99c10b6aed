"""Name/number pairs in one line of text, whatever the syntax: the pieces the general metric reader
(metric_text.py) builds records from.

Read:
    'loss': 0.1, "reward": 0.5          a printed dict or JSON (metric_lines.dict_pairs)
    loss=0.1 reward=0.5                 Python logging, key=value loggers
    Loss: 0.1 | Avg Reward: 0.5         key: value, names of several words
    Train loss 0.000, Total rewards mean 0.250, KL 0.000        mlx-lm: "name value" between commas
    | loss | 0.1 |    wandb:   actor/entropy 0.06955    Loss: \t 0.12    a name and a number alone on a line
    | step | loss | reward |    step\tloss\treward    a table's row, cut into cells
Numbers: decimals, exponents, nan / inf / NaN / Infinity, a one-element numpy array ("[-2.18]"); a number followed by a unit ("3.2s", "32.9 GB")
is no metric value (a time or a size), except where the unit stands after a space at the end of a piece.

Typical use:
    line_pairs("step=5 loss=0.12 reward=nan")        # [("step", 5.0), ("loss", 0.12), ("reward", nan)]
    lone_pair("  • Avg Reward: 0.1875")                # ("Avg Reward", 0.1875)
    cells("| step | loss | reward |")                # ["step", "loss", "reward"]
"""
from __future__ import annotations

import math
import re

from grpo_doctor.logs.metric_lines import dict_pairs

NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|NaN|NAN|inf|Inf|INF|Infinity|infinity)"
_NAME = r"[A-Za-z_][\w./@%-]*(?:\([\w/%]*\))?"
_NAMES = _NAME + r"(?: " + _NAME + r"){0,5}"  # a name of up to six words ("Mean Generation Length")
# The lookbehinds hold every character a name holds (% included): a match starts only where a name can, else
# it would start after every "%X" of a long URL-encoded piece and rescan the rest (quadratic: 64 KB, minutes).
_EQUALS = re.compile(r"(?<![\w./@%-])(" + _NAME + r")\s*=\s*(" + NUMBER + r")(?![\w.%])")
_COLON = re.compile(r"(?<![\w./@%-])(" + _NAMES + r")\s*:\s*(" + NUMBER + r")(?=\.?(?:$|[\s,;|}\])]))")
_SPACED = re.compile(r"(?:^|(?<=, )|(?<=: ))(" + _NAMES + r") (" + NUMBER + r")(?= ?[A-Za-z%/]{0,6}\s*(?:,|$))")
_LONE = re.compile(r"^(" + _NAMES + r")(?:\s*[:=]\s*|\s+)(" + NUMBER + r")\s*$")
_COLON_VALUE = re.compile(r":\s*(?:[-+]?[\d.]|nan|NaN|NAN|inf|Inf|INF)")
_CELL_SPLIT = re.compile(r"[|│┃║]|\t|\s{2,}")  # no `\s*` before a bar: it rescanned every run of tabs
_BULLET = re.compile(r"^[\s•·*▶►>~-]*(?:[^\x00-\x7f]\S*\s+)?")  # bullets, and an emoji before a label
_FLOAT = re.compile(r"^(?:" + NUMBER + r")$")
_SPECIAL = {"nan": math.nan, "inf": math.inf, "+inf": math.inf, "-inf": -math.inf, "infinity": math.inf,
            "+infinity": math.inf, "-infinity": -math.inf}


def number(text: str) -> float | None:
    """A printed number (nan / inf in any spelling) as a float; None when `text` is none."""
    text = text.strip()
    if text[:1] == "[" and text[-1:] == "]":  # a one-element array as numpy prints it: "[-2.179]", "[ 0.08]"
        text = text[1:-1].strip()
    special = _SPECIAL.get(text.lower())
    if special is not None:
        return special
    if not _FLOAT.match(text):
        return None
    try:
        return float(text)
    except ValueError:
        return None


def line_pairs(text: str) -> list[tuple[str, float]]:
    """Every name/number pair of one line, in the syntax that gives the most of them."""
    best: list[tuple[str, float]] = []
    if "'" in text or '"' in text:
        best = [(k, v) for k, v in dict_pairs(text).items() if isinstance(v, float)]
    for pattern, sign in ((_EQUALS, "="), (_COLON, ":"), (_SPACED, ", ")):
        # cheap tests first: the patterns' many-word names cost tens of microseconds on a long line
        if sign not in text or (len(best) > 1 and pattern is _SPACED) or (
                pattern is _COLON and _COLON_VALUE.search(text) is None):
            continue
        found = [(name, value) for name, raw in pattern.findall(text) if (value := number(raw)) is not None]
        if len(found) > len(best):
            best = found
    return best


def lone_pair(text: str) -> tuple[str, float] | None:
    """The one name and number a line holds alone (a bulleted summary, a key-value table's row, a W&B
    summary line), or None."""
    parts = cells(text)
    if len(parts) == 2 and (value := number(parts[1])) is not None and _is_name(parts[0].rstrip(":= ")):
        return _BULLET.sub("", parts[0]).rstrip(":= "), value
    m = _LONE.match(_BULLET.sub("", text.strip()))
    if m is None:
        return None
    value = number(m.group(2))
    return (m.group(1), value) if value is not None else None


def cells(text: str) -> list[str]:
    """A table row's cells: split at |, box-drawing bars, tabs and runs of two spaces or more."""
    text = text.strip()
    if "  " not in text and not any(bar in text for bar in _BARS):
        return [text] if text else []
    return [c for piece in _CELL_SPLIT.split(text) if (c := piece.strip())]


_BARS = ("|", "│", "┃", "║", "\t")


def is_number(text: str) -> bool:
    return number(text) is not None


def _is_name(text: str) -> bool:
    return bool(text) and re.fullmatch(r"[^\d\s]\S*(?: \S+){0,5}", _BULLET.sub("", text)) is not None
