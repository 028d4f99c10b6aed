"""Who is in which process group, read from what torch and the frameworks already hold.

A rank records each group it is a member of as one `parallel_group` record (schema ParallelGroup): its
members as global ranks, the job's name for it and the parallel dimension that name says. The zero-code
layer does it when `new_group`, `new_subgroups` or `init_device_mesh` return (rank/auto/groups.py); a job
can do it itself with `grpo_doctor.parallel_group(...)`, `device_mesh(mesh)` or `parallel_layout()`
(rank/api.py), the last reading the frameworks that keep their groups where a look is cheap: Megatron's
`parallel_state`, vLLM's and SGLang's `GroupCoordinator`s, DeepSpeed's `utils.groups`. A framework is
read only where the job has imported it (never imported here), and nothing read is kept: ranks and
names are copied out, the groups themselves let go.

Names are mapped onto the usual dimensions by their words (`dim_of`): "TENSOR_MODEL_PARALLEL_GROUP" and
"tp" say "tp", "PIPELINE_MODEL_PARALLEL_GROUP" "pp", "DATA_PARALLEL_GROUP_WITH_CP" "dp-cp"; a
DeviceMesh's dimension names are its dimensions as they are ("dp_shard").

Typical use:
    for found in mesh_groups(torch.distributed, mesh):        # a DeviceMesh's dimensions, this rank's groups
        recorder.parallel_group(**found)
    dim_of("TENSOR_MODEL_PARALLEL_GROUP")                      # "tp"
"""
from __future__ import annotations

import re
import sys
from typing import Any

# Words of a group's name -> the dimension they say. Words not listed ("group", "model", "with") say nothing.
DIM_WORDS = {
    "tp": "tp", "tensor": "tp",
    "pp": "pp", "pipeline": "pp", "pipe": "pp", "stage": "pp",
    "dp": "dp", "data": "dp", "ddp": "dp", "fsdp": "dp", "zero": "dp",
    "cp": "cp", "context": "cp",
    "ep": "ep", "expert": "ep", "moe": "ep",
    "sp": "sp", "sequence": "sp", "ulysses": "sp",
}
UNNAMED = frozenset({"", "undefined", "default", "default_pg", "anonymous", "world", "mesh_default"})
# Framework modules that create their groups through torch.distributed.new_group with the group's name in a
# local variable of the caller (vLLM's and SGLang's GroupCoordinator.__init__: `group_name` "tp", "pp", ...).
NAMING_CALLERS = (("vllm/distributed/parallel_state.py", "group_name"),
                  ("sglang/srt/distributed/parallel_state.py", "group_name"))
# Megatron's parallel_state globals holding this rank's groups' global ranks.
MEGATRON_RANKS = (("_TENSOR_MODEL_PARALLEL_GLOBAL_RANKS", "TENSOR_MODEL_PARALLEL_GROUP"),
                  ("_PIPELINE_GLOBAL_RANKS", "PIPELINE_MODEL_PARALLEL_GROUP"),
                  ("_DATA_PARALLEL_GLOBAL_RANKS", "DATA_PARALLEL_GROUP"),
                  ("_DATA_PARALLEL_GLOBAL_RANKS_WITH_CP", "DATA_PARALLEL_GROUP_WITH_CP"),
                  ("_CONTEXT_PARALLEL_GLOBAL_RANKS", "CONTEXT_PARALLEL_GROUP"))
FRAMEWORK_COORDINATORS = ("vllm.distributed.parallel_state", "sglang.srt.distributed.parallel_state")
COORDINATOR_NAMES = ("_TP", "_PP", "_DP", "_EP", "_SP")
DEEPSPEED_GROUPS = (("_EXPERT_PARALLEL_GROUP", "ep"), ("_EXPERT_DATA_PARALLEL_GROUP", "ep-dp"),
                    ("_DATA_PARALLEL_GROUP", "dp"), ("_ZERO_PARAM_INTRA_PARALLEL_GROUP", "zero-param"))


def dim_of(name: str | None) -> str | None:
    """The parallel dimension(s) a group's name says, "-"-joined in the order named; None where none."""
    if not name:
        return None
    dims: list[str] = []
    for word in re.split(r"[^a-z0-9]+", name.lower()):
        dim = DIM_WORDS.get(word)
        if dim is not None and dim not in dims:
            dims.append(dim)
    return "-".join(dims) if dims else None


def job_name(name: Any) -> str | None:
    """A group's name as the job gave it; None for torch's placeholders ("undefined", "default_pg")."""
    if not isinstance(name, str) or name.strip().lower() in UNNAMED:
        return None
    return name


def group_entry(dist, pg, *, name: str | None, source: str, dim: str | None = None,
                **mesh: Any) -> dict[str, Any] | None:
    """The fields of a ParallelGroup record for process group `pg` (this rank a member); None where it is
    no group of this rank (torch's NON_GROUP_MEMBER) or its members cannot be read."""
    if pg is None or not hasattr(pg, "size"):
        return None
    ranks = [int(r) for r in dist.get_process_group_ranks(pg)]
    if not ranks:
        return None
    name = job_name(name) or job_name(getattr(pg, "group_desc", None))
    pg_name = getattr(pg, "group_name", None)
    return {"ranks": ranks, "name": name, "dim": dim if dim is not None else dim_of(name),
            "pg_name": str(pg_name) if pg_name is not None else None, "source": source, **mesh}


def mesh_groups(dist, mesh, source: str = "device_mesh") -> list[dict[str, Any]]:
    """This rank's group along each dimension of a DeviceMesh, named by the mesh's dimension names."""
    names = getattr(mesh, "mesh_dim_names", None) or ()
    shape = [int(n) for n in mesh.mesh.shape]
    out = []
    for i in range(len(shape)):
        dim_name = str(names[i]) if i < len(names) else None
        entry = group_entry(dist, mesh.get_group(i), name=dim_name, source=source, dim=dim_name or f"mesh-dim-{i}",
                            mesh_shape=shape, mesh_dim_names=[str(n) for n in names] if names else None, mesh_dim=i)
        if entry is not None:
            out.append(entry)
    return out


def caller_name(frame) -> str | None:
    """The group's name where `frame` (the caller of new_group) is a framework's group builder that holds it."""
    if frame is None:
        return None
    filename = frame.f_code.co_filename.replace("\\", "/")
    for suffix, local in NAMING_CALLERS:
        if filename.endswith(suffix):
            return job_name(frame.f_locals.get(local))
    return None


def framework_groups(dist) -> list[dict[str, Any]]:
    """This rank's groups as the frameworks the job imported name them: Megatron, vLLM, SGLang, DeepSpeed
    (whose groups are torch's: read through `dist`, torch.distributed, skipped where it is None)."""
    out: list[dict[str, Any]] = []
    megatron = sys.modules.get("megatron.core.parallel_state")
    if megatron is not None:
        for attribute, name in MEGATRON_RANKS:
            ranks = getattr(megatron, attribute, None)
            if ranks:
                out.append({"ranks": [int(r) for r in ranks], "name": name, "dim": dim_of(name), "pg_name": None,
                            "source": "megatron"})
    for module_name in FRAMEWORK_COORDINATORS:
        module = sys.modules.get(module_name)
        for attribute in COORDINATOR_NAMES if module is not None else ():
            coordinator = getattr(module, attribute, None)
            ranks = getattr(coordinator, "ranks", None)
            if ranks:
                name = str(getattr(coordinator, "unique_name", attribute.strip("_").lower()))
                out.append({"ranks": [int(r) for r in ranks], "name": name, "dim": dim_of(name.split(":")[0]),
                            "pg_name": None, "source": module_name.split(".")[0]})
    deepspeed = sys.modules.get("deepspeed.utils.groups")
    if deepspeed is not None and dist is not None:
        for attribute, dim in DEEPSPEED_GROUPS:
            found = getattr(deepspeed, attribute, None)
            groups = found.items() if isinstance(found, dict) else [(attribute.strip("_").lower(), found)]
            for name, pg in groups:
                if pg is not None:
                    try:
                        entry = group_entry(dist, pg, name=str(name), source="deepspeed", dim=dim)
                    except Exception:  # noqa: BLE001 - a group this rank cannot read: left out
                        entry = None
                    if entry is not None:
                        out.append(entry)
    return out
