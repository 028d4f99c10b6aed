"""Run data made inert before it is shown: control characters visible on a terminal, bidi controls in HTML.

Phase names, host names, exception names and messages, completions and log lines come from the
job, and so can hold anything: ANSI / OSC escape sequences that clear the screen, retitle the
window or write the clipboard (OSC 52), a carriage return that overwrites what was printed, a
bidi override that makes `rank 3` read backwards. Everything grpo-doctor prints from a run goes
through `terminal_safe` (the job's own output that watch forwards is the exception: it stays
byte-exact), and every value the HTML report interpolates through `without_bidi_controls`.

Controls are not dropped but written as escapes (`\\x1b`, `\\n`, `\\u202e`), so what was there
can still be told from the text. Standard library only: `grpo-doctor watch` and the rank side
import it and must start light.

Typical use:
    print(f"phase {terminal_safe(phase)}")                  # "\\x1b]52;c;ZXZpbA==\\x07" stays text
    html_value = without_bidi_controls(value)                 # before jinja2 autoescapes it
"""
from __future__ import annotations

import re
import warnings

# C0 controls but the tab, DEL, C1 controls (U+009B is CSI on terminals that read 8-bit
# controls), the bidi marks, embeddings, overrides and isolates, the line and paragraph
# separators, and lone surrogates (json decodes "\ud800" to one; no UTF-8 stdout can print it,
# so it would end `print` with a UnicodeEncodeError).
_UNSAFE_ON_TERMINAL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029"
                                 "\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
# Only the controls that change the order of the text around them: embeddings, overrides and
# isolates. Marks (U+200E, U+200F) and right-to-left letters themselves are left as they are.
_BIDI_CONTROLS = re.compile("[\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r"}


def terminal_safe(text: object) -> str:
    """`text` with every control character written as a visible escape; tabs are kept."""
    text = text if isinstance(text, str) else str(text)
    if _UNSAFE_ON_TERMINAL.search(text) is None:  # the usual case: one scan, no copy
        return text
    return _UNSAFE_ON_TERMINAL.sub(_escape, text)


def without_bidi_controls(text: str) -> str:
    """`text` with bidi embeddings, overrides and isolates written as visible escapes (`\\u202e`),
    so run data cannot reorder what surrounds it on a page."""
    if _BIDI_CONTROLS.search(text) is None:
        return text
    return _BIDI_CONTROLS.sub(_escape, text)


def show_warnings_terminal_safe() -> None:
    """Warnings printed from here on are terminal-safe, line by line. Libraries repeat run data in
    theirs: matplotlib's "Glyph 27 (\x1b) missing from font" holds the very character of a phase
    name it could not draw. For the CLI process only; a second call changes nothing."""
    original = warnings.formatwarning
    if getattr(original, "terminal_safe", False):
        return

    def formatwarning(*args, **kwargs) -> str:
        return "\n".join(terminal_safe(line) for line in original(*args, **kwargs).split("\n"))

    formatwarning.terminal_safe = True  # type: ignore[attr-defined]
    warnings.formatwarning = formatwarning


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"
