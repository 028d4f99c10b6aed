"""`run.json`: what was run into a run directory, and the watch of every host that supervised it.

Every node's `grpo-doctor watch` adds its host to the one run.json of a shared run directory, under a
lock (supervisor/run_files.py): the first watch sets the command, the start time and the version, each
adds its own entry under `hosts`. Keys this version does not know (written by another version) are
kept when the file is rewritten, so that several versions may share a run directory.

Typical use:
    info = RunInfo(command=("torchrun", "train.py"), start_t=time.time(), grpo_doctor_version="0.4.0",
                   hosts={"node-1": WatchHost(pid=4711, on_hang="report")})
    merged = RunInfo.from_dict(json.loads(path.read_text())).joined_by(info)   # FormatError when damaged
    path.write_text(json.dumps(merged.to_dict(), indent=2))
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar

from grpo_doctor.schema.cluster_env import ClusterEnv
from grpo_doctor.schema.json_shapes import Check, check_object, dict_of, fields_problem, list_of, opt

_str = opt(str)


def _cluster(value: Any) -> bool:
    return value is None or (type(value) is dict and fields_problem(value, ClusterEnv.FIELDS) is None)


@dataclass(frozen=True)
class WatchHost:
    """One host's watch: its pid, the variables it set for the job, the launch variables the job found
    (what `grpo-doctor plan` reads: NPROC_PER_NODE, NNODES, ...), how it judged hangs, and what the
    scheduler told this node (node id and count, master, job id: schema/cluster_env.py)."""

    pid: int | None = None
    env_set_by_watch: dict[str, str] = field(default_factory=dict)
    launch_env: dict[str, str] = field(default_factory=dict)
    hang_policy: dict[str, Any] = field(default_factory=dict)  # supervisor/progress.py's HangPolicy, as fields
    on_hang: str | None = None  # "report" | "kill"
    cluster: ClusterEnv | None = None  # None: an older watch, or no scheduler or launch variable was set
    extra: dict[str, Any] = field(default_factory=dict)  # keys of other versions, kept as they were

    FIELDS: ClassVar[dict[str, Check]] = {"pid": opt(int), "env_set_by_watch": dict_of(_str), "hang_policy": opt(dict),
                                          "on_hang": _str, "launch_env": dict_of(_str), "cluster": _cluster}

    def to_dict(self) -> dict[str, Any]:
        data = {**self.extra, "pid": self.pid, "env_set_by_watch": dict(self.env_set_by_watch),
                "hang_policy": dict(self.hang_policy), "on_hang": self.on_hang}
        if self.launch_env:  # only where watch saw launch variables: an older run.json writes back as it was
            data["launch_env"] = dict(self.launch_env)
        if self.cluster is not None:  # likewise
            data["cluster"] = self.cluster.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WatchHost:
        return cls(pid=data.get("pid"), env_set_by_watch=dict(data.get("env_set_by_watch") or {}),
                   launch_env=dict(data.get("launch_env") or {}),
                   hang_policy=dict(data.get("hang_policy") or {}), on_hang=data.get("on_hang"),
                   cluster=ClusterEnv.from_dict(data["cluster"]) if data.get("cluster") is not None else None,
                   extra={k: v for k, v in data.items() if k not in cls.FIELDS})


def _host_entries(value: Any) -> bool:
    return value is None or (type(value) is dict and all(
        type(entry) is dict and fields_problem(entry, WatchHost.FIELDS) is None for entry in value.values()))


RUN_FIELDS: dict[str, Check] = {"command": list_of(_str), "start_t": opt(int, float), "grpo_doctor_version": _str,
                                "hosts": _host_entries}


@dataclass(frozen=True)
class RunInfo:
    """The contents of run.json."""

    command: tuple[str, ...] = ()
    start_t: float | None = None  # wall s, when the first watch started
    grpo_doctor_version: str | None = None  # of the first watch
    hosts: dict[str, WatchHost] = field(default_factory=dict)  # host name -> its watch
    extra: dict[str, Any] = field(default_factory=dict)  # keys of other versions, kept as they were

    def to_dict(self) -> dict[str, Any]:
        return {**self.extra, "start_t": self.start_t, "command": list(self.command),
                "grpo_doctor_version": self.grpo_doctor_version,
                "hosts": {host: entry.to_dict() for host, entry in self.hosts.items()}}

    @classmethod
    def from_dict(cls, data: Any) -> RunInfo:
        """Raises FormatError when a known field has the wrong shape."""
        check_object(data, RUN_FIELDS)
        known = {f.name for f in fields(cls)}
        return cls(command=tuple(data.get("command") or ()), start_t=data.get("start_t"),
                   grpo_doctor_version=data.get("grpo_doctor_version"),
                   hosts={host: WatchHost.from_dict(entry) for host, entry in (data.get("hosts") or {}).items()},
                   extra={k: v for k, v in data.items() if k not in known})

    def joined_by(self, other: RunInfo) -> RunInfo:
        """This run with `other`'s hosts added (a host already there is replaced: a later watch of it);
        command, start time and version stay this run's where it has them."""
        return replace(
            self, command=self.command or other.command,
            start_t=self.start_t if self.start_t is not None else other.start_t,
            grpo_doctor_version=self.grpo_doctor_version or other.grpo_doctor_version,
            hosts={**self.hosts, **other.hosts}, extra={**other.extra, **self.extra},
        )
