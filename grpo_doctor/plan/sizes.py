"""GPU memory sizes as users write them: 80GiB, 80GB, 81920MiB, 0.5TiB.

A GPU vendor's "80 GB" card has 80 GiB (81,920 MiB), so GB is read as GiB here.

Typical use:
    parse_size("80GiB") == 80 * 2**30
"""
from __future__ import annotations

import re

from grpo_doctor.schema.errors import DoctorError

_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(GiB|GB|G|MiB|MB|M|TiB|TB|T)?\s*$", re.IGNORECASE)
_UNITS = {"g": 2**30, "gb": 2**30, "gib": 2**30, "m": 2**20, "mb": 2**20, "mib": 2**20,
          "t": 2**40, "tb": 2**40, "tib": 2**40}


class SizeError(DoctorError):
    hint = "write the size like 80GiB, 80GB or 81920MiB"


def parse_size(text: str, flag: str = "--gpu-memory") -> int:
    match = _SIZE.match(text or "")
    if not match:
        raise SizeError(f"{flag} {text!r} is not a size")
    if match.group(2) is None and float(match.group(1)) > 4096:
        raise SizeError(f"{flag} {text!r}: no unit, and too large for GiB")
    size = int(float(match.group(1)) * _UNITS[(match.group(2) or "GiB").lower()])
    if size <= 0:
        raise SizeError(f"{flag} {text!r} must be more than zero")
    return size
