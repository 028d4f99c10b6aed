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
    ray.exceptions.ActorDiedError: The actor died because of an error raised in its creation task, ray::lm_policy-0-2:
        DTensorPolicyWorker.__init__() (pid=2791977, ip=10.65.6.13, actor_id=..., repr=DTensorPolicyWorker[rank=2])
    (Worker pid=18211, ip=10.0.0.3) ray::lm_policy-1-5:Worker.__init__() (pid=18211, ..., repr=Worker[rank=13])
        (the header Ray prints over a remote task's traceback; `[rank=N]` in the actor's repr names the rank)
    Process EngineCore_0:            (multiprocessing's header over the engine process's traceback)
    ERROR 05-05 07:35:19 [core.py:1136] EngineCore failed to start.
    RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
    ERROR 04-29 00:53:54 [async_llm.py:399] AsyncLLM output_handler failed.
    ERROR 07-29 10:00:00 [core_client.py:564] Engine core proc EngineCore_0 died unexpectedly, shutting down client.
    Child process unexpectedly failed with an exit code 256. pid=97721   (SGLang: a raw wait status, 256 = exit 1)
    Received sigquit from a child process. It usually means the child failed.   (SGLang's parent)
    W1229 16:43:25.650000 190834 .../agent/server/api.py:723] Received 1 death signal, shutting down workers
        (torchrun's agent got a signal from outside: 1 SIGHUP, a closed terminal; Signals.SIGTERM, a scheduler)
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

from grpo_doctor.logs.units import signal_name

# With "CUDA error" (parse_cuda_fault), one of these is in every line `parse_worker_died` reads.
DEATH_WORDS = ("EngineCore encountered", "died unexpectedly", "Worker exit type", "ActorDiedError", "EngineDeadError",
               "Fatal Python error", "received at time=", "received by PID", "death signal", "ray::",
               "Process EngineCore", "EngineCore failed to start", "Engine core initialization failed",
               "output_handler failed", "unexpectedly failed with an exit code", "from a child proces",
               *("worker died or was killed", "Exception: [RayletClient] Raylet connection closed"))
# The pre-check's spellings (see detectors.KEYWORDS): each holds an anchor byte of
# chunk_keywords.RARE_BYTES, so that no keyword costs a pass of its own over a file's bytes; a
# line that `parse_worker_died` reads holds one of them ("Engine core proc X died unexpectedly",
# "Child process unexpectedly failed ...": "unexpectedly"; "Engine core initialization failed").
# "EngineCore" alone is in every line of a V1 engine's prefix: never a keyword by itself. Old PyTorch's
# "cuda runtime error (N) : ... at /pytorch/aten/src/THC/THCGeneral.cpp:NN" is found by its THC source path.
KEYWORDS = ("CUDA error", "/THC", ", thread: [", "EngineCore encountered", "EngineCore failed", "Process EngineCore",
            "initialization failed", "unexpectedly", "Worker exit type", "DiedError", "DeadError",
            "Fatal Python error", "*** SIG", "death signal", "ray::", "output_handler", "from a child proces",
            "worker died or was killed", "Raylet connection closed")
ACTOR_START = "The actor died unexpectedly"
# A Ray worker's death in Ray's words, old ones too: Ray < 1.0's "Invalid return value: likely worker died or
# was killed while executing the task" (under RayGetError) and a worker whose raylet went away, raised.
_RAY_DEATHS = ("died unexpectedly", "Worker exit type", "ActorDiedError", "worker died or was killed",
               "Exception: [RayletClient] Raylet connection closed")
CREATION_START = "raised in its creation task"  # "... its creation task, ray::Name.__init__() (pid=..., repr=...)"
ACTOR_VOCABULARY = ("class_name", "actor_id", "pid:", "name:", "namespace", "ip:", "The actor is dead", "Worker exit")

_CUDA = re.compile(r"CUDA error: (?!out of memory)([^\n.]+?)(?:\.|$| CUDA kernel errors| Compile with|\s+For debugging|\s+Search for `)")
# PyTorch before 1.0 (THC): "cuda runtime error (39) : uncorrectable ECC error encountered at /pytorch/aten/...".
_OLD_CUDA = re.compile(r"cuda runtime error \((\d{1,4})\) : (?!out of memory)([^\n]{1,200}?)(?: at \S+:\d+|$)")
# The kernel's own report of a device-side assert, printed once per failing thread before the
# "CUDA error: device-side assert triggered": "../aten/src/ATen/native/cuda/Indexing.cu:1141:
# indexSelectLargeIndex: block: [118,0,0], thread: [3,0,0] Assertion `srcIndex < srcSelectDimSize` failed."
_KERNEL_ASSERT = re.compile(r"\.cuh?:\d+: (\w+): block: \[[\d,]+\], thread: \[[\d,]+\] (Assertion `.*` failed)")
_EXC = re.compile(r"((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception)(?:\([\w.]+\))?):")
_ENGINE_EXC = re.compile(r"\b(?:[\w.]*\.)?(RayTaskError\(\w+\)|EngineDeadError|EngineGenerateError)\b")
_RAY_EXC = re.compile(r"\b(?:ray\.exceptions\.)?(RayTaskError\(\w+\)|ActorDiedError|RayActorError)\b")
# absl's "*** SIGABRT received at time=1731234567 on cpu 3 ***", glog's "*** SIGSEGV (@0x0) received
# by PID 4660 (TID ...) ...", faulthandler's "Fatal Python error: Aborted".
_FATAL_SIGNAL = re.compile(r"\*\*\* (SIG[A-Z]+) (?:\(@[^)]*\) )?received (?:at time=|by PID)"
                           r"|Fatal Python error: (Aborted|Segmentation fault|Bus error)")
_FATAL_NAMES = {"Aborted": "SIGABRT", "Segmentation fault": "SIGSEGV", "Bus error": "SIGBUS"}
_VLLM_WORKER = re.compile(r"Worker proc (\S+) died unexpectedly")
# The V1 engine core's own ends: its process's traceback header, its failures to start, the
# client's view of its death.
_ENGINE_DEATHS = (
    re.compile(r"^Process (EngineCore\w*):\s*$"),
    re.compile(r"Engine core proc (\S+) died unexpectedly"),
    re.compile(r"EngineCore failed to start|Engine core initialization failed|AsyncLLM output_handler failed"),
)
_AGENT_SIGNAL = re.compile(r"Received (?:Signals\.)?(SIG[A-Z]+|\d+) death signal, shutting down workers")
_SIGQUIT = "Received sigquit from a child proces"  # "process" or, in some releases, "proces"
_CHILD = re.compile(r"Child process unexpectedly failed with an exit code (-?\d+)\. pid=(\d+)")
# Ray's header over a remote task's traceback: "ray::[actor name:]Class.method() (pid=N, ip=A[,
# actor_id=...][, repr=...])"; a repr such as "DTensorPolicyWorker[rank=2]" names the rank.
_RAY_TASK = re.compile(r"ray::(?:([\w.-]+):)?([\w.<>]+?)\.(\w+)\(\) \(pid=(\d+), ip=([^,)\s]+)")
_REPR_RANK = re.compile(r"repr=[^\s,()]*?\[rank=(\d+)\]")
_FIELD = re.compile(r"\b(class_name|pid|name|ip)[:=]\s*\[?([^\s\],)]+)")
_WORKER_PID = re.compile(r"Worker PID: (\d+)")  # the raylet's "A worker died or was killed ..." line
_EXIT_TYPE = re.compile(r"(?:Owner )?[Ww]orker exit type: (\w+)(?: Worker exit detail: (.*?)(?: There are some| Some common|$))?")


def parse_cuda_fault(text: str) -> dict[str, Any] | None:
    """`CUDA error: <what>` from any library (or old PyTorch's `cuda runtime error (N) : <what>`), except out
    of memory (see oom.py)."""
    m = _CUDA.search(text) if "CUDA error" in text else None
    old = _OLD_CUDA.search(text) if m is None and "cuda runtime error" in text else None
    if old is not None:
        exc = _EXC.search(text, 0, old.start())
        return {"error": old.group(2).strip(), "exc_type": exc.group(1) if exc else None, "device_side_assert": False}
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
    Python error: Aborted", absl's "*** SIGABRT received at time=... ***" in Ray workers), a child
    process SGLang saw fail, or torchrun's agent stopped by a signal from outside."""
    message = text.strip()[:300]
    signal = _FATAL_SIGNAL.search(text)
    if signal:
        name = signal.group(1) or _FATAL_NAMES.get(signal.group(2) or "", "fatal signal")
        return {"component": "process", "exc_type": name, "message": message}
    agent = _AGENT_SIGNAL.search(text) if "death signal" in text else None
    if agent:
        return {"component": "launcher-signal", "exc_type": _signal(agent.group(1)), "message": message}
    child = _CHILD.search(text) if "unexpectedly failed" in text else None
    if child:
        return {"component": "child-process", "pid": int(child.group(2)), "message": message,
                **_wait_status(int(child.group(1)))}
    if _SIGQUIT in text:  # SGLang's parent: a child (scheduler, detokenizer) failed and told it so
        return {"component": "child-process", "exc_type": "SIGQUIT from a child process", "message": message}
    if "EngineCore encountered" in text or "EngineDeadError" in text:
        exc = _ENGINE_EXC.search(text)
        return {"component": "vllm-engine", "exc_type": exc.group(1) if exc else None, "message": message}
    for pattern in _ENGINE_DEATHS:
        engine = pattern.search(text)
        if engine:
            exc = _EXC.search(text, 0, engine.start())
            return {"component": "vllm-engine", "exc_type": exc.group(1) if exc else None, "message": message,
                    "actor_name": engine.group(1) if pattern.groups else None}
    worker = _VLLM_WORKER.search(text)
    if worker:
        return {"component": "vllm-worker", "actor_name": worker.group(1), "message": message}
    task = _RAY_TASK.search(text) if "ray::" in text else None
    if not task and not any(word in text.replace("ActorDiedErrorContext", "") for word in _RAY_DEATHS):
        return None  # core worker's "death context type=ActorDiedErrorContext": any end (exit_lines.py)
    exc = _RAY_EXC.search(text)
    found: dict[str, Any] = {"component": "ray-actor", "exc_type": exc.group(1) if exc else None, "message": message}
    if task:
        found.update(actor_name=task.group(1), class_name=task.group(2), pid=int(task.group(4)), ip=task.group(5))
        if found["exc_type"] is None:  # the header alone: the exception follows under the traceback
            found["exc_type"] = f"error in {task.group(2).rsplit('.', 1)[-1]}.{task.group(3)}()"
    for name, value in _FIELD.findall(text):
        key = {"name": "actor_name", "ip": "ip", "pid": "pid", "class_name": "class_name"}[name]
        if found.get(key) is None:
            found[key] = int(value) if key == "pid" and value.isdigit() else value
    worker_pid = _WORKER_PID.search(text) if found.get("pid") is None else None
    if worker_pid:
        found["pid"] = int(worker_pid.group(1))
    rank = _REPR_RANK.search(text)
    if rank:
        found["rank"] = int(rank.group(1))
    m = _EXIT_TYPE.search(text)
    if m:
        found["exit_type"], found["exit_detail"] = m.group(1), (m.group(2) or "").strip() or None
    return found


def _signal(value: str) -> str:
    """"SIGTERM" or a number ("1") as a signal name."""
    return value if not value.isdigit() else signal_name(-int(value)) or f"signal {value}"


def _wait_status(status: int) -> dict[str, Any]:
    """os.waitpid's raw status as SGLang prints it: 256 is exit code 1, 9 is SIGKILL."""
    if status & 0x7F:
        return {"exitcode": -(status & 0x7F), "exc_type": signal_name(-(status & 0x7F))}
    return {"exitcode": status >> 8, "exc_type": f"exit code {status >> 8}"}
