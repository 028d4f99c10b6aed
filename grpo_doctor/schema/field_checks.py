"""Whether a record read from a rank file holds the types its schema declares, and sane numbers.

A rank file is input like any other: a collector may splice in garbage that is valid JSON, an
older or hand-written tool may write `"metrics": null`, and a single corrupt header may claim a
world size of a billion. Every reader of records (rules, the report, `summary`) trusts the types
in schema.py, so a record whose fields do not have them is a bad line, judged once, here, with
the field named. Numbers that size something (world size, rank numbers) are checked against
bounds no real job comes near.

Typical use:
    problem = wrong_value(Step, values)    # None, or "step field metrics: null is not of type dict"
    if problem: count it as a bad line     # (runlog/decoder.py judges every line so)
"""
from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from enum import Enum
from typing import Any

from grpo_doctor.schema import Header, Record, Step, UnknownRecord
from grpo_doctor.schema.records import cache_by_class, omitted_when_none

# Larger than any job grpo-doctor is meant for (the largest public GRPO runs use thousands of GPUs);
# a larger world size or rank number is corruption, and must not size a list, a set or a table.
MAX_WORLD_SIZE = 1 << 17
# Nesting a record of a kind this version does not know may hold: records are flat, a few levels at most.
MAX_UNKNOWN_DEPTH = 32

Check = Callable[[Any], bool]
_SCALAR_TYPES = (str, int, float, bool, type(None))
# The rank side writes any scalar as a metric, bools included (recorder._SCALARS).
_OVERRIDES: dict[tuple[type, str], Check] = {
    (Step, "metrics"): lambda v: type(v) is dict and all(type(k) is str and type(x) in _SCALAR_TYPES
                                                         for k, x in v.items()),
}


def wrong_field(record: Record | UnknownRecord) -> str | None:
    """What is wrong with the record's fields (the first field found), or None when nothing is."""
    if isinstance(record, UnknownRecord):
        if not within_depth(record.data, MAX_UNKNOWN_DEPTH):
            return f"{record.kind} record nested more than {MAX_UNKNOWN_DEPTH} levels deep"
        return None
    return wrong_value(type(record), vars(record))


def wrong_value(cls: type[Record], values: dict[str, Any]) -> str | None:
    """`wrong_field` for a record's values by field name, before any record is built (the decoder
    judges every line so). A field left out of `values` is None (records.OMITTED_WHEN_NONE)."""
    if values_hold(cls)(values):  # the usual case: one generated expression, no call per field
        return None
    for name, check in _checks(cls):
        value = values.get(name)
        if not check(value):
            return f"{cls.KIND.value} field {name}: {_show(value)} is not of type {_expected(cls, name)}"
    rank = values["rank"]
    return f"{cls.KIND.value} field rank: {rank} is out of range (0 to {MAX_WORLD_SIZE - 1})"


@cache_by_class
def values_hold(cls: type[Record]) -> Callable[[dict[str, Any]], bool]:
    return _generated_test(cls, within_int64=False)


@cache_by_class
def values_hold_within_int64(cls: type[Record]) -> Callable[[dict[str, Any]], bool]:
    """`values_hold`, and every value of a float field short of 2**63 in size: an integer written
    there past int64 is one orjson reads as a float (json as an int), so only such a line needs
    json's reading. A NaN or an infinity fails too: such a line is judged the slow way (rare)."""
    return _generated_test(cls, within_int64=True)


def _generated_test(cls: type[Record], within_int64: bool) -> Callable[[dict[str, Any]], bool]:
    """One function testing every field of `cls` in a dict of its values, generated from the
    declaration: a plain type test inline where the annotation is simple (`int | None`), the field's
    check called where not. A third of the cost of a call per field, on millions of lines. True
    where `wrong_value` finds nothing wrong."""
    hints = typing.get_type_hints(cls)
    namespace: dict[str, Any] = {"MAX_WORLD_SIZE": MAX_WORLD_SIZE, "INT64_SIZE": 2.0**63}
    terms = []
    for i, (name, check) in enumerate(_checks(cls)):
        value = f"v.get({name!r})" if name not in _always_written(cls) else f"v[{name!r}]"
        allowed = _simple_types(hints[name]) if (cls, name) not in _OVERRIDES else None
        optional = _optional_part(hints[name]) if (cls, name) not in _OVERRIDES else None
        if allowed is not None:
            namespace[f"t{i}"] = allowed
            terms.append(f"type({value}) in t{i}")
            if within_int64 and float in allowed:  # abs(NaN) < x is False too: a NaN takes the slow way
                size = f"abs({value}) < INT64_SIZE"
                terms.append(f"({value} is None or {size})" if type(None) in allowed else size)
        elif optional is not None:  # `list[int] | None`: mostly None, which needs no call
            namespace[f"c{i}"] = _check_for(optional)
            terms.append(f"({value} is None or c{i}({value}))")
        else:
            namespace[f"c{i}"] = check
            terms.append(f"c{i}({value})")
    terms.append('0 <= v["rank"] < MAX_WORLD_SIZE')
    exec(f"def all_hold(v):\n    return {' and '.join(terms)}\n", namespace)  # noqa: S102 - our own declaration
    return namespace["all_hold"]


def _simple_types(hint: Any) -> frozenset[type] | None:
    """The exact types a value of a simple annotation (int, float, str, bool, None and unions of them) may have."""
    args = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    if not all(a in _SIMPLE for a in args):
        return None
    return frozenset(t for a in args for t in _SIMPLE[a])


def _optional_part(hint: Any) -> Any:
    """X for an annotation `X | None`, else None."""
    args = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else ()
    rest = [a for a in args if a is not type(None)]
    return rest[0] if len(args) == 2 and len(rest) == 1 else None


@cache_by_class
def _always_written(cls: type[Record]) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls)) - frozenset(omitted_when_none(cls))


def sane_world_size(header: Header) -> bool:
    return 1 <= header.world_size <= MAX_WORLD_SIZE


def within_depth(value: Any, max_depth: int) -> bool:
    """Whether lists and dicts nest at most `max_depth` levels (iterative: no recursion to overflow)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = item.values()
        elif not isinstance(item, list):
            continue
        if depth > max_depth:
            return False
        stack.extend((v, depth + 1) for v in item if isinstance(v, dict | list))
    return True


@cache_by_class
def _checks(cls: type[Record]) -> tuple[tuple[str, Check], ...]:
    hints = typing.get_type_hints(cls)
    return tuple((f.name, _OVERRIDES.get((cls, f.name)) or _check_for(hints[f.name])) for f in dataclasses.fields(cls))


def _check_for(hint: Any) -> Check:
    """A predicate for values of the annotated type, as JSON decodes them (a float field takes an
    int, which JSON writes for 2.0; a bool is no int here: `true` where a count belongs is garbage)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return lambda v: type(v) in _SCALAR_TYPES
    if hint is type(None):
        return lambda v: v is None
    if origin in (typing.Union, types.UnionType):
        if all(a in _SIMPLE for a in args):  # the usual `int | None`: one set lookup, no call per part
            allowed = frozenset(t for a in args for t in _SIMPLE[a])
            return lambda v: type(v) in allowed
        parts = [_check_for(a) for a in args]
        return lambda v: any(p(v) for p in parts)
    if hint is int:
        return lambda v: type(v) is int
    if hint is float:
        return lambda v: type(v) is float or type(v) is int
    if hint is str:
        return lambda v: type(v) is str
    if isinstance(hint, type) and issubclass(hint, Enum):  # read back as its str value
        return lambda v: isinstance(v, str)
    if hint is bool:
        return lambda v: type(v) is bool
    if origin is dict:
        key, value = (_check_for(a) for a in args)
        return lambda v: type(v) is dict and all(key(k) and value(x) for k, x in v.items())
    if origin is list:
        item = _check_for(args[0])
        return lambda v: type(v) is list and all(item(x) for x in v)
    raise TypeError(f"no check for {hint!r}")  # a new annotation in schema.py: add it above


# The JSON types each simple annotation takes (a float field takes an int: JSON writes 2.0 as 2 at times).
_SIMPLE: dict[Any, tuple[type, ...]] = {int: (int,), float: (int, float), str: (str,), bool: (bool,),
                                        type(None): (type(None),)}


def _expected(cls: type[Record], name: str) -> str:
    hint = typing.get_type_hints(cls)[name]
    text = hint.__name__ if isinstance(hint, type) else str(hint)
    return text.replace("typing.", "").replace("grpo_doctor.schema.", "")


def _show(value: Any) -> str:
    text = "null" if value is None else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
