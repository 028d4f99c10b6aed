"""Process deaths that are not torchrun's: CUDA faults outside NCCL, rollout-engine deaths, Ray actor deaths.

Read, one signature per line that states the death (wordings from public issues of verl, OpenRLHF,
vLLM, SGLang and PyTorch):
    RuntimeError: CUDA error: an illegal memory access was encountered
    ../aten/src/ATen/native/cuda/Indexing.cu:1141: indexSelectLargeIndex: block: [118,0,0], thread: [3,0,0] Assertion `...` failed.
    torch.AcceleratorError: CUDA error: device-side assert triggered
    ERROR 04-28 02:37:03 [core.py:398] EngineCore encountered a fatal error.
    vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) ...
    ray.exceptions.RayTaskError(EngineDeadError): ray::AgentLoopWorker.generate_sequences() (pid=957185, ...)
    Worker proc VllmWorker-1 died unexpectedly, shutting down executor.
    ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.
        class_name: create_colocated_worker_cls.<locals>.WorkerDict   (tab-indented fields, joined by the scanner)
        pid: 12529
        ip: 10.166.157.101
    The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: ...
"CUDA error: out of memory" is a CUDA OOM (oom.py), not a fault. A CUDA fault is reported
asynchronously: the line that raises it is often not where it happened (CUDA_LAUNCH_BLOCKING=1).

Typical use:
    parse_cuda_fault("RuntimeError: CUDA error: an illegal memory access was encountered")["error"]
    # "an illegal memory access was encountered"
    parse_worker_died("Worker proc VllmWorker-1 died unexpectedly, shutting down executor.")["component"]
    # "vllm-worker"
"""
from __future__ import annotations

import re
from typing import Any

# One of these is in every line the two parsers read (with "CUDA error", "died unexpectedly").
KEYWORDS = ("CUDA error", "EngineCore encountered", "died unexpectedly", "Worker exit type", "ActorDiedError",
            ", thread: [",  # a device-side assert's own line (see _KERNEL_ASSERT)
            "EngineDeadError", "Fatal Python error", "received at time=")
ACTOR_START = "The actor died unexpectedly"
ACTOR_VOCABULARY = ("class_name", "actor_id", "pid:", "name:", "namespace", "ip:", "The actor is dead", "Worker exit")

_CUDA = re.compile(r"CUDA error: (?!out of memory)([^\n.]+?)(?:\.|$| CUDA kernel errors| Compile with|\s+For debugging)")
# The kernel's own report of a device-side assert, printed once per failing thread before the
# "CUDA error: device-side assert triggered": "../aten/src/ATen/native/cuda/Indexing.cu:1141:
# indexSelectLargeIndex: block: [118,0,0], thread: [3,0,0] Assertion `srcIndex < srcSelectDimSize` failed."
_KERNEL_ASSERT = re.compile(r"\.cuh?:\d+: (\w+): block: \[[\d,]+\], thread: \[[\d,]+\] (Assertion `.*` failed)")
_EXC = re.compile(r"((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception)(?:\([\w.]+\))?):")
_ENGINE_EXC = re.compile(r"\b(?:[\w.]*\.)?(RayTaskError\(\w+\)|EngineDeadError|EngineGenerateError)\b")
_RAY_EXC = re.compile(r"\b(?:ray\.exceptions\.)?(RayTaskError\(\w+\)|ActorDiedError|RayActorError)\b")
_FATAL_SIGNAL = re.compile(r"\*\*\* (SIG[A-Z]+) received at time=|Fatal Python error: (Aborted|Segmentation fault|Bus error)")
_FATAL_NAMES = {"Aborted": "SIGABRT", "Segmentation fault": "SIGSEGV", "Bus error": "SIGBUS"}
_VLLM_WORKER = re.compile(r"Worker proc (\S+) died unexpectedly")
_FIELD = re.compile(r"\b(class_name|pid|name|ip)[:=]\s*\[?([^\s\],)]+)")
_EXIT_TYPE = re.compile(r"(?:Owner )?[Ww]orker exit type: (\w+)(?: Worker exit detail: (.*?)(?: There are some| Some common|$))?")


def parse_cuda_fault(text: str) -> dict[str, Any] | None:
    """`CUDA error: <what>` from any library, except out of memory (see oom.py)."""
    m = _CUDA.search(text) if "CUDA error" in text else None
    if m is None:
        kernel = _KERNEL_ASSERT.search(text) if "thread: [" in text else None
        if kernel is None:
            return None
        return {"error": f"device-side assert triggered ({kernel.group(2)} in {kernel.group(1)})", "exc_type": None,
                "device_side_assert": True}
    exc = _EXC.search(text, 0, m.start())
    error = m.group(1).strip()
    return {"error": error, "exc_type": exc.group(1) if exc else None,
            "device_side_assert": "device-side assert" in error}


def parse_worker_died(text: str) -> dict[str, Any] | None:
    """A rollout engine, a Ray actor or a process that a fatal signal ended (faulthandler's "Fatal
    Python error: Aborted", absl's "*** SIGABRT received at time=... ***" in Ray workers)."""
    signal = _FATAL_SIGNAL.search(text)
    if signal:
        name = signal.group(1) or _FATAL_NAMES.get(signal.group(2) or "", "fatal signal")
        return {"component": "process", "exc_type": name, "message": text.strip()[:300]}
    if "EngineCore encountered" in text or "EngineDeadError" in text:
        exc = _ENGINE_EXC.search(text)
        return {"component": "vllm-engine", "exc_type": exc.group(1) if exc else None,
                "message": text.strip()[:300]}
    worker = _VLLM_WORKER.search(text)
    if worker:
        return {"component": "vllm-worker", "actor_name": worker.group(1), "message": text.strip()[:300]}
    if not any(word in text for word in ("died unexpectedly", "Worker exit type", "ActorDiedError")):
        return None
    exc = _RAY_EXC.search(text)
    found: dict[str, Any] = {"component": "ray-actor", "exc_type": exc.group(1) if exc else None,
                             "message": text.strip()[:300]}
    for name, value in _FIELD.findall(text):
        key = {"name": "actor_name", "ip": "ip", "pid": "pid", "class_name": "class_name"}[name]
        found.setdefault(key, int(value) if key == "pid" and value.isdigit() else value)
    m = _EXIT_TYPE.search(text)
    if m:
        found["exit_type"], found["exit_detail"] = m.group(1), (m.group(2) or "").strip() or None
    return found
