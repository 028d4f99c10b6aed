"""Sizes, durations and signals as failure messages print them, turned into numbers.

PyTorch's `format_size` prints `N bytes`, `X.XX KiB`, `X.XX MiB` or `X.XX GiB` (binary units).
vLLM and Ray print GiB values with a `GB` label (vLLM divides by 2**30; Ray's 1006.84GB on a
1081 GB host is 1081e9 / 2**30), so `GB` / `MB` are read as binary units too.

Typical use:
    m = re.search(SIZE, "Tried to allocate 1.42 GiB")
    to_bytes(m.group(1), m.group(2))  # 1524713390 == int(1.42 * 2**30)
    signal_name(-9)                   # "SIGKILL"
    duration_s("600000ms")            # 600.0
"""
from __future__ import annotations

import re
import signal

# A size as two groups: number (maybe negative: vLLM's "Available KV cache memory: -1.2 GiB")
# and unit.
SIZE = r"(-?\d+(?:\.\d+)?)\s*(bytes|[KMGTP]iB|[KMGT]B|B)\b"
_FACTORS = {"bytes": 1, "B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "PiB": 2**50,
            "KB": 2**10, "MB": 2**20, "GB": 2**30, "TB": 2**40}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|milliseconds|s|sec|seconds|min|minutes|h|hours)\b")
_DURATION_FACTORS = {"ms": 0.001, "milliseconds": 0.001, "s": 1.0, "sec": 1.0, "seconds": 1.0,
                     "min": 60.0, "minutes": 60.0, "h": 3600.0, "hours": 3600.0}


def to_bytes(number: str, unit: str) -> int:
    """`number` `unit` in bytes, truncated as `int(float(number) * factor)`."""
    return int(float(number) * _FACTORS[unit])


def duration_s(text: str) -> float | None:
    """Seconds in `600000ms`, `20min`, `900s`, `1800 seconds`; None when there is no duration."""
    m = _DURATION.search(text)
    return float(m.group(1)) * _DURATION_FACTORS[m.group(2)] if m else None


def signal_name(exitcode: int | None) -> str | None:
    """The signal behind an exit code: -9 (Python's way) or 137 (a shell's 128 + 9) -> SIGKILL."""
    if exitcode is None:
        return None
    number = -exitcode if exitcode < 0 else exitcode - 128 if 128 < exitcode < 128 + 65 else 0
    if number <= 0:
        return None
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"SIG{number}"


def int_or_none(text: str | None) -> int | None:
    """`text` as an int ("447,712" reads 447712); None when it is none or not a number."""
    digits = text.replace(",", "") if text else ""
    return int(digits) if digits.lstrip("-").isdigit() else None
