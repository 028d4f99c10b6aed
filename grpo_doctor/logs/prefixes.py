"""Strip the prefixes that launchers, schedulers and log collectors put before a log message.

A message reaches a log with up to several prefixes stacked in front of it, outermost first:
a CloudWatch column (`  | 2024-08-23T22:22:58.879Z | `), a Slurm `srun -l` task label (`10: `),
a Ray actor tag (`(WorkerDict pid=123) `, vLLM's `(VllmWorker rank=1 pid=254) `), torchrun's rank
tag (`[rank3]: `, or `[default0]:` from `--tee`), a c10 / glog header
(`[E1218 10:01:02.123456 123 ProcessGroupNCCL.cpp:629] `), a vLLM header
(`INFO 12-23 23:34:23 [gpu_worker.py:298] `), accelerate's `stderr: `, timestamps (a CI log's "Jul 13 21:22:34 " too), kernel uptimes, user line counters
(`[80746] `) and ANSI colour codes. `split_prefix` removes them all and says which rank and which
stream (`source`) the line came from; the indentation after the last prefix is kept, because a
traceback's frames are told apart from its exception line by indentation.

Rank precedence: `[rankN]` (torchrun's global rank) over `rank=N` in a Ray/vLLM tag, over
`[defaultN]`, over a Slurm task label. `[defaultN]` carries torchrun's *local* rank (role name
"default" + local rank); it is returned as the rank because it is all the line says, so on a
multi-node job it is only unique per node. A Slurm label is the task id, which is the global rank
only when srun starts one task per rank (not when it starts one torchrun per node).

Typical use:
    line = split_prefix("[rank3]:[E1218 10:01:02.123456 123 ProcessGroupNCCL.cpp:629] [Rank 3] Watchdog ...")
    assert (line.rank, line.message) == (3, "[Rank 3] Watchdog ...")
    split_prefix("(WorkerDict pid=77) [rank1]: boom").source  # "(WorkerDict pid=77)[rank1]"
"""
from __future__ import annotations

import re
from typing import NamedTuple

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
_LEVEL = r"(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)"
_ISO = r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?"
# The prefixes, grouped by the character they start with, so that a line is tried only against
# the few that can match where it stands (one big alternation tried at every step cost several
# microseconds a line). Only named groups carry identity (rank, stream); the other branches are
# noise that varies from line to line (times, counters, levels, source locations).
_BRACKET = re.compile(
    r"\[rank(?P<rank>\d+)\]: ?"
    r"|\[default(?P<default>\d+)\]: ?"
    r"|(?P<time>\[" + _ISO + r"\](?: ?>>)? ?|\[\d\d:\d\d:\d\d(?:[.,]\d+)?\] ?)"
    r"|\[[EWIFD](?:\d{3,4} \d\d:\d\d:\d\d(?:\.\d+)?(?: +\d+)?)? *[\w./-]+:\d+\] ?"  # c10 / glog
    r"|\[" + _LEVEL + r"(?:\|[\w.-]+:\d+)?\] ?"
    r"|\[[\w.-]+\.py:\d+(?::\w+)?\] ?"
    r"|\[ *\d+\.\d+\] ?"  # kernel uptime (dmesg)
    r"|\[\d+\] "  # user line counter
)
_PAREN = re.compile(
    r"(?P<ray>\([^()]*?\bpid=\d+[^()]*\)) ?"
    r"|(?P<raysys>\((?:raylet|gcs_server|dashboard|autoscaler|monitor)\b[^()]*\)) ?"
)
_DIGIT = re.compile(r"(?P<task>\d{1,6}): |(?P<time>" + _ISO + r"(?: ?>>| -| \|)? ?)")
_PIPE = re.compile(r"\|[ \t]*" + _ISO + r"[ \t]*\| ?")  # CloudWatch console column
_LETTER = re.compile(
    r"[EWIFD]\d{3,4} \d\d:\d\d:\d\d(?:\.\d+)? +(?:\d+ +)?[\w./-]+:\d+\] ?"  # glog without brackets
    r"|" + _LEVEL + r" +(?:\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? +)?\[?[\w./-]+\.py:\d+\] ?"  # vLLM
    r"|" + _LEVEL + r":[\w.]*:"  # Python logging's default format
    r"|" + _LEVEL + r" - "
    r"|std(?:err|out): "  # accelerate's subprocess output ("stderr: Traceback ...")
    # syslog's "Dec  2 11:38:47 " (its host and program follow: _AFTER_TIME), and the same time alone before
    # every line of a CI log ("Jul 13 21:22:34     work.wait()")
    r"|(?P<time>(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +\d{1,2} \d\d:\d\d:\d\d(?:[.,]\d+)? )"
)
# Only right after a timestamp: a logger name or a host name, which could start any message.
_AFTER_TIME = re.compile(r"[\w.]+: \[" + _LEVEL + r"\] ?|[\w.-]+ (?:kernel|[\w./-]+\[\d+\]): ")
_BY_FIRST = {"[": _BRACKET, "(": _PAREN, "|": _PIPE, **{d: _DIGIT for d in "0123456789"}}
# How a _LETTER prefix begins: a glog letter + digit is checked apart, the rest are these words.
_LETTER_WORDS = ("DEBUG", "INFO", "WARN", "ERROR", "CRITICAL", "FATAL", "stderr: ", "stdout: ", "Jan ", "Feb ", "Mar ", "Apr ", "May ",
                 "Jun ", "Jul ", "Aug ", "Sep ", "Oct ", "Nov ", "Dec ")
_RAY_RANK = re.compile(r"\brank=(\d+)")
_RANK_ANYWHERE = re.compile(r"\[rank\d+\]:")
_RAY_REPEATED = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")
_MAX_PREFIXES = 10


class LinePrefix(NamedTuple):
    """What a line's prefixes say: `rank` (None when no prefix names one), `source` (the
    identity part of the prefixes, e.g. `(WorkerDict pid=77)[rank1]`, "" for none: lines with the
    same source come from the same stream) and `message` (the line without them)."""

    rank: int | None
    source: str
    message: str


def split_prefix(line: str) -> LinePrefix:
    """The rank, stream identity and message of one log line (see the module docstring)."""
    return LinePrefix(*split_prefix_tuple(line))


def split_prefix_tuple(line: str) -> tuple[int | None, str, str]:
    """`split_prefix` as a plain tuple, for the scanner's hot path (a NamedTuple costs more to make)."""
    if line.endswith("\n"):
        line = line.rstrip("\r\n")
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    if "\r" in line:  # progress bars redraw with \r: what counts is what was drawn last
        line = next((part for part in reversed(line.split("\r")) if part.strip()), "")
    rank_priority, rank, parts, pos, after_time = 0, None, [], 0, False
    for _ in range(_MAX_PREFIXES):
        m = _match_prefix(line, pos, after_time)
        if m is None:
            break
        kind = m.lastgroup
        if kind == "task" and (parts or rank is not None):
            break  # a task label is only ever the outermost identity; "12: " later is text
        pos, after_time = m.end(), kind == "time"
        if kind is None or kind == "time":
            continue
        value = m.group(kind)
        parts.append(value + ":" if kind == "task" else value if kind in ("ray", "raysys") else f"[{kind}{value}]")
        priority, found = _rank_of(kind, value)
        if found is not None and priority > rank_priority:
            rank_priority, rank = priority, found
    message = line[pos:] if pos else line
    if rank is None and "[rank" in message:
        # A progress bar without its \r glued in front of a rank tag: start from the tag.
        m = _RANK_ANYWHERE.search(message)
        if m:
            inner_rank, inner_source, inner_message = split_prefix_tuple(message[m.start():])
            return inner_rank, "".join(parts) + inner_source, inner_message
    if message.endswith("across cluster]"):
        message = _RAY_REPEATED.sub("", message)
    return rank, "".join(parts), message


def _match_prefix(line: str, pos: int, after_time: bool) -> re.Match[str] | None:
    start = pos
    while start < len(line) and line[start] in " \t":  # a prefix may stand after spaces
        start += 1
    if start == len(line):
        return None
    pattern = _BY_FIRST.get(line[start])
    if pattern is None and (line[start] in "EWIFD" and line[start + 1:start + 2].isdigit()
                            or line.startswith(_LETTER_WORDS, start)):
        pattern = _LETTER  # most messages start with a letter: screened before any regex
    m = pattern.match(line, start) if pattern is not None else None
    if m is None and after_time:
        m = _AFTER_TIME.match(line, start)
    return m


def _rank_of(kind: str, value: str) -> tuple[int, int | None]:
    if kind == "rank":
        return 4, int(value)
    if kind == "ray":
        m = _RAY_RANK.search(value)
        return 3, int(m.group(1)) if m else None
    if kind == "default":
        return 2, int(value)
    if kind == "task":
        return 1, int(value)
    return 0, None
