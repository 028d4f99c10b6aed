"""Whether this process records under zero-code instrumentation, and turning it off on our own failure.

A process records once it is a rank of the job: when torch.distributed.init_process_group returns
(rank and world size from the process group), or, before any process group, at the first wrapped
call in a process whose RANK variable is set or that is a plain single process (rank 0). A Ray
worker without RANK waits for init_process_group: Ray starts many workers, and all of them would
otherwise claim rank 0. A process group whose size disagrees with the launcher's WORLD_SIZE is a
side world (vLLM's engine processes start their own, inheriting the trainer's variables): such a
process is not a rank and records nothing.

Whatever goes wrong in our code calls `fail`: instrumentation is off for the process from then on,
with one line on stderr naming the cause; the wrapped originals keep running.

Typical use (inside a wrapper):
    rec = state.current()          # None: call only the original
    ...
    except Exception as exc:
        state.fail("all_reduce", exc)
"""
from __future__ import annotations

import os
import sys

from grpo_doctor.rank.identity import process_group
from grpo_doctor.rank.messages import say

FAULT_ENV = "GRPO_DOCTOR_INSTRUMENT_FAULT"  # for tests: our own code raises at the first wrapped call

# The hot path reads `recorder` directly: one module attribute, None until recording starts.
recorder = None
_off = False
_fault = bool(os.environ.get(FAULT_ENV))


def is_off() -> bool:
    return _off


def current():
    """The recorder for a wrapped call, starting it where this process is a rank; None: not (yet) recording."""
    if _off:
        return None
    if recorder is not None:
        return recorder
    return _start() if _is_rank() else None


def after_init_process_group() -> None:
    """torch.distributed.init_process_group has returned: this process has its rank now."""
    if not _off and recorder is None and _is_rank():
        _start()


def fail(where: str, exc: BaseException) -> None:
    """Our code failed: stop instrumenting this process, say so once, let the job go on."""
    global _off, recorder
    if _off:
        return
    _off, recorder = True, None
    say(f"zero-code instrumentation is off in this process: {where} failed ({type(exc).__name__}: {exc}); "
        f"the job goes on unchanged")


def _start():
    global recorder, _off
    if _fault:
        raise RuntimeError(f"fault injected by {FAULT_ENV}")
    from grpo_doctor.rank import api, hooks
    from grpo_doctor.rank import recorder as recorder_module

    if api.is_recording():
        recorder = api.current_recorder()  # the job records itself (grpo_doctor.init()): join it
        return recorder
    recorder_module.LAUNCH_EXTRAS.update(_ray_identity())
    # The job's signal dispositions stay as found: no SIGTERM/SIGHUP handler, no wakeup fd, no signal
    # thread (a handler delays the end of a process busy in C code and changes signal.getsignal()).
    # So a signal ends the process as it would have without us: no end record, and the records of
    # the last flush interval (0.25 s) are lost (docs/instrument.md). hooks.install reads this name
    # when api.init calls it, once per process.
    hooks.CAUGHT_SIGNALS = ()
    if api.init() is None:  # GRPO_DOCTOR_DISABLE, or recording could not start (api said why)
        _off = True
        return None
    recorder = api.current_recorder()
    return recorder


def _is_rank() -> bool:
    global _off
    dist = process_group()
    env = os.environ
    if dist is not None:
        world = env.get("WORLD_SIZE", "")
        if world.isdigit() and int(world) != dist.get_world_size():
            _off = True  # a side world, not one of the job's ranks
            return False
        return True
    if "RANK" in env:
        return True
    return not _in_ray_worker()


def _ray_worker_module():
    """Ray's worker module when Ray is loaded in this process (never imported here)."""
    return sys.modules.get("ray._private.worker")


def _in_ray_worker() -> bool:
    worker = _ray_worker_module()
    return worker is not None and getattr(worker.global_worker, "mode", None) == worker.WORKER_MODE


def _ray_identity() -> dict[str, str]:
    """The Ray actor this process is ({"ray_actor": "Trainer", "ray_actor_id": ...}); empty outside Ray."""
    if not _in_ray_worker():
        return {}
    ctx = sys.modules["ray"].get_runtime_context()
    actor_id = ctx.get_actor_id()
    if actor_id is None:
        task = ctx.get_task_name() or ""
        return {"ray_task": task} if task else {}
    # A named actor's name, else its class: the task running now is "Class.method".
    name = ctx.get_actor_name() or (ctx.get_task_name() or "").split(".")[0]
    return {"ray_actor": name, "ray_actor_id": actor_id}


def _off_in_child() -> None:
    """A forked child (a DataLoader worker) is not a rank: grpo_doctor's recorder stops there too."""
    global _off, recorder
    _off, recorder = True, None


os.register_at_fork(after_in_child=_off_in_child)
