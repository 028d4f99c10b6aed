"""What every GPU (NVML) and every rank process (psutil) is doing, sampled once a second.

The supervisor of `grpo-doctor watch` runs one Sampler per node. Its samples, appended to
`supervisor/<host>/samples.jsonl` one JSON object per line with `kind` "gpu" or "proc", show
afterwards whether a hung rank was spinning or sleeping, growing in memory or gone, and what its
GPU was doing meanwhile. Nothing here raises because a process vanished or an NVML query failed:
a vanished process reads state "gone", a failed query leaves that one metric None. Without an
NVIDIA driver GPU sampling is off, which `notify` is told once.

Typical use:
    sampler = Sampler(run_paths.supervisor / host / "samples.jsonl", notify=console.warn)
    sampler.set_targets({0: 4101, 1: 4102})   # rank -> pid; again whenever ranks come or go
    sampler.start()
    ...
    sampler.latest(1)    # ProcSample(rank=1, pid=4102, state="sleeping", cpu_pct=0.0, ...)
    sampler.drain()      # every sample taken since the last drain (watch's live memory-growth)
    sampler.stop()
"""
from __future__ import annotations

import dataclasses
import json
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, ClassVar

import psutil

from grpo_doctor.host.nvml import Nvml, NvmlError
from grpo_doctor.schema import SCHEMA_VERSION

NO_NVML_MESSAGE = "GPU sampling off: no NVIDIA driver (NVML unavailable)"
# A CPU figure over a shorter interval is noise: psutil's CPU times tick every 10 ms, so a
# process sampled just after it was found reads 0 % even while it spins.
MIN_CPU_INTERVAL_S = 0.2
UNREADABLE = "unreadable"  # alive, but /proc does not show it to us (hidepid)
GONE = "gone"  # the state of a process that no longer exists (or whose pid now names another one)
MAX_UNDRAINED = 4096  # samples kept for drain() (watch's live memory rule); the oldest go past this


@dataclass(frozen=True)
class GpuSample:
    t: float  # wall time, s since the epoch
    index: int  # NVML index (not the CUDA index, which CUDA_VISIBLE_DEVICES renumbers)
    uuid: str | None
    util_pct: int | None
    mem_used_bytes: int | None
    mem_total_bytes: int | None
    power_w: float | None
    temp_c: int | None
    sm_clock_mhz: int | None
    processes: tuple[tuple[int, int | None], ...]  # (pid, used_bytes); used_bytes None where NVML cannot tell
    xid_events: tuple[int, ...]  # Xid numbers reported for this GPU since the previous sample
    ecc_errors: int | None  # uncorrected ECC errors since the driver loaded
    # Machine faults (host/nvml.py; None where this GPU or driver cannot say): the PCI bus id the
    # kernel's Xid lines name, the hardware-protection reasons slowing its clocks now, NVLink error
    # totals since the driver loaded (CRC: flit and data errors together), row remappings waiting for
    # a reset / that failed, and what the driver says the GPU needs now (NVML's recovery action).
    pci_bus_id: str | None = None
    throttle_reasons: tuple[str, ...] = ()
    nvlink_replay_errors: int | None = None
    nvlink_recovery_errors: int | None = None
    nvlink_crc_errors: int | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failure: bool | None = None
    recovery_action: str | None = None

    KIND: ClassVar[str] = "gpu"

    def to_dict(self) -> dict[str, Any]:
        out = _common(self)
        out["processes"] = [{"pid": pid, "used_bytes": used} for pid, used in self.processes]
        out["xid_events"] = list(self.xid_events)
        out["throttle_reasons"] = list(self.throttle_reasons)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GpuSample:
        fields = _known(cls, data)
        fields["processes"] = tuple((p["pid"], p["used_bytes"]) for p in data.get("processes", ()))
        fields["xid_events"] = tuple(data.get("xid_events", ()))
        fields["throttle_reasons"] = tuple(data.get("throttle_reasons", ()))
        return cls(**fields)


@dataclass(frozen=True)
class ProcSample:
    t: float
    rank: int
    pid: int
    rss_bytes: int | None  # None when the process is gone (or a zombie)
    # % of one core since the previous sample (or since set_targets), may exceed 100; None when
    # gone, or less than MIN_CPU_INTERVAL_S after set_targets (not measured yet)
    cpu_pct: float | None
    state: str  # psutil status: running, sleeping, disk-sleep, stopped, zombie, ...; or "gone"
    num_threads: int | None

    KIND: ClassVar[str] = "proc"

    def to_dict(self) -> dict[str, Any]:
        return _common(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProcSample:
        return cls(**_known(cls, data))


Sample = GpuSample | ProcSample
_KINDS: dict[str, type] = {GpuSample.KIND: GpuSample, ProcSample.KIND: ProcSample}


def sample_from_dict(data: Mapping[str, Any]) -> Sample:
    return _KINDS[data["kind"]].from_dict(data)


def _common(sample: Sample) -> dict[str, Any]:
    out: dict[str, Any] = {"schema": SCHEMA_VERSION, "kind": sample.KIND}
    out.update((f.name, getattr(sample, f.name)) for f in dataclasses.fields(sample))
    return out


def _known(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in data.items() if k in names}


class Sampler:
    def __init__(self, out_path: Path, nvml: Nvml | None = None, interval_s: float = 1.0,
                 notify: Callable[[str], None] | None = None) -> None:
        self.out_path = Path(out_path)
        self.interval_s = interval_s
        self.cpu_s = 0.0  # CPU time the sampling thread has used, for watching our own overhead
        self._nvml = nvml if nvml is not None else Nvml()
        self._notify = notify or (lambda message: print(f"grpo-doctor: {message}", file=sys.stderr))
        self._notified: set[str] = set()
        self._num_gpus: int | None = None  # None until the first round asks NVML; 0: GPU sampling off
        self._bus_ids: dict[int, str | None] = {}  # NVML index -> PCI bus id, asked once
        # rank -> (pid, cached Process, when it was opened: time.monotonic())
        self._procs: dict[int, tuple[int, psutil.Process | None, float]] = {}
        self._latest: dict[int, ProcSample] = {}
        self._latest_gpus: list[GpuSample] = []
        self._undrained: deque[Sample] = deque(maxlen=MAX_UNDRAINED)  # appended by the thread, taken by drain()
        self._targets_lock = threading.Lock()
        self._round_lock = threading.Lock()  # the thread and a direct sample_once() must not mix lines
        self._file: IO[str] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def set_targets(self, ranks: Mapping[int, int]) -> None:
        """The rank -> pid map to sample from now on; a rank whose pid is unchanged keeps its Process."""
        with self._targets_lock:
            old = self._procs
            keep = {rank for rank, pid in ranks.items() if rank in old and old[rank][0] == pid}
            self._procs = {rank: old[rank] if rank in keep else (pid, _open_process(pid), time.monotonic())
                           for rank, pid in ranks.items()}

    def latest(self, rank: int) -> ProcSample | None:
        return self._latest.get(rank)

    def latest_gpus(self) -> list[dict[str, Any]]:
        """The last round's GPU samples as dicts, for a hang report; [] with GPU sampling off."""
        return [g.to_dict() for g in self._latest_gpus]

    def latest_gpu_bytes(self, pid: int | None) -> int | None:
        """GPU memory pid held in the last round, over all GPUs; None where NVML does not say (it
        reports host pids inside a container's pid namespace)."""
        held = [used for g in self._latest_gpus for p, used in g.processes if p == pid and used is not None]
        return sum(held) if held else None

    def drain(self) -> list[Sample]:
        """The samples taken since the last call, oldest first (at most MAX_UNDRAINED)."""
        out = []
        while self._undrained:
            out.append(self._undrained.popleft())
        return out

    def sample_once(self, now: float | None = None) -> list[Sample]:
        """One round: every GPU, then every target process; appended to out_path and returned."""
        with self._round_lock:
            t = time.time() if now is None else now
            gpus = self._sample_gpus(t)
            self._latest_gpus = gpus
            samples: list[Sample] = list(gpus)
            with self._targets_lock:
                targets = sorted(self._procs.items())
            for rank, (pid, proc, opened_mono) in targets:
                measured = time.monotonic() - opened_mono >= MIN_CPU_INTERVAL_S
                sample = _sample_process(t, rank, pid, proc, measured)
                self._latest[rank] = sample
                samples.append(sample)
            self._undrained.extend(samples)
            self._write(samples)
            return samples

    def start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="grpo-doctor-sampler", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 2.0) -> bool:
        """Stop the thread; False if it is still stuck (in a hung NVML call, say) after timeout_s."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                return False  # the daemon thread dies with the process; its file stays open for it
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass  # the last round met a full disk; sampling already said so once
            self._file = None
        return True

    def _run(self) -> None:
        next_round = time.monotonic()
        while not self._stop.is_set():
            try:
                self.sample_once()
            except Exception as exc:  # a full disk, say: tell once and keep going, the job matters more
                self._notify_once(f"sampling failed: {exc!r}")
            self.cpu_s = time.thread_time()
            # After a slow round, keep the cadence from now on rather than catching up in a burst.
            next_round = max(next_round + self.interval_s, time.monotonic())
            self._stop.wait(next_round - time.monotonic())
        self.cpu_s = time.thread_time()

    def _write(self, samples: list[Sample]) -> None:
        if self._file is None:
            self.out_path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.out_path, "a", encoding="utf-8")  # noqa: SIM115 - open across rounds
        self._file.write("".join(json.dumps(s.to_dict()) + "\n" for s in samples))
        self._file.flush()  # a reader (the live console, a report) sees each round as soon as it is done

    def _notify_once(self, message: str) -> None:
        if message not in self._notified:
            self._notified.add(message)
            self._notify(message)

    def _sample_gpus(self, t: float) -> list[GpuSample]:
        if self._num_gpus is None:
            self._num_gpus = self._open_gpus()
        if not self._num_gpus:
            return []
        nvml = self._nvml
        try:
            events = nvml.xid_events()
        except NvmlError:
            events = []
        out = []
        for i in range(self._num_gpus):
            used_total = _guarded(nvml.memory_bytes, i) or (None, None)
            procs = _guarded(nvml.device_processes, i) or []
            # An Xid that NVML cannot place on a GPU is shown on every GPU rather than lost.
            xids = tuple(e.xid for e in events if e.index in (i, None))
            if i not in self._bus_ids or self._bus_ids[i] is None:
                self._bus_ids[i] = _guarded(nvml.pci_bus_id, i)
            faults = _guarded(nvml.fault_fields, i) or {}
            crc = [faults[k] for k in ("nvlink_crc_flit_errors", "nvlink_crc_data_errors") if k in faults]
            out.append(GpuSample(
                t=t, index=i, uuid=_guarded(nvml.device_uuid, i), util_pct=_guarded(nvml.utilization_pct, i),
                mem_used_bytes=used_total[0], mem_total_bytes=used_total[1],
                power_w=_guarded(nvml.power_w, i), temp_c=_guarded(nvml.temperature_c, i),
                sm_clock_mhz=_guarded(nvml.sm_clock_mhz, i),
                processes=tuple((p.pid, p.used_bytes) for p in procs), xid_events=xids,
                ecc_errors=_guarded(nvml.ecc_errors, i), pci_bus_id=self._bus_ids[i],
                throttle_reasons=_guarded(nvml.throttle_reasons, i) or (),
                nvlink_replay_errors=faults.get("nvlink_replay_errors"),
                nvlink_recovery_errors=faults.get("nvlink_recovery_errors"), nvlink_crc_errors=sum(crc) if crc else None,
                remapped_rows_pending=faults.get("remapped_rows_pending"),
                remapped_rows_failure=faults.get("remapped_rows_failure"), recovery_action=faults.get("recovery_action"),
            ))
        return out

    def _open_gpus(self) -> int:
        """How many GPUs to sample (0: off, and said why); starts collecting Xid events."""
        if not self._nvml.available:
            self._notify_once(NO_NVML_MESSAGE)
            return 0
        try:
            num_gpus = self._nvml.device_count()
        except NvmlError as exc:
            self._notify_once(f"GPU sampling off: {exc}")
            return 0
        try:
            watched = self._nvml.watch_xid_events()
        except NvmlError as exc:
            self._notify_once(f"Xid events not collected: {exc}")
        else:
            if num_gpus and watched < num_gpus:
                self._notify_once(f"Xid events collected on {watched} of {num_gpus} GPUs "
                                  "(NVML does not support the others)")
        return num_gpus


def _guarded(query: Callable[[int], Any], index: int) -> Any:
    try:
        return query(index)
    except NvmlError:
        return None


def shows_work(sample: ProcSample | None) -> bool:
    """Busy on a CPU, or not measured yet (just found): either way not a silent, idle rank."""
    if sample is None:
        return True
    if sample.cpu_pct is None:
        return sample.state not in (GONE, psutil.STATUS_ZOMBIE, UNREADABLE)
    return sample.cpu_pct > 5.0


def _open_process(pid: int) -> psutil.Process | None:
    """A Process for pid, kept across rounds: it remembers the creation time (so a reused pid is
    noticed) and the CPU times of the previous round (which cpu_percent measures against)."""
    try:
        proc = psutil.Process(pid)
        proc.cpu_percent()  # starts the first interval now, so the first sample is a real figure
    except psutil.Error:  # gone already (or not ours to see): its samples say "gone"
        return None
    return proc


def _sample_process(t: float, rank: int, pid: int, proc: psutil.Process | None, measured: bool) -> ProcSample:
    """measured=False: too soon after the process was found for a CPU figure (cpu_pct None; the
    next round's covers the time since it was found)."""
    # is_running() compares creation times, so a pid taken over by another process reads as gone.
    if proc is None or not proc.is_running():
        return _without_metrics(t, rank, pid, GONE)
    try:
        with proc.oneshot():  # one read of /proc/<pid>/stat and /status for all of the below
            state = proc.status()
            if state == psutil.STATUS_ZOMBIE:
                return _without_metrics(t, rank, pid, state)
            return ProcSample(t=t, rank=rank, pid=pid, rss_bytes=proc.memory_info().rss,
                              cpu_pct=proc.cpu_percent() if measured else None, state=state, num_threads=proc.num_threads())
    except psutil.ZombieProcess:
        return _without_metrics(t, rank, pid, psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:  # exited between is_running() and the reads
        return _without_metrics(t, rank, pid, GONE)
    except psutil.AccessDenied:  # /proc mounted with hidepid, say: alive but unreadable
        return _without_metrics(t, rank, pid, UNREADABLE)


def _without_metrics(t: float, rank: int, pid: int, state: str) -> ProcSample:
    return ProcSample(t=t, rank=rank, pid=pid, rss_bytes=None, cpu_pct=None, state=state, num_threads=None)
