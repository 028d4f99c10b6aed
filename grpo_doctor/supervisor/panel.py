"""What watch's live panel says about the ranks, as terminal lines (rich) or as one plain status line.

On a terminal the panel is a table drawn with rich (rank, step, open phase, seconds without progress,
GPU memory) under a title line, laid out for the terminal's width and height (rich reads COLUMNS
and LINES, then asks the terminal), so that no line wraps and the panel can always be erased by
moving the cursor up over exactly the lines drawn. Colour only marks; the text alone says it all,
and NO_COLOR (https://no-color.org) or TERM=dumb leaves no style code at all. Without a terminal
(a CI log, `| tee`) the same facts fit on one `grpo-doctor:` line. Run data (phase names) is made
terminal-safe before rich sees it, and handed over as Text, never as markup, so "[bold]" in a phase
name is shown as it is. rich is imported on the first panel drawn: `watch` without a terminal,
and the rank side, never load it.

Typical use:
    rows = [(0, 12, "rollout/generate", 3.2, 21 * 2**30), (1, 11, "train/backward", 95.0, None)]
    sys.stderr.write("\\n".join(panel_lines(rows)) + "\\n")   # on a terminal
    sys.stderr.write(status_line(rows) + "\\n")               # in a log
"""
from __future__ import annotations

import functools
import io
import os
import shutil
from collections.abc import Sequence

from grpo_doctor.logs.terminal_text import terminal_safe

# (rank, step, open phase or a gone rank's state, seconds since its last record, GPU memory bytes)
PanelRow = tuple[int, "int | None", "str | None", "float | None", "int | None"]

MAX_PANEL_RANKS = 16
STALLED_S = 60.0  # without progress this long, the rank's idle figure is marked (yellow)
_PHASE_CHARS = 20  # the phase column of the plain fallback
_PHASE_MAX = 40  # cells: a wider phase column only pushes the figures away from the rank
_HEADERS = ("rank", "step", "phase", "idle s", "GPU mem")


def colour_wanted(environ: os._Environ[str] | dict[str, str] | None = None) -> bool:
    """False under NO_COLOR (set and not empty, as no-color.org says) or TERM=dumb."""
    env = os.environ if environ is None else environ
    return env.get("NO_COLOR", "") == "" and env.get("TERM", "") != "dumb"


def panel_lines(rows: Sequence[PanelRow]) -> list[str]:
    """The panel as terminal lines, none wider than the terminal; never raises.

    If rich cannot draw it (not installed, or failing on some input), the same content comes as
    fixed-width lines cut to the terminal's width.
    """
    try:
        return _rich_lines(rows)
    except Exception:  # the panel is a convenience: it must never take watch down with it
        return _plain_lines(rows)


def status_line(rows: Sequence[PanelRow]) -> str:
    """One line for a log: how many ranks, their step range, and the rank longest without progress."""
    steps = [r[1] for r in rows if r[1] is not None]
    idle_s, rank = max((r[3] or 0.0, r[0]) for r in rows)
    step = "-" if not steps else str(min(steps)) if min(steps) == max(steps) else f"{min(steps)}-{max(steps)}"
    return f"{len(rows)} rank(s), step {step}, longest without progress: rank {rank} {idle_s:.0f} s"


def _shown(rows: Sequence[PanelRow], height: int) -> int:
    # Title, table header, the rows, "... more", and the cursor's own line must fit the screen:
    # cursor-up cannot go past the top, so a taller panel could not be erased.
    return max(1, min(MAX_PANEL_RANKS, height - 4, len(rows)))


def _cells(row: PanelRow) -> tuple[str, str, str, str, str]:
    rank, step, phase, idle_s, gpu_bytes = row
    return (str(rank), "-" if step is None else str(step), terminal_safe(phase or "-"),
            "-" if idle_s is None else f"{idle_s:.0f}", f"{gpu_bytes / 2**30:.1f} GiB" if gpu_bytes else "-")


def _rich_lines(rows: Sequence[PanelRow]) -> list[str]:
    from rich.console import Console

    colour = colour_wanted()
    width, height = Console(force_terminal=True).size  # COLUMNS and LINES, else the terminal's own
    shown = _shown(rows, height)
    cells = tuple(_cells(row) for row in list(rows)[:shown])
    stalled = tuple(row[3] is not None and row[3] >= STALLED_S for row in list(rows)[:shown])
    return _render(len(rows), cells, stalled, width, colour)


@functools.lru_cache(maxsize=1)
def _render(num_rows: int, cells: tuple[tuple[str, ...], ...], stalled: tuple[bool, ...], width: int,
            colour: bool) -> list[str]:
    """Cached: watch asks twice a second, and the figures shown change about once a second."""
    from rich.console import Console
    from rich.text import Text

    out = io.StringIO()
    # force_terminal: the caller has decided this is a terminal; rendering goes to a buffer so that
    # the caller can count and erase the lines. color_system None writes no style code at all.
    console = Console(file=out, width=width, force_terminal=True, color_system="standard" if colour else None,
                      markup=False, emoji=False, highlight=False)
    # Figures keep their full width; the phase column takes what is left (5 to 40 cells) and ends
    # in an ellipsis. Below about 40 columns the right-hand columns are cut off, never wrapped.
    widths = [max([len(head)] + [len(c[i]) for c in cells]) for i, head in enumerate(_HEADERS)]
    widths[2] = min(_PHASE_MAX, max(5, width - sum(widths) + widths[2] - 2 * (len(widths) - 1)))

    def line(values, styles) -> Text:
        text = Text()
        for i, (value, style, cell_width) in enumerate(zip(values, styles, widths, strict=True)):
            cell = Text(value, style=style, overflow="ellipsis", no_wrap=True)
            cell.align("left" if i == 2 else "right", cell_width)
            text.append_text(cell if i == 0 else Text("  ") + cell)
        return text

    panel = Text()
    panel.append(f"grpo-doctor watch: {num_rows} rank(s)\n", style="bold")
    panel.append_text(line(_HEADERS, ["bold"] * len(_HEADERS)))
    for row_cells, row_stalled in zip(cells, stalled, strict=True):
        panel.append("\n")
        panel.append_text(line(row_cells, ["", "", "", "yellow" if row_stalled else "", ""]))
    if num_rows > len(cells):
        panel.append(f"\n... {num_rows - len(cells)} more", style="dim")
    # One print of one Text: rich costs per call more than per line (16 rows: about 3 ms of CPU, 9 ms
    # as a rich Table); the cache above spares even that while nothing shown has changed.
    console.print(panel, no_wrap=True, overflow="ellipsis", crop=True)
    return [line.rstrip() for line in out.getvalue().splitlines()]


def _plain_lines(rows: Sequence[PanelRow]) -> list[str]:
    width, height = shutil.get_terminal_size()
    shown = _shown(rows, height)
    lines = [f"grpo-doctor watch: {len(rows)} rank(s)", f"{'rank':>4}  {'step':>4}  {'phase':<{_PHASE_CHARS}}  idle s  GPU mem"]
    for row in list(rows)[:shown]:
        rank, step, phase, idle, gpu = _cells(row)
        lines.append(f"{rank:>4}  {step:>4}  {phase[:_PHASE_CHARS]:<{_PHASE_CHARS}}  {idle:>6}  {gpu}")
    if len(rows) > shown:
        lines.append(f"... {len(rows) - shown} more")
    return [line[:width] for line in lines]
