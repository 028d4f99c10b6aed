"""Rendezvous and store connection failures: c10d's TCPStore sockets, DistStoreError, torchrun's rendezvous.

The socket messages come from c10d's socket.cpp, as warnings (`[W socket.cpp:601] [c10d] The
client socket has failed to connect to [node-1]:29500 (errno: 111 - Connection refused).`) and
again inside the exception that follows (`torch.distributed.DistNetworkError: The client socket
has failed to connect to any network address of (node-1, 29500). The client socket has ...`).
One line gives one signature, however many phrases it repeats; the first host/port/errno wins.

Typical use:
    fields = parse_rendezvous("torch.distributed.DistStoreError: Timed out after 901 seconds waiting for "
                              "clients. 1/2 clients joined.")
    (fields["error_type"], fields["joined"], fields["expected"])  # ("DistStoreError", 1, 2)
"""
from __future__ import annotations

import re
from typing import Any

from grpo_doctor.logs.units import duration_s

# One of these is in every line `parse_rendezvous` reads.
KEYWORDS = ("ocket", "joined", "endezvous", "Dist", "TCP client")
_EXCEPTIONS = ("DistStoreError", "DistNetworkError", "RendezvousConnectionError", "RendezvousTimeoutError")

_CONNECT = re.compile(
    r"The client socket has failed to connect to \[?(?P<host>[^\s\]]*?)\]?:(?P<port>\d+) "
    r"\(errno: (?P<errno>\d+) - (?P<reason>[^)]*)\)"
)
_CONNECT_ANY = re.compile(r"The client socket has failed to connect to any network address of \((?P<host>[^,]+), (?P<port>\d+)\)")
_CONNECT_TIMEOUT = re.compile(
    r"The client socket has timed out after (?P<after>\S+) while trying to connect to \((?P<host>[^,]+), (?P<port>\d+)\)"
)
_SERVER = re.compile(
    r"The server socket has failed to (?:bind to|listen on) (?!any)\[?(?P<host>[^\s\]]*?)\]?:(?P<port>\d+) "
    r"\(errno: (?P<errno>\d+) - (?P<reason>[^)]*)\)"
)
_SERVER_ANY = "The server socket has failed to listen on any local network address"
_STORE = re.compile(
    r"Timed out after (?P<after>\d+) seconds waiting for clients\. (?P<joined>\d+)/(?P<expected>\d+) clients joined"
)
_TCPSTORE_RETRY = re.compile(r"TCP client failed to connect/validate to host (?P<host>[^\s:]+):(?P<port>\d+)")


def parse_rendezvous(text: str) -> dict[str, Any] | None:
    """Fields of a rendezvous / store failure (see kinds.FIELDS), or None when `text` has none."""
    found: dict[str, Any] = {}
    for pattern in (_CONNECT, _SERVER, _CONNECT_TIMEOUT, _CONNECT_ANY, _TCPSTORE_RETRY):
        m = pattern.search(text)
        if m is None:
            continue
        groups = m.groupdict()
        found.setdefault("host", groups["host"])
        found.setdefault("port", int(groups["port"]))
        if groups.get("errno") and "errno" not in found:
            found["errno"], found["reason"] = int(groups["errno"]), groups["reason"].strip()
        if groups.get("after"):
            found.setdefault("timeout_s", duration_s(groups["after"]))
    store = _STORE.search(text)
    if store:
        found.update(timeout_s=float(store.group("after")), joined=int(store.group("joined")),
                     expected=int(store.group("expected")))
    error_type = _error_type(text, found)
    if error_type is None:
        return None
    found["error_type"] = error_type
    return found


def _error_type(text: str, found: dict[str, Any]) -> str | None:
    if found.get("errno") == 98 or "Address already in use" in text and "socket" in text:
        return "address-in-use"
    if _SERVER_ANY in text or "The server socket has failed to" in text:
        return "server-listen-failed"
    for name in _EXCEPTIONS:
        if name in text:
            return name
    if not found:
        return None
    return "client-connect-timeout" if "The client socket has timed out" in text else "client-connect-failed"
