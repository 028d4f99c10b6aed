"""py-spy's text dumps, as pasted into logs, read back into `StackCapture`s (and written out).

People hang-debug by running `py-spy dump --pid N` and pasting the output, or a launcher runs
it on every rank and its lines land in the job's combined log. Such a dump reads:
    Process 6866: /usr/bin/python3 -u train.py
    Python v3.11.7 (/usr/bin/python3.11)

    Thread 6866 (idle): "MainThread"
        all_reduce (torch/distributed/distributed_c10d.py:3252)
        train_step (train.py:88)
In a log every line may carry a prefix (`[rank3]: `, a timestamp, a Slurm task label); the
prefix of the `Process N:` line is taken as the dump's own, and later lines belong to the dump
only if they carry the same prefix, timestamps and line counters aside, so dumps of several
ranks interleaved in one stream are told apart. `--native` frames (`clock_nanosleep (libc.so.6)`)
are kept; `--locals` lines are skipped. A paste that starts after its `Process` line still
yields its threads (pid -1); one cut off mid-thread yields what it has.

Typical use:
    for cap in parse_pyspy_text(Path("job.log").read_text(errors="replace")):
        print(cap.rank, cap.pid, cap.main_thread().frames[0])
    text = format_pyspy_text(cap)   # the same shape py-spy prints, for saving next to the JSON
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from grpo_doctor.schema.stacks import Frame, StackCapture, ThreadStack, display_path

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_PROCESS = re.compile(r"Process (\d+): (.*?)\s*$")
_THREAD = re.compile(r"Thread (0x[0-9A-Fa-f]+|\d+) \(([a-z+]+)\)(?:: \"(.*)\")?\s*$")
_PYTHON = re.compile(r"Python v\d")
# Exactly four spaces: deeper lines are --locals output ("        self: <Trainer at 0x7f..>").
_FRAME = re.compile(r" {4}(?! )(.+?) \(([^()]*?)(?::(\d+))?\)\s*$")
_ERROR = re.compile(r"Error: (.+?)\s*$")
# Parts of a prefix that change from line to line although the source is the same: timestamps
# (2024-08-23T22:22:58.879Z, 10:01:02.123456, 12-23 23:34:23) and bracketed line counters
# ([80746]). Everything else (rank tags, task labels, pids) must match exactly.
_VARYING = re.compile(
    r"\d{1,4}[-/:.]\d{1,2}(?:[-/:T ]\d{1,2})*(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?|\[\d+\]"
)
_RANK_TAG = re.compile(r"\[rank\s*(\d+)\]", re.IGNORECASE)


def parse_pyspy_text(text: str) -> list[StackCapture]:
    """Every py-spy dump found in `text`, in order of appearance; lines not in a dump are ignored."""
    dumps: list[_Dump] = []
    for raw in text.splitlines():
        line = _ANSI.sub("", raw)
        process = _PROCESS.search(line)
        if process:
            dumps.append(_start(dumps, line[: process.start()], int(process.group(1)), process.group(2)))
            continue
        if any(d.offer(line) for d in reversed(dumps) if d.open):
            continue
        thread = _THREAD.search(line)
        if thread:  # the paste starts after this dump's Process line
            dumps.append(_start(dumps, line[: thread.start()], pid=-1, command=""))
            dumps[-1].offer(line)
    return [d.capture() for d in dumps if d.threads or d.seen_python or d.error]


def format_pyspy_text(capture: StackCapture) -> str:
    """The capture in py-spy's own text shape (filenames shortened as py-spy does)."""
    lines = [f"Process {capture.pid}: {capture.command}".rstrip()]
    if capture.error is not None:
        lines.append(f"Error: {capture.error}")
        return "\n".join(lines) + "\n"
    lines.append("")
    for thread in capture.threads:
        state = "active" if thread.active else "idle"
        lines.append(f'Thread {thread.thread_id} ({state}): "{thread.name}"')
        for frame in thread.frames:
            where = display_path(frame.filename)
            lines.append(f"    {frame.function} ({where}:{frame.line})" if frame.line else f"    {frame.function} ({where})")
    return "\n".join(lines) + "\n"


def _start(dumps: list[_Dump], prefix: str, pid: int, command: str) -> _Dump:
    prefix_re = _prefix_regex(prefix)
    for dump in dumps:
        # A new dump from the same source ends its previous one even if no other line did.
        if dump.open and dump.prefix_re.pattern == prefix_re.pattern:
            dump.open = False
    return _Dump(prefix, prefix_re, pid=pid, command=command)


def _prefix_regex(prefix: str) -> re.Pattern[str]:
    parts, end = [], 0
    for m in _VARYING.finditer(prefix):
        parts.append(re.escape(prefix[end : m.start()]))
        parts.append(f"(?:{_VARYING.pattern})")
        end = m.end()
    parts.append(re.escape(prefix[end:]))
    return re.compile("".join(parts))


@dataclass
class _Dump:
    """One dump being read: accepts the lines that carry its prefix until one is not py-spy's."""

    prefix: str
    prefix_re: re.Pattern[str]
    pid: int
    command: str
    open: bool = True
    seen_python: bool = False
    error: str | None = None
    threads: list[ThreadStack] = field(default_factory=list)
    frames: list[Frame] = field(default_factory=list)  # of the last thread, until the next one starts

    def offer(self, line: str) -> bool:
        """True if the line was this dump's (read or deliberately skipped); may close the dump."""
        m = self.prefix_re.match(line)
        if m is None:
            return False  # another source's line interleaved: not ours, and not the end of us
        body = line[m.end():]
        if (frame := _FRAME.match(body)) and self.threads:
            self.frames.append(Frame(frame.group(1), frame.group(2), int(frame.group(3) or 0)))
        elif thread := _THREAD.match(body):
            self._finish_thread()
            tid = thread.group(1)
            self.threads.append(ThreadStack(
                thread_id=int(tid, 16) if tid.startswith("0x") else int(tid), name=thread.group(3) or "",
                active="active" in thread.group(2), frames=(),
            ))
        elif body.startswith("        ") and self.threads:
            pass  # --locals
        elif _PYTHON.match(body) and not self.threads:
            self.seen_python = True
        elif not body.strip() and not self.threads:
            pass  # py-spy's blank line between the header and the first thread
        elif (error := _ERROR.match(body)) and not self.threads:
            self.error = f"py-spy failed: {error.group(1)}"
            self.open = False
        else:
            # Anything else after our prefix (a log line, a blank line after the threads) means
            # py-spy has finished; the line itself belongs to the log, not to us.
            self.open = False
            return False
        return True

    def _finish_thread(self) -> None:
        if self.threads and self.frames:
            last = self.threads[-1]
            self.threads[-1] = ThreadStack(last.thread_id, last.name, last.active, tuple(self.frames))
        self.frames = []

    def capture(self) -> StackCapture:
        self._finish_thread()
        tag = _RANK_TAG.search(self.prefix)
        return StackCapture(
            rank=int(tag.group(1)) if tag else -1, pid=self.pid, host="", captured_t=None,
            threads=tuple(self.threads), error=self.error, command=self.command,
        )
