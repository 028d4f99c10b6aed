"""Strip the prefixes that launchers, schedulers and log collectors put before a log message.

A message reaches a log with up to several prefixes stacked in front of it, outermost first:
a CloudWatch column (`  | 2024-08-23T22:22:58.879Z | `), a Slurm `srun -l` task label (`10: `),
a Ray actor tag (`(WorkerDict pid=123) `, vLLM's `(VllmWorker rank=1 pid=254) `), torchrun's rank
tag (`[rank3]: `, or `[default0]:` from `--tee`), a c10 / glog header
(`[E1218 10:01:02.123456 123 ProcessGroupNCCL.cpp:629] `), a vLLM header
(`INFO 12-23 23:34:23 [gpu_worker.py:298] `), timestamps, kernel uptimes, user line counters
(`[80746] `) and ANSI colour codes. `split_prefix` removes them all and says which rank and which
stream (`source`) the line came from; the indentation after the last prefix is kept, because a
traceback's frames are told apart from its exception line by indentation.

Rank precedence: `[rankN]` (torchrun's global rank) over `rank=N` in a Ray/vLLM tag, over
`[defaultN]`, over a Slurm task label. `[defaultN]` carries torchrun's *local* rank (role name
"default" + local rank); it is returned as the rank because it is all the line says, so on a
multi-node job it is only unique per node. A Slurm label is the task id, which is the global rank
only when srun starts one task per rank (not when it starts one torchrun per node).

Typical use:
    rank, message = strip_prefix("[rank3]:[E1218 10:01:02.123456 123 ProcessGroupNCCL.cpp:629] [Rank 3] Watchdog ...")
    assert (rank, message) == (3, "[Rank 3] Watchdog ...")
    split_prefix("(WorkerDict pid=77) [rank1]: boom").source  # "(WorkerDict pid=77)[rank1]"
"""
from __future__ import annotations

import re
from typing import NamedTuple

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
_LEVEL = r"(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)"
_ISO = r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?"
# One prefix at the start of what is left of the line. Only named groups carry identity (rank,
# stream); every other branch is noise that varies from line to line (times, counters, levels).
_PREFIX = re.compile(
    r"[ \t]*(?:"
    r"\[rank(?P<rank>\d+)\]: ?"
    r"|\[default(?P<default>\d+)\]: ?"
    r"|(?P<ray>\([^()]*?\bpid=\d+[^()]*\)) ?"
    r"|(?P<raysys>\((?:raylet|gcs_server|dashboard|autoscaler|monitor)\b[^()]*\)) ?"
    r"|(?P<task>\d{1,6}): "
    r"|\|[ \t]*" + _ISO + r"[ \t]*\| ?"  # CloudWatch console column
    r"|\[?" + _ISO + r"\]?(?: ?>>| -| \|)? ?"
    r"|\[\d\d:\d\d:\d\d(?:[.,]\d+)?\] ?"
    r"|\[[EWIFD](?:\d{3,4} \d\d:\d\d:\d\d(?:\.\d+)?(?: +\d+)?)? *[\w./-]+:\d+\] ?"  # c10 / glog
    r"|[EWIFD]\d{3,4} \d\d:\d\d:\d\d(?:\.\d+)? +(?:\d+ +)?[\w./-]+:\d+\] ?"
    r"|" + _LEVEL + r" +(?:\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? +)?\[?[\w./-]+\.py:\d+\] ?"  # vLLM
    r"|" + _LEVEL + r":[\w.]*:"  # Python logging's default format
    r"|" + _LEVEL + r" - "
    r"|\[" + _LEVEL + r"(?:\|[\w.-]+:\d+)?\] ?"
    r"|\[[\w.-]+\.py:\d+(?::\w+)?\] ?"
    r"|[\w.]+: \[" + _LEVEL + r"\] ?"
    r"|\[ *\d+\.\d+\] ?"  # kernel uptime (dmesg)
    r"|[A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d [\w.-]+ [\w./-]+(?:\[\d+\])?: "  # syslog
    r"|[\w.-]+ kernel: "
    r"|\[\d+\] "  # user line counter
    r")"
)
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


def strip_prefix(line: str) -> tuple[int | None, str]:
    """`(rank, message)`: the line without its prefixes and the rank they name, if any."""
    prefix = split_prefix(line)
    return prefix.rank, prefix.message


def split_prefix(line: str) -> LinePrefix:
    """The rank, stream identity and message of one log line (see the module docstring)."""
    line = line.rstrip("\r\n")
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    if "\r" in line:  # progress bars redraw with \r: what counts is what was drawn last
        line = next((part for part in reversed(line.split("\r")) if part.strip()), "")
    rank_priority, rank, parts, pos = 0, None, [], 0
    for _ in range(_MAX_PREFIXES):
        m = _PREFIX.match(line, pos)
        if m is None or m.end() == pos:
            break
        kind = m.lastgroup
        if kind == "task" and (parts or rank is not None):
            break  # a task label is only ever the outermost identity; "12: " later is text
        pos = m.end()
        if kind is None:
            continue
        value = m.group(kind)
        parts.append(value + ":" if kind == "task" else value if kind in ("ray", "raysys") else f"[{kind}{value}]")
        priority, found = _rank_of(kind, value)
        if found is not None and priority > rank_priority:
            rank_priority, rank = priority, found
    message = line[pos:]
    if rank is None and "[rank" in message:
        # A progress bar without its \r glued in front of a rank tag: start from the tag.
        m = _RANK_ANYWHERE.search(message)
        if m:
            inner = split_prefix(message[m.start():])
            return LinePrefix(inner.rank, "".join(parts) + inner.source, inner.message)
    if message.endswith("across cluster]"):
        message = _RAY_REPEATED.sub("", message)
    return LinePrefix(rank, "".join(parts), message)


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
