"""Slurm's host lists, expanded: `node[01-04,07]`, `gpu-a[1-2]-b[3,5]`, `n1,n[2-5,12]` -> host names.

SLURM_JOB_NODELIST and SLURM_STEP_NODELIST name a job's nodes in this compressed form; the first
name is the master address the usual `scontrol show hostnames $SLURM_JOB_NODELIST | head -n1`
gives. The grammar is Slurm's (hostlist.c, and the `Slurm::Hostlist` manual page): expressions
separated by commas or whitespace outside brackets; each a prefix with any number of bracket groups
of comma-separated numbers and `lo-hi` ranges, expanded with the first group outermost; a number
keeps the width of its range's first number, so `[08-10]` gives 08, 09, 10 and `[8-10]` 8, 9, 10.
The 3-D form of old BlueGene systems (`bgl[123x456]`) is not read: it is refused, as other
malformed lists are, with a `HostlistError` that says what is wrong.

Typical use:
    expand_hostlist("node[01-02],gpu-a[1-2]-b[3,5]")
    # ['node01', 'node02', 'gpu-a1-b3', 'gpu-a1-b5', 'gpu-a2-b3', 'gpu-a2-b5']
"""
from __future__ import annotations

import itertools
import math
import re

# Far above any real job (Slurm's largest systems have some tens of thousands of nodes), far below
# what would exhaust memory on `node[0-999999999]`.
MAX_HOSTS = 2**16
_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
_GROUP = re.compile(r"\[([^\[\]]*)\]")


class HostlistError(ValueError):
    """A host list that is not in Slurm's form; the message says where."""


def expand_hostlist(text: str) -> list[str]:
    """Every host name of a Slurm host list, in its order (duplicates kept, as Slurm keeps them)."""
    hosts: list[str] = []
    for expr in _split_top_level(text):
        hosts += _expand_expression(expr, budget=MAX_HOSTS - len(hosts))
    if not hosts:
        raise HostlistError("names no host")
    return hosts


def _split_top_level(text: str) -> list[str]:
    exprs, current, depth = [], "", 0
    for ch in text:
        if ch == "[":
            if depth:
                raise HostlistError(f"a '[' inside brackets at {current + ch!r}")
            depth = 1
        elif ch == "]":
            if not depth:
                raise HostlistError(f"a ']' without its '[' at {current + ch!r}")
            depth = 0
        elif depth == 0 and (ch == "," or ch.isspace()):
            if current:
                exprs.append(current)
            current = ""
            continue
        current += ch
    if depth:
        raise HostlistError(f"a '[' never closed in {current!r}")
    if current:
        exprs.append(current)
    return exprs


def _expand_expression(expr: str, budget: int) -> list[str]:
    # re.split with one capture group alternates: literal, group, literal, ..., literal.
    pieces = _GROUP.split(expr)
    literals, groups = pieces[0::2], [_expand_group(g, expr) for g in pieces[1::2]]
    if math.prod(len(g) for g in groups) > budget:
        raise HostlistError(f"{expr!r} names more than {MAX_HOSTS} hosts")
    out = []
    for numbers in itertools.product(*groups):
        out.append(literals[0] + "".join(n + lit for n, lit in zip(numbers, literals[1:], strict=True)))
    return out


def _expand_group(group: str, expr: str) -> list[str]:
    numbers: list[str] = []
    for item in group.split(","):
        m = _RANGE.match(item.strip())
        if not m:
            why = "an empty range" if not item.strip() else f"{item.strip()!r} is not a number or a lo-hi range"
            raise HostlistError(f"[{group}] in {expr!r}: {why}")
        lo, hi = int(m[1]), int(m[2] if m[2] is not None else m[1])
        if hi < lo:
            raise HostlistError(f"[{group}] in {expr!r}: the range {item.strip()} runs backwards")
        if hi - lo >= MAX_HOSTS:
            raise HostlistError(f"{expr!r} names more than {MAX_HOSTS} hosts")
        width = len(m[1])  # Slurm pads every number of a range to the width of its first
        numbers += [f"{n:0{width}d}" for n in range(lo, hi + 1)]
    return numbers
