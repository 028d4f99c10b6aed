"""Whether a JSON object read back from a run directory has the shapes its writer gives it.

The files one part of grpo-doctor writes and another reads (watch's summary and hang reports,
run.json, the probe's results) are input like any other: edited by hand, cut by a full disk into
valid JSON of the wrong shape, or written by another version. A type's `from_dict` checks each known
field against a table of these checks before building anything and raises `FormatError` naming the
first field that does not fit; a field that is absent takes its default (an older file), a field
this version does not know is never read.

Typical use:
    FIELDS = {"host": opt(str), "ranks": by_rank({"pid": opt(int)}), "culprits": list_of(is_rank)}
    check_object(data, FIELDS)   # raises FormatError("field ranks is an object of an unexpected shape")
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grpo_doctor.schema.field_checks import MAX_WORLD_SIZE, within_depth

# Far deeper than any of these files is written (a stack's frames are 4 levels down), far shallower
# than a recursion limit.
MAX_DEPTH = 16

Check = Callable[[Any], bool]


class FormatError(ValueError):
    """A file read back does not have the shape its writer gives it; the message names what is wrong."""


def opt(*types: type) -> Check:
    """None, or a value of exactly one of `types` (a bool is no int here)."""
    return lambda v: v is None or (type(v) in types)


def list_of(check: Check) -> Check:
    """None, or a list whose items pass `check` and are not null."""
    return lambda v: v is None or (type(v) is list and all(check(x) and x is not None for x in v))


def is_rank(value: Any) -> bool:
    """A rank as the files hold it: an int, or its decimal digits as an object key."""
    if type(value) is str:
        if not value.isdecimal() or len(value) > 7:
            return False
        value = int(value)
    return type(value) is int and 0 <= value < MAX_WORLD_SIZE


def by_rank(fields: dict[str, Check] | None = None, value: Check | None = None) -> Check:
    """None, or an object {rank: value}: each value an object whose `fields` pass, or passing `value`."""
    def check(v: Any) -> bool:
        if v is None:
            return True
        if type(v) is not dict or not all(is_rank(k) for k in v):
            return False
        if value is not None:
            return all(value(x) for x in v.values())
        return all(type(x) is dict and fields_problem(x, fields or {}) is None for x in v.values())
    return check


def dict_of(value: Check) -> Check:
    """None, or an object with string keys whose values pass `value`."""
    return lambda v: v is None or (type(v) is dict and all(type(k) is str and value(x) for k, x in v.items()))


def check_object(data: Any, fields: dict[str, Check], max_depth: int = MAX_DEPTH) -> dict[str, Any]:
    """`data` itself when it is an object whose known fields pass their checks; else FormatError."""
    if type(data) is not dict:
        raise FormatError(f"holds {json_type(data)}, not an object")
    if not within_depth(data, max_depth):
        raise FormatError(f"nested more than {max_depth} levels deep")
    problem = fields_problem(data, fields)
    if problem is not None:
        raise FormatError(problem)
    return data


def fields_problem(data: dict, fields: dict[str, Check]) -> str | None:
    for name, check in fields.items():
        if name in data and not check(data[name]):
            return f"field {name} is {json_type(data[name])} of an unexpected shape"
    return None


def int_keys(data: dict[str, Any] | None) -> dict[int, Any]:
    """{"3": x} as {3: x}, sorted by rank (JSON object keys are strings)."""
    return dict(sorted((int(k), v) for k, v in (data or {}).items()))


def str_keys(data: dict[int, Any]) -> dict[str, Any]:
    """{3: x} as {"3": x}, sorted by rank, for writing."""
    return {str(k): v for k, v in sorted(data.items())}


def json_type(value: Any) -> str:
    names = {type(None): "null", bool: "a boolean", int: "a number", float: "a number", str: "a string",
             list: "an array", dict: "an object"}
    return names.get(type(value), type(value).__name__)
