"""The per-process recorder: turns API calls into records in this rank's file.

Hot-path methods (`begin_phase`, `end_phase`, `step`) take two clock readings and queue a
tuple; the sink's thread builds the record. Phases nest per thread.

Typical use (through grpo_doctor's module functions, which own the one Recorder):
    rec = Recorder(run_dir, RankIdentity.detect(), sync=False, warn=print)
    rec.begin_phase("rollout", sync=False); ...; rec.end_phase(None, None)
    rec.step(0, {"loss": 0.1})
    rec.end(EndReason.EXIT)
"""
from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from grpo_doctor.host.environment import collect_launch_settings, collect_versions, current_gpu_uuid
from grpo_doctor.host.nvml import Nvml
from grpo_doctor.rank import memory_history
from grpo_doctor.rank.identity import RankIdentity
from grpo_doctor.rank.memory import memory_capacities, take_memory_snapshot
from grpo_doctor.rank.sink import JsonlSink
from grpo_doctor.schema import (
    End,
    EndReason,
    Error,
    Header,
    Memory,
    ParallelGroup,
    PhaseBegin,
    PhaseEnd,
    RunPaths,
    Step,
    encode_values,
)

_SCALARS = (int, float, str, bool, type(None))
# Added to the header's `launch` by whoever starts the recorder knowing more than the environment says
# (the zero-code instrumentation: the Ray actor this process is).
LAUNCH_EXTRAS: dict[str, str] = {}
PHASE_ATTR = "_grpo_doctor_phase"  # set on an exception by the innermost phase it left


class Recorder:
    def __init__(
        self,
        run_dir: Path,
        ident: RankIdentity,
        *,
        sync: bool,
        warn,
        start_step: int | None = 0,
        flush_interval_s: float = 0.25,
        nvml: Nvml | None = None,
    ) -> None:
        self.paths = RunPaths(run_dir)
        self.ident = ident
        self.sync = sync
        self.current_step = start_step
        self.num_steps = 0  # step() calls: the zero-code heartbeat stands aside when the job calls step() itself
        self.nvml = nvml or Nvml()
        self.ended = False  # set as the end record is begun: nothing is recorded after it
        self._end_lock = threading.Lock()  # a handler and the signal watcher may both end us
        self.end_written = threading.Event()  # the end record is on disk (or could not be written)
        self._ending_thread: int | None = None
        self._local = threading.local()
        self._main_stack = self._stack()  # the main thread's phases, for End records from handlers
        self.sink = JsonlSink(
            self.paths.rank_file(ident.rank), encode=self._encode, warn=warn, flush_interval_s=flush_interval_s
        )
        try:
            self.gpu_uuid = current_gpu_uuid(ident.local_rank, self.nvml)
            self.gpu_index, self.gpu_pci_bus_id = _gpu_place(self.nvml, self.gpu_uuid)
            self.sink.write_now([self._header()])
        except BaseException:
            self.sink.close(timeout_s=1.0)  # release the rank file's lock and the flush thread
            raise

    # -- hot path ---------------------------------------------------------------------------

    def begin_phase(self, name: str, sync: bool, detail: dict[str, Any] | None = None) -> None:
        """detail: PhaseBegin's `detail` (a collective's group, sequence number and size, from the
        zero-code instrumentation); the line holds it only when given."""
        stack = self._stack()
        synced = sync and _cuda_sync()
        path = f"{stack[-1][1]}/{name}" if stack else name
        mono = time.monotonic()
        stack.append((name, path, mono, synced))
        self.sink.enqueue((PhaseBegin, self.current_step, time.time(), mono, (name, path, detail)))

    def end_phase(self, exc_type, exc) -> None:
        stack = self._stack()
        if not stack:
            return
        name, path, began, synced = stack.pop()
        error = exc_type.__name__ if exc_type is not None else None
        if exc is not None and not hasattr(exc, PHASE_ATTR):
            try:
                setattr(exc, PHASE_ATTR, (name, path))
            except AttributeError:  # exceptions with __slots__
                pass
        if synced and exc_type is None:
            try:
                _cuda_sync()  # an asynchronous CUDA error surfaces here, inside the phase that caused it
            except BaseException as sync_exc:
                self._queue_phase_end(name, path, began, synced, type(sync_exc).__name__)
                setattr(sync_exc, PHASE_ATTR, (name, path))
                raise
        self._queue_phase_end(name, path, began, synced, error)

    def _queue_phase_end(self, name, path, began, synced, error) -> None:
        mono = time.monotonic()
        self.sink.enqueue((PhaseEnd, self.current_step, time.time(), mono, (name, path, mono - began, synced, error)))

    def step(self, n: int, metrics: dict[str, Any]) -> None:
        clean = {k: v if type(v) in _SCALARS else _to_scalar(v) for k, v in metrics.items()}
        self.sink.enqueue((Step, n, time.time(), time.monotonic(), (clean,)))
        self.current_step = n + 1
        self.num_steps += 1

    # -- less frequent ------------------------------------------------------------------------

    def memory_snapshot(self, tag: str) -> Memory:
        fields = take_memory_snapshot(self.nvml, self.gpu_uuid)
        record = Memory(*self._common(self.current_step), tag=tag, **fields)
        self.sink.enqueue(record)
        return record

    def parallel_group(self, ranks: list[int], name: str | None, dim: str | None, pg_name: str | None,
                       source: str, **mesh: Any) -> None:
        """Record that this rank is a member of a process group (schema ParallelGroup; `mesh`: its mesh_*
        fields, for a DeviceMesh dimension)."""
        self.sink.enqueue(ParallelGroup(*self._common(self.current_step), ranks=ranks, name=name, dim=dim,
                                        pg_name=pg_name, source=source, **mesh))

    def exception(self, exc_type, exc, tb, fatal: bool = True) -> None:
        """Record an exception that is ending the process (or a thread, when fatal is False)."""
        where = getattr(exc, PHASE_ATTR, None) or self._open_phase()
        dump = None
        if memory_history.is_cuda_oom(exc):
            dump = memory_history.dump_on_oom(self.paths, self.ident.rank)
        error = Error(
            *self._common(self.current_step),
            exc_type=exc_type.__name__,
            message=str(exc)[:20000],
            traceback="".join(traceback.format_exception(exc_type, exc, tb))[-50000:],
            phase=where[0] if where else None,
            path=where[1] if where else None,
            memory_dump=dump,
        )
        self.sink.write_now([error])
        if fatal:
            self.end(EndReason.EXCEPTION)

    def end(self, reason: EndReason, signal_name: str | None = None, timeout_s: float | None = None) -> None:
        with self._end_lock:
            if self.ended:
                return
            self.ended = True
            self._ending_thread = threading.get_ident()
        try:
            where = self._open_phase()
            end = End(
                *self._common(self.current_step),
                reason=reason,
                signal=signal_name,
                open_path=where[1] if where else None,
                num_dropped=self.sink.num_dropped,
            )
            # Each wait is bounded (sink.WRITE_WAIT_S unless told): a hung file system costs the End record,
            # never the process its exit. Where the record could not be written, close does not wait.
            written = self.sink.write_now([end], timeout_s)
            self.sink.close(timeout_s=(2.0 if timeout_s is None else timeout_s) if written else 0.0)
        finally:
            self.end_written.set()

    def ending_in_this_thread(self) -> bool:
        """Whether this thread is writing the end record now: a signal handler re-entered inside it."""
        return self._ending_thread == threading.get_ident() and not self.end_written.is_set()

    def flush(self, timeout_s: float | None = None) -> None:
        self.sink.flush(timeout_s)

    # -- helpers ------------------------------------------------------------------------------

    def _stack(self) -> list:
        try:
            return self._local.stack
        except AttributeError:
            self._local.stack = []
            return self._local.stack

    def _open_phase(self) -> tuple[str, str] | None:
        stack = self._stack() or self._main_stack
        return (stack[-1][0], stack[-1][1]) if stack else None

    def _common(self, step: int | None) -> tuple:
        return (self.ident.rank, self.ident.host, self.ident.pid, step, time.time(), time.monotonic())

    def _encode(self, raw) -> dict:
        """A queued tuple's line: (record type, step, t, mono, the type's own fields in declared order)."""
        cls, step, t, mono, extra = raw
        return encode_values(cls, (self.ident.rank, self.ident.host, self.ident.pid, step, t, mono, *extra))

    def _header(self) -> Header:
        i = self.ident
        return Header(
            *self._common(self.current_step),
            local_rank=i.local_rank,
            world_size=i.world_size,
            node_rank=i.node_rank,
            local_world_size=i.local_world_size,
            gpu_uuid=self.gpu_uuid,
            gpu_index=self.gpu_index,
            gpu_pci_bus_id=self.gpu_pci_bus_id,
            versions=collect_versions(self.nvml),
            launch={**collect_launch_settings(os.environ), **LAUNCH_EXTRAS},
            argv=list(sys.argv),
            attempt=i.attempt,
            **memory_capacities(),
        )


def _gpu_place(nvml: Nvml, gpu_uuid: str | None) -> tuple[int | None, str | None]:
    """The GPU's NVML index and PCI bus id; (None, None) where they cannot be had (never raises)."""
    try:
        return nvml.place_of(gpu_uuid)
    except Exception:  # noqa: BLE001 - a GPU's place is a detail: the header goes without it
        return None, None


def _cuda_sync() -> bool:
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return False
    torch.cuda.synchronize()
    return True


def _to_scalar(value: Any) -> float | str:
    try:
        return float(value)  # tensors, numpy scalars
    except (TypeError, ValueError):
        return str(value)
