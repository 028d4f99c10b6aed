"""The recording API used inside training processes; `grpo_doctor` re-exports it.

One recorder per process, created by `init()` or on first use. Every function is safe to
call when recording is off or broken: it then does nothing, and the reason was said once on
stderr. Nothing here raises into the training loop.

Typical use:
    import grpo_doctor as gd
    gd.init()                                   # after torch.distributed is initialised
    for n in range(num_steps):
        with gd.phase("rollout"):
            completions = generate(prompts)
        with gd.phase("backward", sync=True):  # CUDA sync marker
            loss.backward()
        gd.memory_snapshot("step")
        gd.step(n, loss=loss.item(), reward=reward_mean)
"""
from __future__ import annotations

import functools
import operator
import os
import sys
import threading
from pathlib import Path
from typing import Any

from grpo_doctor.rank import hooks, layout, memory_history
from grpo_doctor.rank.identity import RankIdentity
from grpo_doctor.rank.messages import say
from grpo_doctor.rank.recorder import Recorder
from grpo_doctor.rank.rundir import resolve_run_dir
from grpo_doctor.rank.sink import RecordingError
from grpo_doctor.schema import EndReason, Memory

DISABLE_ENV = "GRPO_DOCTOR_DISABLE"
SYNC_ENV = "GRPO_DOCTOR_SYNC"
MEMORY_HISTORY_ENV = "GRPO_DOCTOR_MEMORY_HISTORY"

_recorder: Recorder | None = None
_disabled = False
_init_lock = threading.Lock()
# Metrics computed by other calls (rollouts(compare_across_ranks=True)) that join the next step() record.
_pending_metrics: dict[str, Any] = {}


def init(
    run_dir: str | os.PathLike | None = None,
    *,
    enabled: bool = True,
    sync: bool | None = None,
    record_memory_history: bool | None = None,
    start_step: int | None = 0,
    flush_interval_s: float = 0.25,
) -> Path | None:
    """Start recording for this process; returns the run directory, or None when off.

    run_dir: used unless GRPO_DOCTOR_RUN_DIR is set (the supervisor's choice wins).
    sync: default for `phase(..., sync=None)`; True makes every phase a CUDA sync marker.
    record_memory_history: keep CUDA allocator history and dump it on a CUDA OOM.
    start_step: step number carried by records before the first `step()` call.
    """
    global _recorder, _disabled
    with _init_lock:
        if _recorder is not None:
            if run_dir is not None and Path(run_dir) != _recorder.paths.root and "GRPO_DOCTOR_RUN_DIR" not in os.environ:
                _say(f"init(run_dir={str(run_dir)!r}) ignored: already recording to {_recorder.paths.root}")
            return _recorder.paths.root
        if not enabled or _env_flag(DISABLE_ENV):
            _disabled = True
            return None
        sync = _env_flag(SYNC_ENV) if sync is None else sync
        ident = RankIdentity.detect()
        try:
            _recorder = Recorder(
                resolve_run_dir(run_dir),
                ident,
                sync=sync,
                warn=_say,
                start_step=start_step,
                flush_interval_s=flush_interval_s,
            )
        except RecordingError as exc:
            _disabled = True
            _say(f"error: {exc}. Recording is off for this process; training goes on")
            return None
        except Exception as exc:  # NVML, a broken package: the observer must not stop training
            _disabled = True
            _say(f"error: recording could not start ({type(exc).__name__}: {exc}); training goes on")
            return None
        hooks.install(lambda: _recorder, on_fork_child=_forget_in_child)
        wants_history = _env_flag(MEMORY_HISTORY_ENV) if record_memory_history is None else record_memory_history
        if wants_history:
            try:
                if not memory_history.enable():
                    _say("record_memory_history has no effect: CUDA is not available in this process")
            except Exception as exc:
                _say(f"record_memory_history failed ({type(exc).__name__}: {exc}); recording goes on without it")
        return _recorder.paths.root


class phase:  # noqa: N801 - reads as a function: `with gd.phase("rollout"):` / `@gd.phase("reward")`
    """Mark a training phase; a context manager and a decorator.

    sync=True calls torch.cuda.synchronize() on entry and exit, so the phase's GPU time and any
    asynchronous CUDA error land in this phase. None takes init()'s default.
    """

    __slots__ = ("name", "sync", "_rec")

    def __init__(self, name: str, sync: bool | None = None) -> None:
        self.name = name
        self.sync = sync

    def __enter__(self) -> phase:
        rec = self._rec = _recorder if _recorder is not None else _auto_init()
        if rec is not None:
            rec.begin_phase(self.name, rec.sync if self.sync is None else self.sync)
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if self._rec is not None:
            self._rec.end_phase(exc_type, exc)
        return False

    def __call__(self, func):
        name, sync = self.name, self.sync

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with phase(name, sync):
                return func(*args, **kwargs)

        return wrapper


def step(n: int, **metrics: Any) -> None:
    """Step n has finished with these metrics; also the progress heartbeat.

    Records written after this call carry step n + 1.
    """
    rec = _recorder if _recorder is not None else _auto_init()
    if rec is not None:
        if _pending_metrics:
            metrics = {**_pending_metrics, **metrics}
            _pending_metrics.clear()
        try:
            rec.step(_whole_number(n), metrics)
        except (TypeError, ValueError):
            _say(f"step({n!r}) ignored: a step must be a whole number")


def set_step(n: int | None) -> None:
    """Set the step number carried by the next records, for loops that count steps themselves."""
    rec = _recorder if _recorder is not None else _auto_init()
    if rec is not None:
        try:
            rec.current_step = None if n is None else _whole_number(n)
        except (TypeError, ValueError):
            _say(f"set_step({n!r}) ignored: a step must be a whole number")


def memory_snapshot(tag: str = "snapshot") -> Memory | None:
    """Record CUDA allocator, per-process GPU (NVML) and host memory; returns the record."""
    rec = _recorder if _recorder is not None else _auto_init()
    if rec is None:
        return None
    try:
        return rec.memory_snapshot(tag)
    except Exception as exc:  # an observer must not take the run down
        _say(f"memory_snapshot failed ({type(exc).__name__}: {exc}); continuing without it")
        return None


def parallel_group(name: str | None, group: Any, *, dim: str | None = None) -> None:
    """Record that this rank is a member of a process group: `group` a torch ProcessGroup (its members
    are read) or the members' global ranks. `name` is the job's name for it ("tp", "expert"); `dim` the
    parallel dimension, else read from the name (rank/layout.py: "TENSOR_MODEL_PARALLEL_GROUP" is tp).
    The report names a hung, slow or crashed rank's groups with it, and judges whether the ranks that
    stand out share a host, a group across hosts, or neither."""
    rec = _recorder if _recorder is not None else _auto_init()
    if rec is None:
        return
    try:
        if isinstance(group, (list, tuple, range)):
            ranks = [operator.index(r) for r in group]
            entry = {"ranks": ranks, "name": layout.job_name(name), "dim": dim or layout.dim_of(name),
                     "pg_name": None, "source": "api"}
        else:
            entry = layout.group_entry(_dist(), group, name=name, source="api", dim=dim)
        if entry is not None and entry["ranks"]:
            rec.parallel_group(**entry)
    except Exception as exc:  # noqa: BLE001 - an observer must not take the run down
        _say(f"parallel_group({name!r}) ignored ({type(exc).__name__}: {exc})")


def device_mesh(mesh: Any) -> None:
    """Record this rank's group along each dimension of a torch DeviceMesh, named by its mesh_dim_names."""
    rec = _recorder if _recorder is not None else _auto_init()
    if rec is None:
        return
    try:
        for entry in layout.mesh_groups(_dist(), mesh, source="api"):
            rec.parallel_group(**entry)
    except Exception as exc:  # noqa: BLE001
        _say(f"device_mesh() ignored ({type(exc).__name__}: {exc})")


def parallel_layout() -> int:
    """Record this rank's groups as the frameworks the job imported keep them (Megatron's parallel_state,
    vLLM's and SGLang's GroupCoordinators, DeepSpeed's utils.groups); how many were recorded. Call it once
    the framework has made its groups. `watch --instrument` records groups as they are made, without it."""
    rec = _recorder if _recorder is not None else _auto_init()
    if rec is None:
        return 0
    try:
        entries = layout.framework_groups(sys.modules.get("torch.distributed"))
    except Exception as exc:  # noqa: BLE001
        _say(f"parallel_layout() read nothing ({type(exc).__name__}: {exc})")
        return 0
    for entry in entries:
        rec.parallel_group(**entry)
    return len(entries)


def _dist():
    """torch.distributed as the job imported it (never imported here)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        raise RuntimeError("torch.distributed is not imported")
    return dist


def flush() -> None:
    if _recorder is not None:
        _recorder.flush()


def shutdown() -> None:
    """Write the End record and close this rank's file (also done automatically at exit)."""
    global _recorder
    if _recorder is not None:
        _recorder.end(EndReason.SHUTDOWN)
        _recorder = None


def run_dir() -> Path | None:
    return _recorder.paths.root if _recorder is not None else None


def is_recording() -> bool:
    return _recorder is not None and not _recorder.ended


def current_recorder() -> Recorder | None:
    """This process's recorder, started on first use; None when recording is off."""
    return _recorder if _recorder is not None else _auto_init()


def add_to_next_step(key: str, value: Any) -> None:
    """Carry a metric into the record of the next step() call (for calls that are not step())."""
    _pending_metrics[key] = value


def _auto_init() -> Recorder | None:
    if _disabled:
        return None
    init()
    return _recorder


def _forget_in_child() -> None:
    global _recorder, _disabled
    if _recorder is not None:
        _recorder.sink.abandon()
        _recorder.ended = True
    _recorder, _disabled = None, True


def _whole_number(n: Any) -> int:
    """numpy integers and 0-d tensors are fine; 2.5 or "2" are not."""
    try:
        return operator.index(n)
    except TypeError:
        value = int(n)
        if value != n:
            raise ValueError(n) from None
        return value


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def disabled_by_environment() -> bool:
    """GRPO_DOCTOR_DISABLE: the launcher gives every rank the same, so all ranks skip a gather alike.
    (init(enabled=False) is one process's choice: such a rank still takes part, sending nothing.)"""
    return _env_flag(DISABLE_ENV)


def _say(message: str) -> None:
    say(message)  # logging, logger "grpo_doctor": shown on stderr unless the program configured logging
