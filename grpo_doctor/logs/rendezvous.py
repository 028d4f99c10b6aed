"""Rendezvous and store connection failures: c10d's TCPStore sockets, DistStoreError, torchrun's rendezvous.

The socket messages come from c10d's socket.cpp, as warnings (`[W socket.cpp:601] [c10d] The
client socket has failed to connect to [node-1]:29500 (errno: 111 - Connection refused).`) and
again inside the exception that follows (`torch.distributed.DistNetworkError: The client socket
has failed to connect to any network address of (node-1, 29500). The client socket has ...`).
One line gives one signature, however many phrases it repeats; the first host/port/errno wins.
A store read that timed out ("[c10d] waitForInput: socket ... remote=[host]:port) timed out after
300000ms", torch's older "Socket Timeout") is a `store-timeout`; torch <= 1.10's "connect() timed out.
Original timeout was 60000 ms." a `client-connect-timeout`.

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
KEYWORDS = ("ocket", "joined", "endezvous", "Dist", "TCP client", "waitForInput", "connect() timed out")
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
# A store read that waited in vain: "waitForInput: socket SocketImpl(fd=5, addr=[localhost]:39284,
# remote=[localhost]:47115) timed out after 300000ms" (the socket may be left out, or printed on the
# line before), and the older bare "RuntimeError: Socket Timeout".
_WAIT_REMOTE = re.compile(r"remote=\[?(?P<host>[^\s\]]*?)\]?:(?P<port>\d+)\)")
_WAIT_TIMEOUT = re.compile(r"waitForInput: (?:socket|poll for socket).*?(?:timed out after (?P<ms>\d+)ms|likely a timeout)")
_SOCKET_TIMEOUT = "Socket Timeout"
# torch <= 1.10's TCPStore client ("RuntimeError: connect() timed out. Original timeout was 60000 ms.",
# raised in the rendezvous backend's _create_tcp_store): it never reached the store's host.
_OLD_CONNECT_TIMEOUT = re.compile(r"connect\(\) timed out\.(?: Original timeout was (?P<ms>\d+) ms)?")


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
    wait = _WAIT_TIMEOUT.search(text) if "waitForInput" in text else None
    if wait or _SOCKET_TIMEOUT in text:
        remote = _WAIT_REMOTE.search(text)
        if remote:
            found.setdefault("host", remote.group("host"))
            found.setdefault("port", int(remote.group("port")))
        if wait and wait.group("ms"):
            found.setdefault("timeout_s", int(wait.group("ms")) / 1000)
        found["store_timeout"] = True
    old_connect = _OLD_CONNECT_TIMEOUT.search(text) if "connect() timed out" in text else None
    if old_connect:
        found["connect_timeout"] = True
        if old_connect.group("ms"):
            found.setdefault("timeout_s", int(old_connect.group("ms")) / 1000)
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
    if found.pop("store_timeout", False):
        return "store-timeout"
    if found.pop("connect_timeout", False):
        return "client-connect-timeout"
    if not found:
        return None
    return "client-connect-timeout" if "The client socket has timed out" in text else "client-connect-failed"
