"""Fault injection: reproduces the failures of CASES.md on demand, for grpo-doctor to find.

A spec is `NAME[:key=value[,key=value...]]`; `parse_fault` turns one into a `Fault` and
rejects anything else with a one-line message listing every valid name and key. At run time
an `Injector` holds this rank's faults; the training loop asks it for the sampling seed and
the reward override, and calls `at(phase, step)` right after entering every phase, where
hangs, stragglers, OOMs, crashes, desyncs and leaks happen for real (no fake records: the trainer
really blocks, allocates, dies, calls a collective the other ranks never call or keeps
tensors alive from step to step).

Typical use:
    faults = [parse_fault("hang:rank=1,phase=forward,step=2")]
    injector = Injector(faults, rank=1, device=torch.device("cpu"))
    with gd.phase("forward"):
        injector.at("forward", step)
"""
from __future__ import annotations

import os
import resource
import signal
import time
from dataclasses import dataclass

PHASES = ("weight-sync", "rollout", "reward", "ref-logprob", "forward", "backward", "optimizer-step")
CRASH_HOWS = ("exception", "sigkill")
_REQUIRED = object()

# name -> {key: default}; _REQUIRED marks keys without a default.
FAULT_KEYS: dict[str, dict[str, object]] = {
    "same-seed-per-node": {},
    "constant-reward": {"value": 1.0},
    "hang": {"rank": _REQUIRED, "phase": _REQUIRED, "step": _REQUIRED},
    "desync": {"rank": _REQUIRED, "step": _REQUIRED},
    "slow": {"rank": _REQUIRED, "delay_s": 0.5, "phase": "rollout"},
    "oom": {"rank": _REQUIRED, "step": _REQUIRED, "phase": "forward"},
    "crash": {"rank": _REQUIRED, "step": _REQUIRED, "how": "exception", "phase": "forward"},
    "nan-loss": {"step": _REQUIRED, "rank": None},
    "stale-weights": {"step": _REQUIRED, "rank": None},
    "leak": {"rank": _REQUIRED, "mb_per_step": 64.0},
}

# Room left under RLIMIT_AS for a host "OOM"; the allocation asks for several times more.
_HOST_OOM_MARGIN_BYTES = 256 * 1024 * 1024
_CUDA_OOM_CHUNK_BYTES = 1024**3
# A SIGKILL'd rank keeps what the background flush wrote; in a real run the kill comes well
# into a phase, so give the flush (every 0.25 s) the same chance here.
_BEFORE_SIGKILL_S = 1.0


@dataclass(frozen=True)
class Fault:
    name: str
    rank: int | None = None  # None: every rank
    step: int | None = None  # None: every step
    phase: str | None = None
    value: float | None = None
    delay_s: float | None = None
    how: str | None = None
    mb_per_step: float | None = None  # leak: MiB kept alive per step

    def applies(self, rank: int, step: int | None = None, phase: str | None = None) -> bool:
        return (
            (self.rank is None or self.rank == rank)
            and (step is None or self.step is None or self.step == step)
            and (phase is None or self.phase is None or self.phase == phase)
        )


def catalogue() -> str:
    """'hang:rank=R,phase=P,step=S; slow:rank=R[,delay_s=0.5][,phase=rollout]; ...' on one line."""
    parts = []
    for name, keys in FAULT_KEYS.items():
        required = [f"{k}={k[0].upper()}" for k, d in keys.items() if d is _REQUIRED]
        text = name + (":" + ",".join(required) if required else "")
        for k, d in keys.items():
            if d is not _REQUIRED:
                text += f"[{',' if text.count(':') else ':'}{k}={k[0].upper() if d is None else d}]"
        parts.append(text)
    return "; ".join(parts) + f" (phases: {', '.join(PHASES)}; how: {', '.join(CRASH_HOWS)})"


def parse_fault(spec: str) -> Fault:
    """Parse one --inject value; ValueError with a one-line message on anything invalid."""
    name, has_keys, rest = spec.strip().partition(":")
    if name not in FAULT_KEYS:
        raise ValueError(f"--inject {spec!r}: unknown fault {name!r}. Valid: {catalogue()}")
    keys = FAULT_KEYS[name]
    given: dict[str, str] = {}
    for item in rest.split(",") if has_keys else ():
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not key or not value:
            raise ValueError(f"--inject {spec!r}: {item!r} is not key=value. Valid: {catalogue()}")
        if key not in keys:
            valid = ", ".join(keys) or "none"
            raise ValueError(f"--inject {spec!r}: {name} has no key {key!r} (its keys: {valid}). Valid: {catalogue()}")
        if key in given:
            raise ValueError(f"--inject {spec!r}: {key!r} given twice")
        given[key] = value
    missing = [k for k, d in keys.items() if d is _REQUIRED and k not in given]
    if missing:
        raise ValueError(f"--inject {spec!r}: {name} needs {', '.join(missing)}. Valid: {catalogue()}")
    fields = {k: d for k, d in keys.items() if d is not _REQUIRED}
    for key, text in given.items():
        fields[key] = _convert(spec, key, text)
    return Fault(name=name, **fields)


def _convert(spec: str, key: str, text: str) -> object:
    try:
        if key in ("rank", "step"):
            number = int(text)
            if number < 0:
                raise ValueError
            return number
        if key in ("value", "delay_s", "mb_per_step"):
            number = float(text)
            if (key == "delay_s" and number < 0) or (key == "mb_per_step" and not number > 0):
                raise ValueError
            return number
    except ValueError:
        kind = ("a whole number >= 0" if key in ("rank", "step") else "a number > 0" if key == "mb_per_step"
                else "a number")
        raise ValueError(f"--inject {spec!r}: {key}={text!r} is not {kind}") from None
    choices = PHASES if key == "phase" else CRASH_HOWS
    if text not in choices:
        raise ValueError(f"--inject {spec!r}: {key}={text!r} is not one of {', '.join(choices)}")
    return text


def check_faults_for_world(faults, world_size: int, *, beta: float, rollout: str) -> str | None:
    """The first fault that cannot fire in this run, as a message; None when all can."""
    for f in faults:
        if f.rank is not None and f.rank >= world_size:
            return f"--inject {f.name}: rank={f.rank} does not exist with world size {world_size}"
        if f.phase == "ref-logprob" and beta == 0:
            return f"--inject {f.name}: phase=ref-logprob never runs with --beta 0"
        if f.name == "desync" and world_size < 2:
            return "--inject desync needs at least 2 ranks: one rank alone cannot disagree"
    return None


class Injector:
    """This rank's faults, acted on at the points the training loop offers."""

    def __init__(self, faults, rank: int, device) -> None:
        self.faults = tuple(f for f in faults if f.rank is None or f.rank == rank)
        self.rank = rank
        self.device = device
        self.leaked: list = []  # what the leak fault keeps alive, one tensor a step

    def _find(self, name: str, step: int | None = None, phase: str | None = None) -> Fault | None:
        for f in self.faults:
            if f.name == name and f.applies(self.rank, step, phase):
                return f
        return None

    def sampling_rank(self, rank: int, node_rank: int) -> int:
        """The number the sampling seed is derived from: the global rank, or (bug of case 2) the node's."""
        return node_rank if self._find("same-seed-per-node") else rank

    def reward_override(self) -> float | None:
        fault = self._find("constant-reward")
        return fault.value if fault else None

    def nan_loss(self, step: int) -> bool:
        return any(f.name == "nan-loss" and f.step <= step for f in self.faults)

    def stale_weights(self, step: int) -> bool:
        """From its step on, the weight push leaves the rollout engine's weights as they were (a sync that
        silently skips): the trainer walks its parameters as ever (ZeRO-3 gathers stay in step)."""
        return any(f.name == "stale-weights" and f.step <= step for f in self.faults)

    def at(self, phase: str, step: int) -> None:
        """Act on faults due in this phase at this step; called just inside the phase."""
        slow = self._find("slow", phase=phase)
        if slow:
            time.sleep(slow.delay_s)
        if phase == "rollout" and any(f.name == "desync" and f.step <= step for f in self.faults):
            self._desync()
        leak = self._find("leak") if phase == "rollout" else None
        if leak:
            self._leak(leak.mb_per_step)
        if self._find("hang", step, phase):
            _block_forever()
        if self._find("oom", step, phase):
            self._out_of_memory()
        crash = self._find("crash", step, phase)
        if crash:
            if crash.how == "sigkill":
                time.sleep(_BEFORE_SIGKILL_S)
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError(f"injected crash on rank {self.rank} at step {step} in phase {phase}")

    def _desync(self) -> None:
        # What a rank launched with a different setting (e.g. use_vllm) does: share its prompts
        # from rank 0 in a broadcast the other ranks, on the other code path, never join.
        import torch.distributed as dist

        prompts = [None]
        dist.broadcast_object_list(prompts, src=0)

    def _leak(self, mb_per_step: float) -> None:
        # What a training loop that keeps per-step tensors (rollouts, logits kept for logging) does: the
        # memory is written, so it is resident (host RSS on CPU, allocated memory on a GPU), and never freed.
        import torch

        self.leaked.append(torch.ones(int(mb_per_step * 2**20), dtype=torch.uint8, device=self.device))

    def _out_of_memory(self) -> None:
        if self.device.type == "cuda":
            _cuda_out_of_memory(self.device)
        else:
            _host_out_of_memory()


def _block_forever() -> None:
    while True:
        time.sleep(1.0)


def _cuda_out_of_memory(device) -> None:
    """Allocate until the caching allocator raises a genuine torch.OutOfMemoryError."""
    import torch

    blocks = []
    try:
        while True:
            blocks.append(torch.empty(_CUDA_OOM_CHUNK_BYTES, dtype=torch.uint8, device=device))
    finally:
        blocks.clear()
        torch.cuda.empty_cache()


def _host_out_of_memory() -> None:
    """A genuine MemoryError: cap the address space just above what is mapped, then exceed it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = _address_space_bytes() + _HOST_OOM_MARGIN_BYTES
    resource.setrlimit(resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))
    try:
        bytearray(4 * _HOST_OOM_MARGIN_BYTES)
    finally:
        # Lift the cap again so the error can be recorded and the process can end cleanly.
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _address_space_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status: the host OOM fault needs Linux")
