"""Run data as Markdown that stays text: escaped prose, code spans and fenced blocks.

Everything from a run (titles, phases, host names, log lines, stack frames, completions) can hold
Markdown or HTML: a `<script>` in a phase name, a `|` that splits a table cell, a line of backticks
that closes a code block early. In a GitHub comment raw HTML is partly rendered and the rest of the
Markdown is rendered in full, so every piece of run data goes through one of these:
- `text`: one line of prose, every character Markdown or HTML gives a meaning to backslash-escaped
  (`<` becomes `\\<`: a parser yields text, never an html_inline token), `|` included, so it is
  safe in a table cell too;
- `prose`: the same, but a `code span` written in it stays a code span (the rules' remedies are
  written that way; a hang title names the frame it is in);
- `code`: a code span whose backtick run is longer than any inside it;
- `fenced`: a fenced block whose fence is longer than any backtick run in its lines.
Control characters are written as visible escapes first (`\\n`, `\\x1b`, `\\u202e`: terminal_safe),
so a newline cannot start a heading or a list and a bidi override cannot reorder the page.

Typical use:
    f"**Root cause:** {prose(finding.title)}"
    fenced(["_block_forever (inject.py:201)", "Injector.at (inject.py:174)"])
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from grpo_doctor.logs.terminal_text import terminal_safe

MAX_TEXT_CHARS = 1000  # one title or value; the page keeps the rest
MAX_LINE_CHARS = 300  # one line of a fenced block
# ASCII punctuation CommonMark or GFM gives a meaning to anywhere in a line (emphasis, links,
# images, code, HTML, entities, tables, strikethrough); the line-start ones (#, -, +, 1.) cannot
# start a line here: run data never begins one.
_SPECIAL = re.compile(r"([\\`*_\[\]<>&|~!])")
_CODE_SPAN = re.compile(r"(`+)(?=[^`])(.+?)(?<=[^`])\1(?!`)")
_BACKTICKS = re.compile(r"`+")


def text(value: object, max_chars: int = MAX_TEXT_CHARS) -> str:
    """One line of run data as literal Markdown text, cut at `max_chars` with a mark."""
    return _SPECIAL.sub(r"\\\1", _one_line(value, max_chars))


def prose(value: object, max_chars: int = MAX_TEXT_CHARS) -> str:
    """Like `text`, but `code spans` in the value stay code spans (their content is literal anyway)."""
    line = _one_line(value, max_chars)
    out, at = [], 0
    for match in _CODE_SPAN.finditer(line):
        out += [_SPECIAL.sub(r"\\\1", line[at:match.start()]), code(match.group(2))]
        at = match.end()
    out.append(_SPECIAL.sub(r"\\\1", line[at:]))
    return "".join(out)


def code(value: object, max_chars: int = MAX_TEXT_CHARS) -> str:
    """A code span holding `value` literally, whatever backticks it holds."""
    line = _one_line(value, max_chars)
    ticks = "`" * (_longest_backtick_run(line) + 1)
    pad = " " if line.startswith("`") or line.endswith("`") or line.strip() == "" else ""
    return f"{ticks}{pad}{line}{pad}{ticks}"


def fenced(lines: Iterable[object], info: str = "text", max_line_chars: int = MAX_LINE_CHARS) -> str:
    """A fenced code block of the lines, each made terminal-safe and cut at `max_line_chars`."""
    body = "\n".join(_cut(terminal_safe(line), max_line_chars) for line in lines)
    fence = "`" * max(3, _longest_backtick_run(body) + 1)
    return f"{fence}{info}\n{body}\n{fence}"


def table(header: list[str], rows: Iterable[Sequence[object]]) -> str:
    """A GFM table; header cells are ours, row cells run data (escaped, `|` included)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(text(cell, 300) or " " for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _one_line(value: object, max_chars: int) -> str:
    return _cut(terminal_safe(value), max_chars)  # a newline becomes "\n", never a new block


def _cut(line: str, max_chars: int) -> str:
    return line if len(line) <= max_chars else line[:max_chars] + f" ... ({len(line) - max_chars} more characters)"


def _longest_backtick_run(line: str) -> int:
    return max((len(run) for run in _BACKTICKS.findall(line)), default=0)
