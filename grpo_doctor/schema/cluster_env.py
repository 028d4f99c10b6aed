"""What the scheduler told a node about its job: node count, this node's id, the master's address and
port, ranks per node, the job id, and which variable gave each (host/cluster_env.py reads them from
torchrun's, Kubeflow's PyTorchJob's and Slurm's variables). `grpo-doctor watch` records it per host in
run.json (schema/run_info.py, `WatchHost.cluster`); `grpo-doctor probe` takes what its flags leave open
from it.

A value that could not be read (not a number, a node id past the node count, a malformed node list)
is left unset and said once in `problems`, as (field, one line).

Typical use:
    env = ClusterEnv(nnodes=4, node_rank=1, master_addr="node01", scheduler="slurm", job_id="4242",
                     sources={"nnodes": "SLURM_NNODES", "node_rank": "SLURM_NODEID",
                              "master_addr": "SLURM_JOB_NODELIST"})
    env.label                     # "node 1/4"
    ClusterEnv.from_dict(env.to_dict()) == env
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from grpo_doctor.schema.json_shapes import Check, check_object, dict_of, opt

_int, _str = opt(int), opt(str)


def _problem_list(value: Any) -> bool:
    return value is None or (type(value) is list and all(
        type(p) is dict and type(p.get("field")) is str and type(p.get("message")) is str for p in value))


@dataclass(frozen=True)
class ClusterEnv:
    nnodes: int | None = None
    node_rank: int | None = None  # this node's id, 0 .. nnodes-1
    master_addr: str | None = None  # node 0's address, as the job's rendezvous uses it
    master_port: int | None = None
    nproc_per_node: int | None = None  # ranks (GPUs) per node
    job_id: str | None = None
    scheduler: str | None = None  # "slurm" | "kubernetes" | None (torchrun's variables, or nothing)
    # Under `srun` every task is told which it is; one watch or probe per node runs as task 0 of its node.
    task_rank: int | None = None  # SLURM_PROCID
    task_local_rank: int | None = None  # SLURM_LOCALID
    num_tasks: int | None = None  # SLURM_NTASKS
    sources: dict[str, str] = field(default_factory=dict)  # field name -> the variable that gave it
    problems: tuple[tuple[str, str], ...] = ()  # (field name, one line saying what is wrong), values left unset
    extra: dict[str, Any] = field(default_factory=dict)  # keys of other versions, kept as they were

    FIELDS: ClassVar[dict[str, Check]] = {
        "nnodes": _int, "node_rank": _int, "master_addr": _str, "master_port": _int, "nproc_per_node": _int,
        "job_id": _str, "scheduler": _str, "task_rank": _int, "task_local_rank": _int, "num_tasks": _int,
        "sources": dict_of(opt(str)), "problems": _problem_list,
    }

    @property
    def is_empty(self) -> bool:
        return self == ClusterEnv()

    @property
    def label(self) -> str | None:
        """"node 1/4" where this is one node of several, for watch's lines of a multi-node job."""
        if self.node_rank is None or not self.nnodes or self.nnodes < 2:
            return None
        return f"node {self.node_rank}/{self.nnodes}"

    def problems_for(self, name: str) -> list[str]:
        return [message for field_name, message in self.problems if field_name == name]

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("sources", "problems", "extra")}
        return {**self.extra, **data, "sources": dict(self.sources),
                "problems": [{"field": f, "message": m} for f, m in self.problems]}

    @classmethod
    def from_dict(cls, data: Any) -> ClusterEnv:
        """Raises FormatError when a known field has the wrong shape."""
        check_object(data, cls.FIELDS)
        known = {f.name for f in fields(cls)}
        plain = {k: data.get(k) for k in known if k not in ("sources", "problems", "extra")}
        return cls(**plain, sources=dict(data.get("sources") or {}),
                   problems=tuple((p["field"], p["message"]) for p in data.get("problems") or ()),
                   extra={k: v for k, v in data.items() if k not in known})
