"""What `grpo-doctor probe` found, as it crosses disk and processes: one file per node from the
node-level checks (`NodeReport`), one file from the ranks' collectives (`CollectivesReport`), both
under `<run-dir>/probe/` (RunPaths.probe_node_file, RunPaths.probe_collectives); the report reads
them back (analysis/probe_evidence.py) and turns their `Problem`s into findings.

`from_dict` reads a file of an older version (absent fields take their defaults) and raises
`FormatError` (a ValueError) naming the first known field of the wrong shape, so a damaged file is
left out with a warning.

Typical use:
    node = NodeReport.from_dict(json.loads(path.read_text()))
    [p.message for p in node.problems if p.severity == "critical"], node.preflight.connect
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from grpo_doctor.schema.json_shapes import (
    Check,
    FormatError,
    check_object,
    dict_of,
    fields_problem,
    list_of,
    opt,
)

PROBE_SCHEMA_VERSION = 1

# Connection verdicts (Preflight.connect), from a node to MASTER_ADDR:MASTER_PORT (or, on the master,
# for its port).
REACHABLE = "reachable"
REFUSED = "refused"  # the host answered, nothing listens (master not started) or a REJECT rule
TIMED_OUT = "timed-out"  # no answer at all: a firewall dropping packets, or a wrong address
UNREACHABLE = "unreachable"  # no route to the host or network
UNRESOLVABLE = "unresolvable"  # the name does not resolve
PORT_IN_USE = "port-in-use"  # on the master: something already listens on MASTER_PORT
PORT_FREE = "port-free"  # on the master: the port can be bound

_int, _num, _str = opt(int), opt(int, float), opt(str)
_ints, _strs, _rows = list_of(opt(int)), list_of(_str), list_of(lambda v: type(v) is dict)
_object = opt(dict)


@dataclass(frozen=True)
class Problem:
    """One thing that would make the job fail (severity critical) or run badly (warning)."""

    id: str  # the finding id the report gives it: rendezvous-failure, config-mismatch, ...
    severity: str
    message: str  # one line, names the node / rank / setting and the value
    hint: str = ""
    nodes: list[int] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    ranks: list[int] = field(default_factory=list)

    FIELDS: ClassVar[dict[str, Check]] = {"id": _str, "severity": _str, "message": _str, "hint": _str,
                                          "nodes": _ints, "hosts": _strs, "ranks": _ints}

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "severity": self.severity, "message": self.message, "hint": self.hint,
                "nodes": list(self.nodes), "hosts": list(self.hosts), "ranks": list(self.ranks)}

    @classmethod
    def from_dict(cls, data: Any) -> Problem:
        check_object(data, cls.FIELDS)
        return cls(id=data.get("id") or "", severity=data.get("severity") or "", message=data.get("message") or "",
                   hint=data.get("hint") or "", nodes=list(data.get("nodes") or []),
                   hosts=list(data.get("hosts") or []), ranks=list(data.get("ranks") or []))


def _problems(value: Any) -> bool:
    return value is None or (type(value) is list and all(
        type(p) is dict and fields_problem(p, Problem.FIELDS) is None for p in value))


def _problems_from(data: dict[str, Any]) -> list[Problem]:
    return [Problem.from_dict(p) for p in data.get("problems") or []]


@dataclass(frozen=True)
class Preflight:
    """Checks one node makes on its own, before any rendezvous."""

    master_addr: str = ""
    master_port: int = 0
    resolved: list[str] = field(default_factory=list)  # MASTER_ADDR's addresses
    connect: str = ""  # one of the verdicts above
    connect_detail: str = ""  # the socket error, or how long the check took
    route_address: str | None = None  # this node's address on the way to MASTER_ADDR
    interfaces: dict[str, list[str]] = field(default_factory=dict)  # name -> addresses
    gpus_visible: int | None = None  # None: no NVIDIA driver here
    problems: list[Problem] = field(default_factory=list)

    FIELDS: ClassVar[dict[str, Check]] = {
        "master_addr": _str, "master_port": _int, "resolved": _strs, "connect": _str, "connect_detail": _str,
        "route_address": _str, "interfaces": dict_of(_strs), "gpus_visible": _int, "problems": _problems,
    }

    def to_dict(self) -> dict[str, Any]:
        return {"master_addr": self.master_addr, "master_port": self.master_port, "resolved": list(self.resolved),
                "connect": self.connect, "connect_detail": self.connect_detail, "route_address": self.route_address,
                "interfaces": {name: list(addrs) for name, addrs in self.interfaces.items()},
                "gpus_visible": self.gpus_visible, "problems": [p.to_dict() for p in self.problems]}

    @classmethod
    def from_dict(cls, data: Any) -> Preflight:
        check_object(data, cls.FIELDS)
        return cls(master_addr=data.get("master_addr") or "", master_port=data.get("master_port") or 0,
                   resolved=list(data.get("resolved") or []), connect=data.get("connect") or "",
                   connect_detail=data.get("connect_detail") or "", route_address=data.get("route_address"),
                   interfaces={k: list(v or []) for k, v in (data.get("interfaces") or {}).items()},
                   gpus_visible=data.get("gpus_visible"), problems=_problems_from(data))


NODE_FIELDS: dict[str, Check] = {
    "node_rank": _int, "host": _str, "nnodes": _int, "nproc_per_node": _int,
    "preflight": lambda v: v is None or (type(v) is dict and fields_problem(v, Preflight.FIELDS) is None),
    "settings": _object, "versions": _object, "t": _num, "arrived": dict_of(_str), "missing_nodes": _ints,
    "missing_ranks": _ints, "rdzv_timeout_s": _num, "waited_s": _num, "problems": _problems, "schema": _int,
}


@dataclass(frozen=True)
class NodeReport:
    """One node's view: its checks, its settings, and the node rendezvous as it saw it."""

    node_rank: int
    host: str
    nnodes: int
    nproc_per_node: int
    preflight: Preflight
    settings: dict[str, Any]  # compared across nodes: launch variables, --expect, argument file
    versions: dict[str, str | None]
    t: float = 0.0
    arrived: dict[str, str] = field(default_factory=dict)  # node_rank (str) -> host, at the rendezvous
    missing_nodes: list[int] = field(default_factory=list)
    missing_ranks: list[int] = field(default_factory=list)
    rdzv_timeout_s: float | None = None
    waited_s: float | None = None
    problems: list[Problem] = field(default_factory=list)  # everything this node found
    schema: int = PROBE_SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return {"node_rank": self.node_rank, "host": self.host, "nnodes": self.nnodes,
                "nproc_per_node": self.nproc_per_node, "preflight": self.preflight.to_dict(),
                "settings": dict(self.settings), "versions": dict(self.versions), "t": self.t,
                "arrived": dict(self.arrived), "missing_nodes": list(self.missing_nodes),
                "missing_ranks": list(self.missing_ranks), "rdzv_timeout_s": self.rdzv_timeout_s,
                "waited_s": self.waited_s, "problems": [p.to_dict() for p in self.problems], "schema": self.schema}

    @classmethod
    def from_dict(cls, data: Any) -> NodeReport:
        check_object(data, NODE_FIELDS)
        for name in ("node_rank", "host"):
            if data.get(name) is None:
                raise _missing(name)
        return cls(node_rank=data["node_rank"], host=data["host"], nnodes=data.get("nnodes") or 0,
                   nproc_per_node=data.get("nproc_per_node") or 0,
                   preflight=Preflight.from_dict(data.get("preflight") or {}), settings=dict(data.get("settings") or {}),
                   versions=dict(data.get("versions") or {}), t=data.get("t") or 0.0,
                   arrived=dict(data.get("arrived") or {}), missing_nodes=list(data.get("missing_nodes") or []),
                   missing_ranks=list(data.get("missing_ranks") or []), rdzv_timeout_s=data.get("rdzv_timeout_s"),
                   waited_s=data.get("waited_s"), problems=_problems_from(data),
                   schema=data.get("schema") or PROBE_SCHEMA_VERSION)


COLLECTIVES_FIELDS: dict[str, Check] = {
    "backend": _str, "world_size": _int, "hosts": dict_of(_str), "settings": dict_of(_object),
    "versions": dict_of(_object), "checks": _rows, "sweep": _rows, "links": _rows, "missing_ranks": _ints,
    "rdzv_timeout_s": _num, "problems": _problems, "t": _num, "schema": _int,
}


@dataclass(frozen=True)
class CollectivesReport:
    """What the ranks measured together (written by global rank 0, or the lowest rank present)."""

    backend: str
    world_size: int
    hosts: dict[str, str]  # rank (str) -> host
    settings: dict[str, dict[str, Any]]  # rank (str) -> settings as compared across nodes
    versions: dict[str, dict[str, str | None]]  # rank (str) -> versions
    checks: list[dict[str, Any]] = field(default_factory=list)  # rank, op, ok, error, seconds
    sweep: list[dict[str, Any]] = field(default_factory=list)  # op, size_bytes, time_us, algbw_gbps, busbw_gbps
    links: list[dict[str, Any]] = field(default_factory=list)  # src, dst, src_host, dst_host, gbps, seconds, error
    missing_ranks: list[int] = field(default_factory=list)  # ranks that never reached the rank rendezvous
    rdzv_timeout_s: float | None = None
    problems: list[Problem] = field(default_factory=list)
    t: float = 0.0
    schema: int = PROBE_SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "world_size": self.world_size, "hosts": dict(self.hosts),
                "settings": dict(self.settings), "versions": dict(self.versions), "checks": list(self.checks),
                "sweep": list(self.sweep), "links": list(self.links), "missing_ranks": list(self.missing_ranks),
                "rdzv_timeout_s": self.rdzv_timeout_s, "problems": [p.to_dict() for p in self.problems],
                "t": self.t, "schema": self.schema}

    @classmethod
    def from_dict(cls, data: Any) -> CollectivesReport:
        check_object(data, COLLECTIVES_FIELDS)
        if data.get("world_size") is None:
            raise _missing("world_size")
        return cls(backend=data.get("backend") or "", world_size=data["world_size"], hosts=dict(data.get("hosts") or {}),
                   settings=dict(data.get("settings") or {}), versions=dict(data.get("versions") or {}),
                   checks=list(data.get("checks") or []), sweep=list(data.get("sweep") or []),
                   links=list(data.get("links") or []), missing_ranks=list(data.get("missing_ranks") or []),
                   rdzv_timeout_s=data.get("rdzv_timeout_s"), problems=_problems_from(data),
                   t=data.get("t") or 0.0, schema=data.get("schema") or PROBE_SCHEMA_VERSION)


def _missing(name: str) -> FormatError:
    return FormatError(f"field {name} is missing")
