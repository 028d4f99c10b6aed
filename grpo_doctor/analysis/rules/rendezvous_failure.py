"""`rendezvous-failure`: the job never formed: its store could not start or be reached, or nodes never joined.

From rendezvous-failure signatures (c10d's TCPStore socket messages, DistStoreError,
DistNetworkError, torchrun's RendezvousConnectionError / RendezvousTimeoutError). Each report has
one cause: `port-in-use` (the store server could not bind MASTER_PORT), `store-unreachable` (a
client could not connect to MASTER_ADDR:MASTER_PORT) or `join-timeout` (the store waited for
nodes that never came). One finding per cause and store endpoint; a report that names no endpoint
(RendezvousConnectionError: "see inner exception") joins the endpoint its log named last.

Evidence keys: `cause`, `error_type` (the first report's, see logs.kinds), `error_types` (all),
`host` / `port` (the store's address as the message prints it, not the reporting node),
`errno`, `reason` (the first socket error), `errnos` (all), `timeout_s` (longest wait stated),
`joined`, `expected` (clients that joined the store / were expected), `num_reports`, `sources`.

Also every `rendezvous-failure` problem `grpo-doctor probe` found before training (its
`probe/` files): evidence keys `source` ("probe"), `probe_file`, `message`, `nodes`.
"""
from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from grpo_doctor.analysis import remedies
from grpo_doctor.analysis.findings import Finding
from grpo_doctor.analysis.probe_evidence import probe_findings
from grpo_doctor.analysis.views import RunView, View
from grpo_doctor.logs.kinds import RENDEZVOUS_FAILURE
from grpo_doctor.schema.ranks import format_ranks

ID = "rendezvous-failure"
READS = {View.LOG_SIGNATURES, View.PROBE_RESULTS, View.RANKS}

HINT_PORT = ("Another process already listens on MASTER_PORT on this node (an earlier job, or a leftover process "
             "of a crashed run): choose a free port (MASTER_PORT=29501, torchrun --master-port or "
             "--rdzv-endpoint host:port, the same on every node), or find the holder with `ss -ltnp | grep PORT` "
             "and stop it.")
HINT_REFUSED = ("Connection refused: the host answered but nothing listens on that port yet: start the master node "
                "(NODE_RANK=0) first or check it is still running, and use the same MASTER_ADDR and MASTER_PORT on "
                "every node (`grpo-doctor probe` on every node tests this before training).")
HINT_UNREACHABLE = ("MASTER_ADDR:MASTER_PORT cannot be reached from this node: a firewall or security group blocks "
                    "the port, or MASTER_ADDR is wrong (it must be node 0's address as the other nodes see it); "
                    "test from this node with `nc -zv MASTER_ADDR MASTER_PORT`, or run `grpo-doctor probe` on every "
                    "node before training.")
HINT_LOOPBACK = ("The store address is a loopback one (127.0.0.1, localhost, ::1): on several nodes MASTER_ADDR must "
                 "be node 0's real address on every node; on one node, the process that serves the store (rank 0, "
                 "or a vLLM server) died or never started - read its log.")
HINT_JOIN = ("Not every node joined in time: a node never started or crashed before the rendezvous, or NNODES "
             "(torchrun --nnodes) or WORLD_SIZE differs between nodes (check they are the same everywhere); start "
             "every node within the rendezvous timeout and read the missing node's log. The timeout (600 s by "
             "default) is set by " + remedies.flag(remedies.TORCHRUN, "rdzv-conf timeout") + " for a static launch "
             "(--master-addr / --master-port, no --rdzv-backend) and by "
             + remedies.flag(remedies.TORCHRUN, "rdzv-conf join_timeout") + " with --rdzv-backend c10d.")
HINTS = (HINT_PORT, HINT_REFUSED, HINT_UNREACHABLE, HINT_LOOPBACK, HINT_JOIN)

PORT_IN_USE = ("address-in-use", "server-listen-failed")
ECONNREFUSED = 111


@dataclass(frozen=True)
class Config:
    pass  # every failed rendezvous is a finding: the job cannot start without one


def check(run: RunView, cfg: Config) -> Iterator[Finding]:
    yield from probe_findings(run.probe, ID)
    groups: dict[tuple, list[dict[str, Any]]] = {}
    last_key: dict[tuple[str, str], tuple] = {}  # (source, cause) -> the group its last report named
    for row in run.signature_rows:
        if row["kind"] != RENDEZVOUS_FAILURE:
            continue
        f = row["fields"]
        cause = _cause(f)
        if cause == "join-timeout":
            key: tuple = (cause,)
        elif f.get("port") is None and f.get("host") is None:
            key = last_key.get((row["source"], cause), (cause, None, None))
        else:  # a bind failure is about the port; the bind address (::, 0.0.0.0) does not matter
            key = (cause, None if cause == "port-in-use" else f.get("host"), f.get("port"))
        last_key[(row["source"], cause)] = key
        groups.setdefault(key, []).append(row)
    for key, rows in groups.items():
        cause = key[0]
        evidence = _evidence(cause, rows)
        ranks = sorted({row["rank"] for row in rows if row["rank"] is not None})
        hosts = sorted({h for h in [row["host"] for row in rows] + [run.host_of(r) for r in ranks] if h})
        title = _title(evidence)
        if ranks or hosts:
            title += " (" + "; ".join(([f"rank(s) {format_ranks(ranks)}"] if ranks else [])
                                     + ([f"host(s) {', '.join(hosts)}"] if hosts else [])) + ")"
        yield Finding(id=ID, severity="critical", title=title, ranks=tuple(ranks), hosts=tuple(hosts), step=None,
                      phase=None, evidence=evidence, hints=_hints(evidence))


def _cause(fields: dict[str, Any]) -> str:
    error_type = fields.get("error_type")
    if error_type in PORT_IN_USE:
        return "port-in-use"
    if fields.get("joined") is not None or error_type == "RendezvousTimeoutError":
        return "join-timeout"
    return "store-unreachable"


def _evidence(cause: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    fields = [row["fields"] for row in rows]
    none: dict[str, Any] = {}
    with_errno = next((f for f in fields if f.get("errno") is not None), none)
    with_address = next((f for f in fields if f.get("host") is not None or f.get("port") is not None), none)
    with_counts = next((f for f in fields if f.get("joined") is not None), none)
    timeouts = [f["timeout_s"] for f in fields if f.get("timeout_s") is not None]
    return {
        "cause": cause, "error_type": fields[0].get("error_type"),
        "error_types": list(dict.fromkeys(f.get("error_type") for f in fields)),
        "host": with_address.get("host"), "port": with_address.get("port"),
        "errno": with_errno.get("errno"), "reason": with_errno.get("reason"),
        "errnos": list(dict.fromkeys(f["errno"] for f in fields if f.get("errno") is not None)),
        "timeout_s": max(timeouts) if timeouts else None,
        "joined": with_counts.get("joined"), "expected": with_counts.get("expected"),
        "num_reports": sum(row.get("count", 1) for row in rows),  # a row may stand for repeats (signature_rows.py)
        "sources": list(dict.fromkeys(row["source"] for row in rows)),
    }


def _title(ev: dict[str, Any]) -> str:
    socket_error = f" (errno {ev['errno']}: {ev['reason']})" if ev["errno"] is not None else ""
    waited = f" after {ev['timeout_s']:g} s" if ev["timeout_s"] is not None else ""
    if ev["cause"] == "port-in-use":
        if ev["port"] is None:
            return "rendezvous: the store server could not listen on any local address"
        return f"rendezvous: port {ev['port']} is already in use on this node{socket_error}"
    if ev["cause"] == "join-timeout":
        if ev["joined"] is None:
            return f"rendezvous timed out{waited} before every node joined ({ev['error_type']})"
        return (f"rendezvous timed out{waited}: only {ev['joined']} of {ev['expected']} expected clients "
                "joined the store")
    if ev["host"] is None and ev["port"] is None:
        return f"rendezvous: the connection to the store failed ({', '.join(ev['error_types'])})"
    timed_out = f" (timed out{waited})" if not socket_error and waited else ""
    return f"rendezvous: cannot reach the store at {ev['host']}:{ev['port']}{socket_error}{timed_out}"


def _hints(ev: dict[str, Any]) -> tuple[str, ...]:
    if ev["cause"] == "port-in-use":
        return (HINT_PORT,)
    if ev["cause"] == "join-timeout":
        return (HINT_JOIN, HINT_UNREACHABLE)
    hints = [HINT_LOOPBACK] if _is_loopback(ev["host"]) else []
    if ECONNREFUSED in ev["errnos"]:
        hints.append(HINT_REFUSED)
    if not ev["errnos"] or any(e != ECONNREFUSED for e in ev["errnos"]):  # timeouts, no route, unreachable
        hints.append(HINT_UNREACHABLE)
    return tuple(hints)


def _is_loopback(host: str | None) -> bool:
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name
        return False
