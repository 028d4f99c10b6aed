"""Group creation as the job's parallel layout: who is in which process group, and what the job calls it.

When `torch.distributed.new_group`, `new_subgroups`, `new_subgroups_by_enumeration` or `init_device_mesh`
(also reached as `torch.distributed.device_mesh.init_device_mesh`) returns, each group this rank is a
member of becomes one `parallel_group` record (schema ParallelGroup, fields read by rank/layout.py): its
members as global ranks, the job's name for it (`group_desc`, Megatron's "TENSOR_MODEL_PARALLEL_GROUP",
vLLM's "tp" from its GroupCoordinator, a DeviceMesh's dimension names) and the dimension that name says.
The report places a hung, slow or crashed rank with it: its host, GPU, tp group, pp stage.

The guarantees of the collectives' wrappers (collectives.py) hold here too:
  - the group or mesh is handed back as torch made it, and none is kept: ranks and names are copied
    into the record, nothing else (no reference, weak or strong);
  - under torch.compile tracing the wrapper is the original call and nothing else;
  - it pickles by reference as `torch.distributed.<name>` (`torch.distributed.device_mesh.init_device_mesh`);
  - a group it cannot read, or a record it cannot write, costs that group's record and nothing else:
    the layer, and the job's call, go on. Torch's own internal calls (a DeviceMesh building its groups,
    new_subgroups calling new_group) are not wrapped, so one call is one set of records.
Past MAX_RECORDS records in a process (a job making groups in a loop), groups are no longer recorded.

Typical use (collectives.patch does it when torch.distributed is imported):
    patch(torch.distributed)
"""
from __future__ import annotations

import functools
import sys
from types import ModuleType

from grpo_doctor.rank import layout
from grpo_doctor.rank.auto import state
from grpo_doctor.rank.auto.collectives import MARK, _compiling

GROUP_MAKERS = ("new_group", "new_subgroups", "new_subgroups_by_enumeration")
MESH_MODULE = "torch.distributed.device_mesh"
MAX_RECORDS = 256  # parallel_group records per process: a job making groups in a loop stays bounded

_written = 0


def patch(dist: ModuleType) -> None:
    for name in GROUP_MAKERS:
        func = getattr(dist, name, None)
        if func is not None and not getattr(func, MARK, False):
            setattr(dist, name, _wrap(dist, name, func, dist.__name__))
    mesh_module = sys.modules.get(MESH_MODULE)
    func = getattr(dist, "init_device_mesh", None) or getattr(mesh_module, "init_device_mesh", None)
    if func is None or getattr(func, MARK, False):
        return
    wrapper = _wrap(dist, "init_device_mesh", func, MESH_MODULE if mesh_module is not None else dist.__name__)
    if getattr(dist, "init_device_mesh", None) is func:
        dist.init_device_mesh = wrapper
    if mesh_module is not None and getattr(mesh_module, "init_device_mesh", None) is func:
        mesh_module.init_device_mesh = wrapper


def _wrap(dist: ModuleType, name: str, func, module_name: str):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        if _compiling():
            return func(*args, **kwargs)
        result = func(*args, **kwargs)
        if not state.is_off():
            caller = sys._getframe(1)
            try:
                _record(dist, name, result, kwargs.get("group_desc"), caller)
            except Exception:  # noqa: BLE001 - a group we cannot read or write: no record for it, the layer stays on
                pass
            finally:
                del caller
        return result

    # Pickled by reference under the name it is reached by (functools.wraps gave it distributed_c10d's).
    wrapper.__module__ = module_name
    setattr(wrapper, MARK, True)
    return wrapper


def _record(dist: ModuleType, name: str, result, desc, caller) -> None:
    global _written
    rec = state.recorder or state.current()
    if rec is None or _written >= MAX_RECORDS:
        return
    if name == "init_device_mesh":
        entries = layout.mesh_groups(dist, result)
    else:
        group = result[0] if name != "new_group" and isinstance(result, tuple) else result
        source = "new_group" if name == "new_group" else "new_subgroups"
        entry = layout.group_entry(dist, group, name=desc or layout.caller_name(caller), source=source) \
            if _member(dist, group) else None
        entries = [entry] if entry is not None else []
    for entry in entries[:MAX_RECORDS - _written]:
        rec.parallel_group(**entry)
        _written += 1


def _member(dist: ModuleType, group) -> bool:
    """Whether `group` is a group of this rank (new_group hands the others torch's NON_GROUP_MEMBER)."""
    if group is None:
        return False
    non_member = getattr(getattr(dist, "GroupMember", None), "NON_GROUP_MEMBER", None)
    return group is not non_member
