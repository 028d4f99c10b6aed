"""How fast the job's own TCP links are: the round-trip time of each rank's busy connections, by peer address.

A link that is slow (a NIC negotiated down, a shaper left on, a congested port) slows every collective
that crosses it, and every rank then waits in the same place: the stacks cannot say which host is slow.
The kernel can: each TCP connection keeps a smoothed round-trip time, and on a link slower than the data
the job pushes through it, the queue in front of it shows as a round trip 10-1,000x the others'. `ss -tinHe
state established` (iproute2) lists every connection of the node's network namespace with it; the ranks'
own are those whose socket inode is one of their open file descriptors (`/proc/PID/fd`). Only connections
that moved data within `ACTIVE_MS` count (an idle one keeps the round trip of its last exchange, from
before the link slowed). Passive: nothing is sent.

What it cannot see: traffic that bypasses the kernel's TCP (NCCL over InfiniBand or RoCE, NVLink, shared
memory within a node), so it speaks for gloo and NCCL's socket transport, and for nothing else.

Typical use:
    sample = sample_links({0: 4101, 1: 4102})   # None where ss is missing or fails
    sample.addrs, sample.rtt_ms                  # ("10.0.0.1",), {"10.0.0.3": 151.2, "10.0.0.2": 0.31}
"""
from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from grpo_doctor.schema.slow_rounds import LinkRtts

ACTIVE_MS = 3000  # a connection that sent or received within this long is busy: its round trip is current
SS_TIMEOUT_S = 3.0
_SOCKET_FD = re.compile(r"socket:\[(\d+)\]")
_FIELD = re.compile(r"\b(rtt|rcv_rtt|lastsnd|lastrcv|ino):([\d.]+)")


@dataclass(frozen=True)
class Conn:
    local: str
    peer: str
    inode: int
    rtt_ms: float | None  # the smoothed round trip; the receive-side estimate where lower (a mostly-receiving end)
    idle_ms: float  # since it last sent or received


def sample_links(pids: Mapping[int, int] | Iterable[int]) -> LinkRtts | None:
    """The ranks' (`pids`: rank -> pid, or pids) busy TCP connections to other addresses; None when ss fails."""
    ss = shutil.which("ss", path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"]))
    if ss is None:
        return None
    inodes = _socket_inodes(pids.values() if isinstance(pids, Mapping) else pids)
    if not inodes:
        return LinkRtts((), {})
    try:
        out = subprocess.run([ss, "-tinHe", "state", "established"], capture_output=True, text=True,
                             timeout=SS_TIMEOUT_S, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return links_of(parse_ss(out), inodes)


def links_of(conns: Iterable[Conn], inodes: set[int]) -> LinkRtts:
    addrs: set[str] = set()
    by_peer: dict[str, list[float]] = {}
    for conn in conns:
        if conn.inode not in inodes or conn.rtt_ms is None or conn.idle_ms > ACTIVE_MS:
            continue
        if conn.peer == conn.local or conn.peer.startswith("127.") or conn.peer == "::1":
            continue  # within the node: no link
        addrs.add(conn.local)
        by_peer.setdefault(conn.peer, []).append(conn.rtt_ms)
    return LinkRtts(tuple(sorted(addrs)), {p: round(statistics.median(v), 3) for p, v in sorted(by_peer.items())})


def parse_ss(text: str) -> list[Conn]:
    """`ss -tinHe state established`: per connection an address line (Recv-Q, Send-Q, local, peer, then
    -e's `ino:`), then a tab-indented line of TCP info."""
    entries: list[list[str]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace():
            entries.append([line, ""])
        elif entries:
            entries[-1][1] += " " + line
    return [c for c in (_conn(head, info) for head, info in entries) if c is not None]


def _conn(head: str, info: str) -> Conn | None:
    words = head.split()
    fields = dict(_FIELD.findall(head + " " + info))
    if len(words) < 4 or "ino" not in fields:
        return None
    rtts = [float(fields[k]) for k in ("rtt", "rcv_rtt") if k in fields and float(fields[k]) > 0]
    # ss leaves out a `lastsnd:`/`lastrcv:` of 0: that connection moved data this very millisecond.
    idle = min(float(fields.get("lastsnd", 0)), float(fields.get("lastrcv", 0)))
    return Conn(local=_host(words[2]), peer=_host(words[3]), inode=int(fields["ino"]),
                rtt_ms=min(rtts) if rtts else None, idle_ms=idle)


def _host(endpoint: str) -> str:
    """'10.0.0.1:40377', '[::ffff:10.0.0.1]:29500', '[fe80::1%eth0]:22' -> the address alone."""
    addr = endpoint.rsplit(":", 1)[0].strip("[]")
    addr = addr.split("%", 1)[0]
    return addr[7:] if addr.startswith("::ffff:") and "." in addr else addr


def _socket_inodes(pids: Iterable[int]) -> set[int]:
    inodes = set()
    for pid in pids:
        try:
            names = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for name in names:
            try:
                match = _SOCKET_FD.fullmatch(os.readlink(f"/proc/{pid}/fd/{name}"))
            except OSError:
                continue
            if match:
                inodes.add(int(match[1]))
    return inodes
