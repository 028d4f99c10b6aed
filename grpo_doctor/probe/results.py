"""What `grpo-doctor probe` found, as it crosses disk and processes: one file per node from the
node-level checks, one file from the ranks' collectives, both under `<run-dir>/probe/`.

Stdlib only: the analyser loads these without torch.

Typical use:
    write_json(probe_dir(run_dir) / node_file_name(node), node.to_dict())
    node = NodeReport.from_dict(json.loads(path.read_text()))
"""
from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_doctor.schema import host_dir_name

PROBE_SCHEMA_VERSION = 1
COLLECTIVES_FILE = "collectives.json"

# Connection verdicts, from a node to MASTER_ADDR:MASTER_PORT (or, on the master, for its port).
REACHABLE = "reachable"
REFUSED = "refused"  # the host answered, nothing listens (master not started) or a REJECT rule
TIMED_OUT = "timed-out"  # no answer at all: a firewall dropping packets, or a wrong address
UNREACHABLE = "unreachable"  # no route to the host or network
UNRESOLVABLE = "unresolvable"  # the name does not resolve
PORT_IN_USE = "port-in-use"  # on the master: something already listens on MASTER_PORT
PORT_FREE = "port-free"  # on the master: the port can be bound


def probe_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "probe"


def node_file_name(node_rank: int, host: str) -> str:
    return f"node-{node_rank:03d}-{host_dir_name(host)}.json"


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Atomically: a reader (or a report built meanwhile) never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    partial.write_text(json.dumps(data, indent=1, default=str))
    os.replace(partial, path)


class _Serialisable:
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls, data: dict[str, Any]):
        known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class Problem(_Serialisable):
    """One thing that would make the job fail (severity critical) or run badly (warning)."""

    id: str  # the finding id the report gives it: rendezvous-failure, config-mismatch, ...
    severity: str
    message: str  # one line, names the node / rank / setting and the value
    hint: str = ""
    nodes: list[int] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    ranks: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Preflight(_Serialisable):
    """Checks one node makes on its own, before any rendezvous."""

    master_addr: str
    master_port: int
    resolved: list[str] = field(default_factory=list)  # MASTER_ADDR's addresses
    connect: str = ""  # one of the verdicts above
    connect_detail: str = ""  # the socket error, or how long the check took
    route_address: str | None = None  # this node's address on the way to MASTER_ADDR
    interfaces: dict[str, list[str]] = field(default_factory=dict)  # name -> addresses
    gpus_visible: int | None = None  # None: no NVIDIA driver here
    problems: list[dict[str, Any]] = field(default_factory=list)  # Problem dicts


@dataclass(frozen=True)
class NodeReport(_Serialisable):
    """One node's view: its checks, its settings, and the node rendezvous as it saw it."""

    node_rank: int
    host: str
    nnodes: int
    nproc_per_node: int
    preflight: dict[str, Any]  # Preflight
    settings: dict[str, Any]  # compared across nodes: launch variables, --expect, argument file
    versions: dict[str, str | None]
    t: float = 0.0
    arrived: dict[str, str] = field(default_factory=dict)  # node_rank (str) -> host, at the rendezvous
    missing_nodes: list[int] = field(default_factory=list)
    missing_ranks: list[int] = field(default_factory=list)
    rdzv_timeout_s: float | None = None
    waited_s: float | None = None
    problems: list[dict[str, Any]] = field(default_factory=list)  # Problem dicts, everything this node found
    schema: int = PROBE_SCHEMA_VERSION


@dataclass(frozen=True)
class CollectivesReport(_Serialisable):
    """What the ranks measured together (written by global rank 0)."""

    backend: str
    world_size: int
    hosts: dict[str, str]  # rank (str) -> host
    settings: dict[str, dict[str, Any]]  # rank (str) -> settings as compared across nodes
    versions: dict[str, dict[str, str | None]]  # rank (str) -> versions
    checks: list[dict[str, Any]] = field(default_factory=list)  # op, ok, error, seconds
    sweep: list[dict[str, Any]] = field(default_factory=list)  # op, size_bytes, time_us, algbw_gbps, busbw_gbps
    links: list[dict[str, Any]] = field(default_factory=list)  # src, dst, src_host, dst_host, gbps, seconds, error
    missing_ranks: list[int] = field(default_factory=list)  # ranks that never reached the rank rendezvous
    rdzv_timeout_s: float | None = None
    problems: list[dict[str, Any]] = field(default_factory=list)
    t: float = 0.0
    schema: int = PROBE_SCHEMA_VERSION
