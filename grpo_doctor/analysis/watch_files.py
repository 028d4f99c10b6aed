"""Whether watch's summary.json and hang-N.json hold what the rules read from them, with the types watch writes.

These files are read back by several rules and the report (`ranks`, `culprits`, `stacks`, ...),
each trusting the shapes that `supervisor/watch.py` and `supervisor/hang.py` write. A file edited
by hand, cut by a full disk into valid JSON of the wrong shape, or written by another tool must
not stop the report: a file whose known fields do not have their types is left out, with one
warning naming the field. Fields this version does not know are kept and never read.

Typical use:
    problem = summary_problem(data)       # None, or "field ranks: '0' holds 7, not an object"
    if problem: warn and leave the file out
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grpo_doctor.schema.field_checks import MAX_WORLD_SIZE, within_depth
from grpo_doctor.schema.stacks import ThreadStack

# Far deeper than watch writes (a stack's frames are 4 levels down), far shallower than a recursion limit.
MAX_DEPTH = 16

Check = Callable[[Any], bool]


def _opt(*types: type) -> Check:
    return lambda v: v is None or (type(v) in types)


_int, _num, _str, _bool = _opt(int), _opt(int, float), _opt(str), _opt(bool)


def _list_of(check: Check) -> Check:
    return lambda v: v is None or (type(v) is list and all(check(x) and x is not None for x in v))


def _is_rank(value: Any) -> bool:
    """A rank as watch writes it: an int, or its decimal digits as an object key."""
    if type(value) is str:
        if not value.isdecimal() or len(value) > 7:
            return False
        value = int(value)
    return type(value) is int and 0 <= value < MAX_WORLD_SIZE


def _by_rank(fields: dict[str, Check] | None = None, value: Check | None = None) -> Check:
    """An object {rank: value}: each value an object whose `fields` have their types, or `value`."""
    def check(v: Any) -> bool:
        if v is None:
            return True
        if type(v) is not dict or not all(_is_rank(k) for k in v):
            return False
        if value is not None:
            return all(value(x) for x in v.values())
        return all(type(x) is dict and _fields_problem(x, fields or {}) is None for x in v.values())
    return check


def _thread(value: Any) -> bool:
    if value is None:
        return True
    if type(value) is not dict or not all(type(f) is dict and type(f.get("function")) is str
                                          and type(f.get("filename")) is str for f in value.get("frames") or []):
        return False
    try:
        ThreadStack.from_dict(value)
    except (KeyError, TypeError, ValueError):
        return False
    return True


_SUMMARY_RANK = {"pid": _int, "step": _int, "open_phase": _str, "ended": _str, "error": _str, "gone": _str}
SUMMARY_FIELDS: dict[str, Check] = {
    "host": _str, "end_t": _num, "command_status": _int, "exit_status": _int, "command_result": _str,
    "hang_ended_by_watch": _bool, "num_hangs": _int, "ranks": _by_rank(_SUMMARY_RANK),
    "signatures": lambda v: v is None or (type(v) is dict and all(type(n) is int for n in v.values())),
    "bad_event_lines": _int, "live_scan_complete": _bool, "live_scan_skipped_bytes": _int,
}
_HANG_RANK = {"pid": _int, "step": _int, "open_phase": _str, "idle_s": _num, "timeout_s": _num, "verdict": _str}
HANG_FIELDS: dict[str, Check] = {
    "host": _str, "detected_t": _num, "ranks": _by_rank(_HANG_RANK), "groups": _list_of(_str),
    "culprits": _list_of(_is_rank), "odd_ranks": _list_of(_is_rank), "stack_dirs": _list_of(_str),
    "stack_errors": _by_rank(value=_str), "ptrace_denied": _bool, "flight_recorder_files": _list_of(_str),
    "gpus": _list_of(lambda g: type(g) is dict), "stacks": _by_rank(value=_thread),
}


def summary_problem(data: Any) -> str | None:
    """What keeps a summary.json from being read, or None."""
    return _file_problem(data, SUMMARY_FIELDS)


def hang_problem(data: Any) -> str | None:
    """What keeps a hang-N.json from being read, or None."""
    return _file_problem(data, HANG_FIELDS)


def _file_problem(data: Any, fields: dict[str, Check]) -> str | None:
    if type(data) is not dict:
        return f"holds {_json_type(data)}, not an object"
    if not within_depth(data, MAX_DEPTH):
        return f"nested more than {MAX_DEPTH} levels deep"
    return _fields_problem(data, fields)


def _fields_problem(data: dict, fields: dict[str, Check]) -> str | None:
    for name, check in fields.items():
        if name in data and not check(data[name]):
            return f"field {name} is {_json_type(data[name])} of an unexpected shape"
    return None


def _json_type(value: Any) -> str:
    names = {type(None): "null", bool: "a boolean", int: "a number", float: "a number", str: "a string",
             list: "an array", dict: "an object"}
    return names.get(type(value), type(value).__name__)
