"""watch's terminal: the job's output unchanged, grpo-doctor's notes, and a live per-rank panel.

On a terminal the panel sits below the job's output: it is erased before each write of the
job's bytes and drawn again after a complete line, so the job's output is never interleaved
with it. Without a terminal (a log file, CI) there is no panel, only plain `grpo-doctor:` lines
and a status line every `plain_every_s`. Notes and the panel carry run data (phase names, host
names, stacks, matched output lines): they are made terminal-safe here, once for every caller, so
an escape sequence in a phase name is shown as text; the job's own bytes pass unchanged.

Typical use:
    console = Console(sys.stderr.isatty())
    console.write_child("stdout", b"step 3 loss 0.1\n")
    console.note("rank 3 is gone without an end record")
    console.panel(rows)   # rows of (rank, step, phase, idle_s, gpu_mem_bytes)
"""
from __future__ import annotations

import sys
import threading
import time
from collections.abc import Sequence

from grpo_doctor.logs.terminal_text import terminal_safe

MAX_PANEL_RANKS = 16


class Console:
    def __init__(self, tty: bool, plain_every_s: float = 60.0) -> None:
        self.tty = tty
        # Re-entrant: watch's signal handler notes on the main thread, which may be drawing the panel.
        self._lock = threading.RLock()
        self._panel: list[str] = []
        self._drawn = 0
        self._at_line_start = True
        self._plain_every_s = plain_every_s
        self._last_plain = time.monotonic()

    def write_child(self, stream: str, data: bytes) -> None:
        out = sys.stdout if stream == "stdout" else sys.stderr
        with self._lock:
            self._erase()
            out.buffer.write(data)
            out.flush()
            self._at_line_start = data.endswith((b"\n", b"\r"))
            self._draw()

    def note(self, message: str) -> None:
        with self._lock:
            self._erase()
            if not self._at_line_start:
                sys.stderr.write("\n")
                self._at_line_start = True
            sys.stderr.write(f"grpo-doctor: {terminal_safe(message)}\n")
            sys.stderr.flush()
            self._draw()

    def panel(self, rows: Sequence[tuple[int, int | None, str | None, float | None, int | None]]) -> None:
        lines = [f"grpo-doctor watch: {len(rows)} rank(s)   rank  step  phase                 idle s  GPU mem"]
        for rank, step, phase, idle_s, gpu_bytes in list(rows)[:MAX_PANEL_RANKS]:
            gpu = f"{gpu_bytes / 2**30:.1f} GiB" if gpu_bytes else "-"
            idle = f"{idle_s:.0f}" if idle_s is not None else "-"
            lines.append(f"{'':>30}{rank:>4}  {step if step is not None else '-':>4}  {terminal_safe(phase or '-')[:20]:<20}  {idle:>6}  {gpu}")
        if len(rows) > MAX_PANEL_RANKS:
            lines.append(f"{'':>30}... {len(rows) - MAX_PANEL_RANKS} more")
        with self._lock:
            if self.tty:
                self._erase()
                self._panel = lines
                self._draw()
            elif time.monotonic() - self._last_plain >= self._plain_every_s and rows:
                self._last_plain = time.monotonic()
                steps = [r[1] for r in rows if r[1] is not None]
                idle = max((r[3] or 0.0, r[0]) for r in rows)
                sys.stderr.write(
                    f"grpo-doctor: {len(rows)} rank(s), step {min(steps) if steps else '-'}"
                    f"{'' if not steps or min(steps) == max(steps) else f'-{max(steps)}'}, "
                    f"longest without progress: rank {idle[1]} {idle[0]:.0f} s\n"
                )
                sys.stderr.flush()

    def close(self) -> None:
        with self._lock:
            self._erase()
            self._panel = []

    def _erase(self) -> None:
        if self._drawn:
            # Cursor up over the panel, then clear to the end of the screen.
            sys.stderr.write(f"\r\x1b[{self._drawn}A\x1b[J" if self._drawn > 0 else "")
            sys.stderr.flush()
            self._drawn = 0

    def _draw(self) -> None:
        if self.tty and self._panel and self._at_line_start:
            sys.stderr.write("\n".join(self._panel) + "\n")
            sys.stderr.flush()
            self._drawn = len(self._panel)
