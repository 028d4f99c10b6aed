"""How sizes and host names are said to people, the same way in every line the tool prints.

Typical use:
    f"grows {format_bytes(slope)} per step on {short_host(host)}"   # "grows 0.44 GiB per step on gpu-a67"
"""
from __future__ import annotations

KIB, MIB, GIB = 2**10, 2**20, 2**30


def format_bytes(num: float) -> str:
    """GiB from 100 MiB (two decimals below 10 GiB, one above), MiB from 1 MiB (whole from 10 MiB), then KiB
    and bytes: '79.1 GiB', '1.50 GiB', '0.44 GiB', '37 MiB', '2.5 MiB', '896.0 KiB', '512 B'. Negative sizes keep their sign."""
    size = abs(num)
    if size >= 100 * MIB:
        return f"{num / GIB:.2f} GiB" if size < 10 * GIB else f"{num / GIB:.1f} GiB"
    if size >= MIB:
        return f"{num / MIB:.0f} MiB" if size >= 10 * MIB else f"{num / MIB:.1f} MiB"
    return f"{num / KIB:.1f} KiB" if size >= KIB else f"{num:.0f} B"


def short_host(host: str | None) -> str | None:
    """A host name cut at its first dot, as NCCL and the kernel print it; an IP address stays whole."""
    return host.split(".")[0] if host and not host[:1].isdigit() else host
