"""torch.distributed collectives as phases, and init_process_group as the moment a process learns its rank.

Each wrapped call (`dist.all_reduce(t)`, `dist.barrier()`, ...) is a phase named after the op: a
rank hung in a collective shows "all_reduce" as its open phase, and watch's per-phase stall timeout
learns how long each op takes. The phase begin carries a `detail`: the group ("default_pg" or the
group's description), its size, a per-group sequence number (the calls this process made in that
group through torch.distributed, counted from 1: ranks that called the same collectives agree on
it, a rank one behind is the one that skipped a call) and the tensor's `numel` and `size_bytes`
(the input where there is one). `async_op=True` calls are marked "async": their phase covers the
launch only, the wait happens in Work.wait(). A call that cannot be described (a rank calling a
collective on a group it is not a member of) is a phase without detail; the layer stays on.
Past the first calls of each op in each group in a step, calls are counted rather than written
(`quiet.py`): the rank file stays bounded, and a call that runs long is written all the same.

Only the names of the torch.distributed namespace are wrapped, as user code and frameworks
(DeepSpeed's comm, accelerate) call them; torch's own calls between its functions (all_gather_object
calls all_gather) stay unwrapped, so a call is one phase, never nested ones.

What a wrapper keeps the job from noticing:
  - it holds no process group alive: groups are known by id and a weak reference, and forgotten
    when torch lets them go (gloo's threads and sockets go with them);
  - under torch.compile / torch.export tracing it calls the original and nothing else, so dynamo
    traces the collective exactly as without us (fullgraph=True included);
  - it pickles as `torch.distributed.<op>` (its __module__), which unpickles to whatever that name
    is in the receiving process: the wrapper where instrumented, torch's function elsewhere.

Typical use (sitecustomize does it when torch.distributed is imported):
    patch(torch.distributed)
"""
from __future__ import annotations

import functools
import inspect
import sys
import time
import weakref
from types import ModuleType
from typing import Any

from grpo_doctor.rank.auto import quiet, state
from grpo_doctor.rank.messages import say

# op -> the parameter whose tensor's size is recorded (None: no tensor, or a list of them)
OPS: dict[str, str | None] = {
    "all_reduce": "tensor",
    "all_gather": "tensor",
    "all_gather_into_tensor": "input_tensor",
    "reduce_scatter": "output",
    "reduce_scatter_tensor": "input",
    "broadcast": "tensor",
    "reduce": "tensor",
    "gather": "tensor",
    "scatter": "tensor",
    "all_to_all": None,
    "all_to_all_single": "input",
    "send": "tensor",
    "recv": "tensor",
    "barrier": None,
    "monitored_barrier": None,
    "all_gather_object": None,
    "broadcast_object_list": None,
    "gather_object": None,
    "scatter_object_list": None,
}
MARK = "_grpo_doctor_wrapped"  # on our wrappers: a module patched twice (reloaded) is wrapped once

# id(group) -> (weak reference to it, [label, size, calls so far]); never the group itself
_groups: dict[int, tuple[weakref.ref, list]] = {}
_default: list | None = None  # the default group's entry, also reached by group=None
_torch: ModuleType | None = None  # torch, once torch.distributed is patched


def patch(dist: ModuleType) -> None:
    global _torch
    if not getattr(dist, "is_available", lambda: False)():
        return  # a torch built without distributed support: nothing to wrap
    _torch = sys.modules.get("torch")
    for op, tensor_param in OPS.items():
        func = getattr(dist, op, None)
        if func is not None and not getattr(func, MARK, False):
            setattr(dist, op, _wrap_collective(dist, op, func, tensor_param))
    init = getattr(dist, "init_process_group", None)
    if init is not None and not getattr(init, MARK, False):
        dist.init_process_group = _wrap_init(dist, init)
    try:  # group creation as the parallel layout (groups.py): a failure there costs the layout, not this layer
        from grpo_doctor.rank.auto import groups

        groups.patch(dist)
    except Exception as exc:  # noqa: BLE001
        say(f"zero-code instrumentation records no process groups in this process ({type(exc).__name__}: {exc}); "
            "the rest goes on")


def _compiling() -> bool:
    """torch.compiler.is_compiling(): True while dynamo traces (it folds the call to a constant), so a
    traced wrapper is the original call alone. torch.compiler is imported after torch.distributed,
    hence looked up here, when a collective is called."""
    compiler = getattr(_torch, "compiler", None)
    return compiler is not None and compiler.is_compiling()


def _positions(func, *names: str | None) -> list[int | None]:
    params = list(inspect.signature(func).parameters)
    return [params.index(n) if n in params else None for n in names]


def _wrap_collective(dist: ModuleType, op: str, func, tensor_param: str | None):
    group_pos, tensor_pos, async_pos = _positions(func, "group", tensor_param, "async_op")

    def describe(args: tuple, kwargs: dict) -> dict[str, Any] | None:
        """The call's detail; None where it cannot be had (that call goes without, nothing else changes)."""
        try:
            group = args[group_pos] if group_pos is not None and len(args) > group_pos else kwargs.get("group")
            entry = _group_entry(dist, group)
            entry[2] += 1
            detail = {"group": entry[0], "group_size": entry[1], "seq": entry[2]}
            if tensor_param is not None:
                tensor = (args[tensor_pos] if tensor_pos is not None and len(args) > tensor_pos
                          else kwargs.get(tensor_param))
                if tensor is not None and hasattr(tensor, "element_size"):
                    numel = tensor.numel()
                    detail["numel"] = numel
                    detail["size_bytes"] = numel * tensor.element_size()
            if async_pos is not None and (args[async_pos] if len(args) > async_pos else kwargs.get("async_op")):
                detail["async"] = True
            return detail
        except Exception:  # noqa: BLE001 - a group we cannot read (not a member): no detail for this call
            return None

    # Named `wrapper`: stack grouping (checks/stack_groups.py) skips frames of that name when it
    # names the user's line that called the collective.
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        if _compiling():
            return func(*args, **kwargs)
        rec = state.recorder
        if rec is None:
            try:
                rec = state.current()
            except Exception as exc:  # noqa: BLE001
                state.fail(op, exc)
            if rec is None:
                return func(*args, **kwargs)
        detail = describe(args, kwargs)
        try:
            mono = time.monotonic()
            counted = not quiet.detailed(rec, op, detail, mono)
            if not counted:
                rec.begin_phase(op, False, detail)
        except Exception as exc:  # noqa: BLE001 - ours: off, and the call goes on
            state.fail(op, exc)
            return func(*args, **kwargs)
        if counted:  # the call's own exception passes through quiet.call untouched
            return quiet.call(rec, op, detail, mono, func, args, kwargs)
        try:
            result = func(*args, **kwargs)
        except BaseException as exc:
            _end(rec, op, type(exc), exc)
            raise
        _end(rec, op, None, None)
        return result

    # Pickled by reference as torch.distributed.<op>, the name it is reached by (functools.wraps gave it
    # torch.distributed.distributed_c10d's, where pickle would find the original, not this function).
    wrapper.__module__ = dist.__name__
    setattr(wrapper, MARK, True)
    return wrapper


def _end(rec, op: str, exc_type, exc) -> None:
    try:
        rec.end_phase(exc_type, exc)
    except Exception as ours:  # noqa: BLE001
        state.fail(op, ours)


def _group_entry(dist: ModuleType, group) -> list:
    """A group's label, size and call count; the default group's under both None and its own object."""
    global _default
    if group is None:
        if _default is not None:
            return _default
        try:
            pg = dist.distributed_c10d._get_default_group()
        except (ValueError, RuntimeError):  # not initialised: the call itself raises what the user should see
            return ["default_pg", None, 0]
        _default = _entry_of(pg)
        return _default
    return _entry_of(group)


def _entry_of(pg) -> list:
    key = id(pg)
    known = _groups.get(key)
    if known is not None and known[0]() is pg:
        return known[1]
    desc = getattr(pg, "group_desc", None)
    label = desc if desc and desc != "undefined" else str(getattr(pg, "group_name", "?"))
    entry = [label, pg.size(), 0]
    _groups[key] = (weakref.ref(pg, functools.partial(_forget, key)), entry)
    return entry


def _forget(key: int, ref: weakref.ref) -> None:
    """A group was freed: its entry goes (its id may be another group's later)."""
    known = _groups.get(key)
    if known is not None and known[0] is ref:
        _groups.pop(key, None)


def _wrap_init(dist: ModuleType, func):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        global _default
        result = func(*args, **kwargs)
        _groups.clear()  # a new default group (after destroy_process_group) counts from 1
        _default = None
        try:
            state.after_init_process_group()
        except Exception as exc:  # noqa: BLE001
            state.fail("starting the recorder after init_process_group", exc)
        return result

    wrapper.__module__ = dist.__name__  # pickled as torch.distributed.init_process_group
    setattr(wrapper, MARK, True)
    return wrapper
