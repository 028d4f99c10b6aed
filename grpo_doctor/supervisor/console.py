"""watch's terminal: the job's output unchanged, grpo-doctor's notes, and a live per-rank panel.

On a terminal the panel sits below the job's output: it is erased before each write of the
job's bytes and drawn again after a complete line, so the job's output is never interleaved
with it. It is drawn with rich (panel.py): fitted to the terminal's width and height, coloured
unless NO_COLOR is set. Without a terminal on both stdout and stderr (a log file, CI, `| tee`)
there is no panel and no escape code, only plain `grpo-doctor:` lines and a status line every
`plain_every_s`. Notes and the panel carry run data (phase names, host names, stacks, matched
output lines): they are made terminal-safe here, once for every caller, so an escape sequence in
a phase name is shown as text; the job's own bytes pass unchanged. Nothing here raises into
watch for its own output: a panel that cannot be drawn falls back to plain lines, and a stderr
that cannot be written to (closed, a full pipe) loses the note, not the supervision.

Typical use:
    console = Console()   # a panel when stdout and stderr are terminals, plain lines otherwise
    console.write_child("stdout", b"step 3 loss 0.1\n")
    console.note("rank 3 is gone without an end record")
    console.panel(rows)   # rows of (rank, step, phase, idle_s, gpu_mem_bytes)
    console.fold_child_output()   # watch is ending the job: its reaction is saved, not shown
"""
from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Sequence

from grpo_doctor.logs.terminal_text import terminal_safe
from grpo_doctor.supervisor.panel import MAX_PANEL_RANKS, PanelRow, panel_lines, status_line

__all__ = ["Console", "MAX_PANEL_RANKS", "on_terminal"]


def on_terminal() -> bool:
    """Whether a live panel can be drawn: stdout and stderr both terminals, and not TERM=dumb.

    Both, because with `watch ... | tee log` the job's output reaches the same screen through
    tee, out of step with the panel's erasing, and the log would hold the panel's escape codes.
    """
    try:
        return sys.stdout.isatty() and sys.stderr.isatty() and os.environ.get("TERM", "") != "dumb"
    except (AttributeError, ValueError):  # replaced or closed streams
        return False


class Console:
    def __init__(self, tty: bool | None = None, plain_every_s: float = 60.0, node: str | None = None) -> None:
        self.tty = on_terminal() if tty is None else tty
        # "grpo-doctor [node 1/4]: ": srun merges every node's output into one log.
        self._prefix = f"grpo-doctor [{terminal_safe(node)}]: " if node else "grpo-doctor: "
        # Re-entrant: watch's signal handler notes on the main thread, which may be drawing the panel.
        self._lock = threading.RLock()
        self._panel: list[str] = []
        self._drawn = 0
        self._at_line_start = True
        self._plain_every_s = plain_every_s
        self._last_plain = time.monotonic()
        self._folding = False
        self.folded_lines = 0  # lines of the job's output kept off the terminal after watch ended it

    def fold_child_output(self) -> None:
        """From now on the job's output is only saved, not shown: what a job prints while watch ends it
        (torchrun's SignalException traceback, every rank's KeyboardInterrupt) is watch's own doing,
        dozens of lines burying the verdict. They are counted for one line at the end."""
        with self._lock:
            self._folding = True

    def write_child(self, stream: str, data: bytes) -> None:
        out = sys.stdout if stream == "stdout" else sys.stderr
        with self._lock:
            if self._folding:
                self.folded_lines += data.count(b"\n")
                return
            self._erase()
            out.buffer.write(data)
            out.flush()
            self._at_line_start = data.endswith((b"\n", b"\r"))
            self._draw()

    def note(self, message: str) -> None:
        with self._lock:
            self._erase()
            text = f"{self._prefix}{terminal_safe(message)}\n"
            if not self._at_line_start:
                text = "\n" + text
                self._at_line_start = True
            self._write(text)
            self._draw()

    def panel(self, rows: Sequence[PanelRow]) -> None:
        with self._lock:
            if self.tty:
                lines = panel_lines(rows)
                self._erase()
                self._panel = lines
                self._draw()
            elif time.monotonic() - self._last_plain >= self._plain_every_s and rows:
                self._last_plain = time.monotonic()
                self._write(f"{self._prefix}{status_line(rows)}\n")

    def close(self) -> None:
        with self._lock:
            self._erase()
            self._panel = []

    def _erase(self) -> None:
        if self._drawn:
            # Cursor up over the panel, then clear to the end of the screen.
            drawn, self._drawn = self._drawn, 0
            self._write(f"\r\x1b[{drawn}A\x1b[J")

    def _draw(self) -> None:
        if self.tty and self._panel and self._at_line_start and self._write("\n".join(self._panel) + "\n"):
            self._drawn = len(self._panel)

    @staticmethod
    def _write(text: str) -> bool:
        """Writes grpo-doctor's own text to stderr; False, never an exception, when it cannot."""
        try:
            sys.stderr.write(text)
            sys.stderr.flush()
        except (OSError, ValueError):  # closed or broken stderr: the note is lost, watch goes on
            return False
        return True
