"""`nccl-error`: NCCL failed outright (an `NCCL error ...` exception or `NCCL WARN` lines), not by timeout.

From nccl-error and nccl-warn signatures. Each report is sorted into one error kind, the most
telling first: `wrong-interface` (NCCL connected to a loopback / link-local address: it bound the
wrong network interface), `infiniband` (NET/IB, ibv_* calls), `shared-memory` (/dev/shm too small),
`remote-peer` (ncclRemoteError, "remote process exited or there was a network error", a peer
closed the connection: the peer died first), `cuda` (ncclUnhandledCudaError, "Cuda failure"),
`invalid-usage` (e.g. two ranks on one GPU), `network` (ncclSystemError, failed socket connects),
`internal`, `other`. One finding per kind, naming every rank and host that reported it. A kind
seen only in WARN lines that say nothing recognisable (`other`) is a warning; the rest are critical.

ProcessGroupNCCL's "Some NCCL operations have failed or timed out" follows a failure: it is read only where the
log states no other (no watchdog timeout, no NCCL error or warning of its own), as an `other` kind naming the
ranks that went down.

InfiniBand async events that report a fabric change ("NET/IB : Got async event : client
reregistration", port active, LID / GID / SM / P_Key change) are benign and not read.

Evidence keys: `error_kind`, `error_codes` (ncclXxxError names), `details` (NCCL's error text),
`messages` (Last error / WARN messages, distinct, at most `Config.max_messages`), `addresses`
(peers as "address<port>"), `peers` (their host part), `bad_interface` (bool), `cuda_errors`,
`nccl_versions`, `pids` (NCCL's own host:pid header), `num_reports`, `sources` (log files), `peer_departed`
(the peer went: a remote-peer error or NCCL's words; incidents.py puts such an error after its cause).

Also every `nccl-error` problem `grpo-doctor probe` found before training (its
`probe/` files): evidence keys `source` ("probe"), `probe_file`, `message`, `nodes`.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from grpo_doctor.analysis.finding_facts import NcclErrorFacts
from grpo_doctor.analysis.findings import Finding
from grpo_doctor.analysis.probe_evidence import probe_findings
from grpo_doctor.analysis.views import RunView, View
from grpo_doctor.logs.kinds import (
    CHILD_FAILED,
    NCCL_ERROR,
    NCCL_TIMEOUT,
    NCCL_WARN,
    NCCL_WATCHDOG_STATUS,
    NCCL_WATCHDOG_STUCK,
)
from grpo_doctor.logs.nccl import FOLLOW_UPS
from grpo_doctor.schema.human_text import short_host
from grpo_doctor.schema.ranks import format_ranks

ID = "nccl-error"
READS = {View.LOG_SIGNATURES, View.PROBE_RESULTS, View.RANK_LOGS, View.RANKS}

HINT_IFNAME = ("NCCL picked a loopback or link-local address, which other hosts cannot reach: set "
               "NCCL_SOCKET_IFNAME (and GLOO_SOCKET_IFNAME) to the real interface on every node, e.g. "
               "NCCL_SOCKET_IFNAME=eth0 or ib0 (`ip -br addr` lists them); 127.0.1.1 usually comes from /etc/hosts "
               "mapping the host name to loopback; for fe80:: addresses also set NCCL_SOCKET_FAMILY=AF_INET.")
HINT_DEBUG = ("Run once with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET to see the interface and transport "
              "(Socket / IB) each rank chose and the first failing call.")
HINT_IB = ("InfiniBand is failing: set NCCL_IB_DISABLE=1 once to test whether the job runs over sockets; if it "
           "does, pick the working adapters with NCCL_IB_HCA (e.g. mlx5_0,mlx5_1; `ibstat` shows port State "
           "Active), and for `ibv_reg_mr failed` raise the locked-memory limit (ulimit -l unlimited, docker "
           "--ulimit memlock=-1).")
HINT_REMOTE = ("A remote error means the peer went away first: read the other host's log (the address named "
               "here) for the real failure - a crash, the OOM killer (dmesg -T | grep -i oom) or a reboot; see the "
               "rank-crash and host-oom findings.")
HINT_NETWORK = ("Ranks cannot open connections to each other: NCCL uses random high TCP ports, so allow all TCP "
                "between the nodes (firewall, security groups), check the address named is the peer's real one, "
                "and set NCCL_SOCKET_IFNAME to the interface that connects the nodes.")
HINT_SHM = ("NCCL could not create its /dev/shm segment: in containers give more shared memory (docker "
            "--shm-size=16g or --ipc=host; a k8s emptyDir with medium Memory at /dev/shm), or set "
            "NCCL_SHM_DISABLE=1 as a workaround.")
HINT_CUDA = ("A CUDA call inside NCCL failed (the `Cuda failure` WARN line names it): check the GPUs with "
             "nvidia-smi and `dmesg -T | grep -i xid`, use the same driver and CUDA version on every node, and "
             "bind one GPU per rank (torch.cuda.set_device(local_rank)).")
HINT_USAGE = ("Invalid usage: most often two ranks on one GPU (`Duplicate GPU detected`): NPROC_PER_NODE must "
              "not exceed the GPUs in CUDA_VISIBLE_DEVICES and each rank must call "
              "torch.cuda.set_device(local_rank); a rollout server (`trl vllm-serve`, `swift rollout`) on a GPU the "
              "trainer also uses fails the same way: give server and trainer disjoint CUDA_VISIBLE_DEVICES. "
              "Otherwise ranks passed mismatched collective arguments.")
HINT_VERSIONS = ("Use the same NCCL (torch) version on every node and set NCCL_DEBUG=INFO to get the detail "
                 "behind an internal error; upgrade NCCL if it persists.")
HINTS = (HINT_IFNAME, HINT_DEBUG, HINT_IB, HINT_REMOTE, HINT_NETWORK, HINT_SHM, HINT_CUDA, HINT_USAGE, HINT_VERSIONS)

# Remedies per error kind, most useful first.
KIND_HINTS: dict[str, tuple[str, ...]] = {
    "wrong-interface": (HINT_IFNAME, HINT_DEBUG),
    "infiniband": (HINT_IB, HINT_DEBUG),
    "shared-memory": (HINT_SHM,),
    "remote-peer": (HINT_REMOTE, HINT_DEBUG),
    "cuda": (HINT_CUDA, HINT_DEBUG),
    "invalid-usage": (HINT_USAGE, HINT_DEBUG),
    "network": (HINT_NETWORK, HINT_DEBUG),
    "internal": (HINT_VERSIONS, HINT_DEBUG),
    "other": (HINT_DEBUG, HINT_VERSIONS),
}
TITLES = {
    "wrong-interface": "NCCL connected over the wrong network interface ({addresses})",
    "infiniband": "NCCL InfiniBand failure",
    "shared-memory": "NCCL could not create its shared-memory segment in /dev/shm",
    "remote-peer": "NCCL lost its peer ({peers}): the remote process exited or the network failed",
    "cuda": "a CUDA call inside NCCL failed",
    "invalid-usage": "NCCL reported invalid usage",
    "network": "NCCL could not connect between ranks ({addresses})",
    "internal": "NCCL internal error",
    "other": "NCCL warning",
}
# InfiniBand async events that report a fabric change, not a failure (ibv_event_type_str's
# wording, printed by NCCL as "NET/IB : Got async event : client reregistration"): not findings.
BENIGN_IB_EVENTS = tuple(f"Got async event : {e}" for e in ("client reregistration", "port active", "LID change",
                                                            "GID table change", "SM change", "P_Key change"))
# NCCL's words for a peer that went (its process exited, or it closed or aborted the connection)
PEER_GONE_WORDS = ("remote process exited", "from peer", "by peer", "remote peer", "aborted")
_REMOTE_WORDS = ("remote process exited", "closed by remote peer", "Connection reset by peer")
_NETWORK_WORDS = ("socketStartConnect", "Connection refused", "timed out", "unreachable", "No route to host",
                  "NET/Socket", "system error")


@dataclass(frozen=True)
class Config:
    max_messages: int = 5  # distinct Last error / WARN messages kept in the evidence per finding
    title_chars: int = 120  # how much of NCCL's message goes into a title


def check(run: RunView, cfg: Config) -> Iterator[Finding]:
    yield from probe_findings(run.probe, ID)
    rank_of_pid = _rank_of_pid(run)
    groups: dict[str, list[dict[str, Any]]] = {}
    said_elsewhere = _failure_said_elsewhere(run.signature_rows)
    for row in run.signature_rows:
        if row["kind"] == NCCL_WARN and any(e in (row["fields"].get("message") or "") for e in BENIGN_IB_EVENTS):
            continue
        if said_elsewhere and row["kind"] == NCCL_ERROR and row["fields"].get("detail") in FOLLOW_UPS:
            continue
        if row["kind"] in (NCCL_ERROR, NCCL_WARN):
            groups.setdefault(error_kind(row["fields"]), []).append(row)
    for kind in KIND_HINTS:  # most telling kind first
        rows = groups.get(kind)
        if not rows:
            continue
        ranks, hosts = set(), set()
        for row in rows:
            f = row["fields"]
            host = row["host"] or (f.get("host") if row["kind"] == NCCL_WARN else None)
            rank = row["rank"]
            if rank is None and row["kind"] == NCCL_WARN:
                rank = rank_of_pid.get((short_host(host), f.get("pid")))
            if rank is not None:
                ranks.add(rank)
                host = host or run.host_of(rank)
            if host:
                hosts.add(host)
        evidence = _evidence(kind, rows, cfg)
        title = TITLES[kind].format(addresses=", ".join(evidence["addresses"]) or "no address named",
                                    peers=", ".join(evidence["peers"]) or "address not named")
        # Kinds whose title says little on its own get NCCL's own words (the detail only when
        # nothing more specific was printed: "invalid usage" would repeat the title).
        first = next(iter(evidence["cuda_errors"] + evidence["messages"]), None)
        if first is None and kind in ("internal", "other"):
            first = next(iter(evidence["details"]), None)
        if first and kind in ("cuda", "invalid-usage", "internal", "other"):
            title += f": {first[: cfg.title_chars]}"
        where = [f"rank(s) {format_ranks(ranks)}"] if ranks else []
        where += [f"host(s) {', '.join(sorted(hosts))}"] if hosts else []
        if where:
            title += f" ({'; '.join(where)})"
        only_vague_warnings = kind == "other" and all(r["kind"] == NCCL_WARN for r in rows)
        yield Finding(id=ID, severity="warning" if only_vague_warnings else "critical", title=title,
                      ranks=tuple(sorted(ranks)), hosts=tuple(sorted(hosts)), step=None, phase=None,
                      evidence=evidence, hints=KIND_HINTS[kind],
                      facts=NcclErrorFacts(peer_departed=evidence["peer_departed"]))


def _failure_said_elsewhere(rows: list[dict[str, Any]]) -> bool:
    """Whether the log states the failure that ProcessGroupNCCL's "Some NCCL operations have failed or timed out"
    follows: a watchdog timeout (nccl-timeout's) or an NCCL error or warning of its own."""
    return any(row["kind"] in (NCCL_TIMEOUT, NCCL_WATCHDOG_STATUS, NCCL_WATCHDOG_STUCK)
               or row["kind"] in (NCCL_ERROR, NCCL_WARN) and row["fields"].get("detail") not in FOLLOW_UPS
               for row in rows)


def error_kind(fields: dict[str, Any]) -> str:
    """The error kind of one nccl-error / nccl-warn signature (see the module docstring)."""
    if fields.get("bad_interface"):
        return "wrong-interface"
    code = fields.get("error_code") or ""
    text = " ".join(str(fields.get(k) or "") for k in ("detail", "last_error", "message"))
    if "NET/IB" in text or "ibv_" in text:
        return "infiniband"
    if "/dev/shm" in text or "shared memory" in text:
        return "shared-memory"
    if code == "ncclRemoteError" or any(w in text for w in _REMOTE_WORDS):
        return "remote-peer"
    if code == "ncclUnhandledCudaError" or fields.get("cuda_error") or "cuda error" in text.lower():
        return "cuda"
    if code in ("ncclInvalidUsage", "ncclInvalidArgument") or "invalid usage" in text or "invalid argument" in text:
        return "invalid-usage"
    if code == "ncclSystemError" or any(w in text for w in _NETWORK_WORDS):
        return "network"
    if code == "ncclInternalError" or "internal error" in text:
        return "internal"
    return "other"


def _evidence(kind: str, rows: list[dict[str, Any]], cfg: Config) -> dict[str, Any]:
    def distinct(values: Any) -> list:
        return list(dict.fromkeys(v for v in values if v is not None))

    fields = [row["fields"] for row in rows]
    addresses = distinct(f"{f['address']}<{f['port']}>" if f.get("port") is not None else f.get("address")
                         for f in fields)
    return {
        "error_kind": kind,
        "error_codes": distinct(f.get("error_code") for f in fields),
        "details": distinct(f.get("detail") for f in fields),
        "messages": distinct(f.get("last_error") or f.get("message") for f in fields)[: cfg.max_messages],
        "addresses": addresses,
        "peers": distinct(f.get("address") for f in fields),
        "bad_interface": any(f.get("bad_interface") for f in fields),
        "cuda_errors": distinct(f.get("cuda_error") for f in fields),
        "nccl_versions": distinct(f.get("nccl_version") for f in fields),
        "pids": distinct(f.get("pid") for f in fields),
        "num_reports": sum(row.get("count", 1) for row in rows),  # a row may stand for repeats (signature_rows.py)
        "sources": distinct(row["source"] for row in rows),
        # What incidents.py reads to put this error after a crash: the peer went away, by its code or NCCL's words
        "peer_departed": kind == "remote-peer" or any(
            w in text.lower() for text in map(str, _texts(fields)) for w in PEER_GONE_WORDS),
    }


def _texts(fields: list[dict[str, Any]]) -> Iterator[Any]:
    for f in fields:
        yield from (f.get(k) for k in ("detail", "last_error", "message") if f.get(k))


def _rank_of_pid(run: RunView) -> dict[tuple[str | None, int], int]:
    """(short host name, pid) -> rank from rank headers (every attempt) and torchrun's failure
    reports: NCCL's WARN header names the process and its host, not the rank."""
    found: dict[tuple[str | None, int], int] = {}
    for rank, log in run.rank_logs.items():
        for header in log.headers:
            found[(short_host(header.host), header.pid)] = rank
    for row in run.signature_rows:
        f = row["fields"]
        if row["kind"] == CHILD_FAILED and f.get("pid") is not None and f.get("rank") is not None:
            found[(short_host(f.get("host") or row["host"]), f["pid"])] = f["rank"]
    return found
