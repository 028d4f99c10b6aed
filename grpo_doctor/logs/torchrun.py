"""torchrun's worker-failure reports: the ChildFailedError summary block and the agent's own lines.

The summary arrives one field per line:
    torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
    ============================================================
    train.py FAILED
    ------------------------------------------------------------
    Failures:
    [1]:
      time      : 2026-01-07_03:14:15
      host      : node-3
      rank      : 7 (local_rank: 7)
      exitcode  : -6 (pid: 40417)
      error_file: <N/A>
      traceback : Signal 6 (SIGABRT) received by PID 40417
    ------------------------------------------------------------
    Root Cause (first observed failure):
    [0]:
      ...
or collapsed onto one line (whole block or one entry) by a log collector; `split_collapsed`
cuts such a line back into the lines above. A `ChildFailedBlock` reads one stream's lines and
returns one finished entry each time an entry ends. Entries under "Root Cause" have root_cause
True. A paste that starts inside the block still yields the entries it shows.

Typical use:
    block = ChildFailedBlock()
    for index, line in enumerate(lines):
        taken, entries = block.offer(line, index)  # entries: [(fields, first line index, text)]
        if block.closed:
            break
    entries = block.finish()  # the entry still open when the log ends
"""
from __future__ import annotations

import re
from typing import Any

from grpo_doctor.logs.units import signal_name

BLOCK_STARTS = ("ChildFailedError", "Root Cause (first observed failure)")
_FIELD = re.compile(r"^\s*(time|host|rank|exitcode|error_file|traceback)\s*:\s?(.*?)\s*$")
_ENTRY = re.compile(r"^\s*\[(\d+)\]:\s*$")
_SEPARATOR = re.compile(r"^\s*(?:={5,}|-{5,})\s*$")
_TITLE = re.compile(r"^\s*(\S.*?) FAILED\s*$")
_RANK = re.compile(r"(-?\d+)\s*\(local_rank:\s*(-?\d+)\)")
_EXIT = re.compile(r"(-?\d+)\s*\(pid:\s*(\d+)\)")
_SIGNAL = re.compile(r"Signal (\d+) \((SIG\w+)\) received by PID (\d+)")
RANK_FIELD = re.compile(r"(?<![\w(])rank\s*:\s*-?\d+\s*\(local_rank:")
# torchrun pads field names to 10 characters; a paste that starts inside the block shows these.
_TIME_OR_HOST = re.compile(r"^\s*(?:time|host) {6}: \S")
# The agent's line in every shape seen: "... of binary: /usr/bin/python", "... of fn: main
# (start_method: spawn)" (torch.multiprocessing), cut after "of" by the Rich log handler that
# accelerate installs (the rest on the next line), or "(process ID: N)" for "(pid: N)".
_AGENT = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (-?\d+) \((?:pid|process ID): (\d+)\)"
                    r"(?: of (?:binary(?: located at)?|fn):? ?(\S*))?")
_SPLIT = re.compile(
    r"\s+(?=(?<![\w(])(?:time|host|rank|exitcode|error_file|traceback)\s*:\s)"
    r"|\s*(?=\[\d+\]:)|\s*(?:={5,}|-{5,})\s*|\s+(?=Failures:|Root Cause \(first)"
)
_MAX_ENTRY_LINES = 200  # an error_file traceback can be long; keep the entry's memory bounded


def opens_block(text: str) -> bool:
    """True for a line that starts the block, or shows a paste starts inside one."""
    return (any(s in text for s in BLOCK_STARTS) or RANK_FIELD.search(text) is not None
            or _TIME_OR_HOST.match(text) is not None)


def is_collapsed(text: str) -> bool:
    """True for a line holding several fields of the block (a collector joined its lines)."""
    return "exitcode" in text and "host" in text and RANK_FIELD.search(text) is not None


def split_collapsed(text: str) -> list[str]:
    pieces = _SPLIT.split(text)
    return [p for p in pieces if p] + ["-----"]  # the collapsed entry ends with its line


# DeepSpeed's launcher: "[launch.py:321:sigkill_handler] ['python', '-u', 'train.py', '--local_rank=4', ...]
# exits with return code = 1": the local rank is in the command line it prints.
_DEEPSPEED = re.compile(r"exits with return code = (-?\d+)")
_DEEPSPEED_RANK = re.compile(r"--local_rank=(\d+)")


def parse_deepspeed_line(text: str) -> dict[str, Any] | None:
    m = _DEEPSPEED.search(text) if "sigkill_handler" in text or "--local_rank=" in text else None
    if m is None:
        return None
    exitcode, rank = int(m.group(1)), _DEEPSPEED_RANK.search(text)
    return {"origin": "deepspeed", "exitcode": exitcode, "local_rank": int(rank.group(1)) if rank else None,
            "signal": signal_name(exitcode), "root_cause": None}


def parse_agent_line(text: str) -> dict[str, Any] | None:
    """The agent's `failed (exitcode: -9) local_rank: 3 (pid: 4242) of binary: /usr/bin/python` (see _AGENT)."""
    m = _AGENT.search(text)
    if m is None:
        return None
    exitcode = int(m.group(1))
    binary = m.group(4) or None
    return {"origin": "agent", "exitcode": exitcode, "local_rank": int(m.group(2)), "pid": int(m.group(3)),
            "binary": binary, "signal": signal_name(exitcode), "root_cause": None}


class ChildFailedBlock:
    """The summary block of one stream, read line by line; `closed` once its last line is read."""

    def __init__(self) -> None:
        self.closed = False
        self._root_cause = False
        self._script: str | None = None
        self._entry: dict[str, Any] | None = None
        self._entry_start = 0
        self._entry_lines: list[str] = []
        self._in_traceback = False
        self.last_line_index = 0

    def offer(self, text: str, line_index: int) -> tuple[bool, list[tuple[dict[str, Any], int, str]]]:
        """(whether `text` belongs to the block, entries it finished)."""
        done: list[tuple[dict[str, Any], int, str]] = []
        self.last_line_index = line_index
        if _SEPARATOR.match(text):
            self._finish(done)
            if self._root_cause:
                self.closed = True
            return True, done
        if text.strip().startswith("Root Cause (first observed failure)"):
            self._finish(done)
            self._root_cause = True
            return True, done
        if "ChildFailedError" in text or text.strip() in ("Failures:", "<NO_OTHER_FAILURES>"):
            return True, done
        title = _TITLE.match(text)
        if title and self._entry is None:
            self._script = title.group(1)
            return True, done
        entry = _ENTRY.match(text)
        if entry:
            self._finish(done)
            self._start(line_index, text)
            return True, done
        field = _FIELD.match(text)
        if field:
            if self._entry is None:
                self._start(line_index, text)
            self._set(field.group(1), field.group(2))
            self._add_line(text)
            return True, done
        if self._entry is not None and self._in_traceback and text.startswith(" "):
            self._add_line(text)  # an error_file's traceback, indented under its field
            return True, done
        self._finish(done)  # anything else: the block has ended (or the paste stopped mid-block)
        self.closed = True
        return False, done

    def finish(self) -> list[tuple[dict[str, Any], int, str]]:
        done: list[tuple[dict[str, Any], int, str]] = []
        self._finish(done)
        self.closed = True
        return done

    def _start(self, line_index: int, text: str) -> None:
        self._entry = {"origin": "summary", "root_cause": self._root_cause, "script": self._script}
        self._entry_start, self._entry_lines, self._in_traceback = line_index, [], False
        if _ENTRY.match(text):
            self._add_line(text)

    def _add_line(self, text: str) -> None:
        if len(self._entry_lines) < _MAX_ENTRY_LINES:
            self._entry_lines.append(text.strip())

    def _set(self, name: str, value: str) -> None:
        entry = self._entry
        assert entry is not None
        self._in_traceback = name == "traceback"
        if name == "rank":
            m = _RANK.search(value)
            if m:
                entry["rank"], entry["local_rank"] = int(m.group(1)), int(m.group(2))
        elif name == "exitcode":
            m = _EXIT.search(value)
            if m:
                entry["exitcode"], entry["pid"] = int(m.group(1)), int(m.group(2))
                entry.setdefault("signal", signal_name(entry["exitcode"]))
        else:
            entry[name] = value
            sig = _SIGNAL.search(value) if name == "traceback" else None
            if sig:
                entry["signal"] = sig.group(2)

    def _finish(self, done: list[tuple[dict[str, Any], int, str]]) -> None:
        entry, self._entry = self._entry, None
        # An entry says which worker failed; a lone "host : x" is some other program's table.
        if entry is not None and ("exitcode" in entry or "rank" in entry):
            done.append((entry, self._entry_start, "\n".join(self._entry_lines)))
