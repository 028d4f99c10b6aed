"""Out-of-memory messages: PyTorch's CUDA caching allocator, the kernel's OOM killer, Ray's monitor.

Each phrase of the allocator's message is read on its own, so a message a log collector split
over several lines (joined back with spaces by the scanner) or cut short still yields what it
has. Both wordings are read: torch >= 2.1 ("GPU 7 has a total capacity of ... of which ... is
free. Process 1234 has ... memory in use. Of the allocated memory ...", with the 2.1 typo
"capacty" and the newer PYTORCH_ALLOC_CONF hint) and torch <= 2.0 ("(GPU 0; 7.93 GiB total
capacity; 130.35 MiB already allocated; 47.06 MiB free; 188.00 MiB reserved in total by PyTorch)").
Ray's monitor also speaks through the killed task's error ("Task was killed due to the node
running low on memory"). Also the sleep-mode allocators of inference engines (vLLM's "CUDA Error: out of memory at
/workspace/csrc/cumem_allocator.cpp:62" in wake_up, SGLang's torch_memory_saver "CUresult error: 2
(out of memory)"), and Ray's memory monitor in its three wordings.

Typical use:
    fields = parse_cuda_oom("CUDA out of memory. Tried to allocate 1.42 GiB. GPU 7 has a total ...")
    fields["requested_bytes"]  # 1524713390
    parse_kernel_oom("Out of memory: Killed process 40417 (python) total-vm:...kB, anon-rss:...kB, ...")
"""
from __future__ import annotations

import re
from typing import Any

from grpo_doctor.logs.units import SIZE, to_bytes

OOM_STARTS = ("CUDA out of memory", "HIP out of memory")
# The last phrase of either wording; a message without one may continue on the next line.
OOM_ENDS = ("but unallocated", "reserved in total by PyTorch", " cached)")
# Words every continuation of a split OOM message contains at least one of.
OOM_VOCABULARY = ("GPU", "capac", "free", "memory", "PyTorch", "allocated", "reserved", "pools", "Graphs",
                  "ALLOC_CONF", "fragmentation", "documentation", "Process", "allowed", "bytes", "iB")

_REQUESTED = re.compile(r"Tried to allocate\s+" + SIZE)
_NEW = re.compile(r"GPU\s+(\d+)\s+has a total capac(?:i)?ty of\s+" + SIZE + r"\s+of which\s+" + SIZE + r"\s+is free")
_PROCESS = re.compile(r"(?:this process|Process\s+(\d+))\s+has\s+" + SIZE + r"\s+memory in use")
_ALLOWED = re.compile(SIZE + r"\s+allowed;")
_ALLOCATED = re.compile(r"Of the allocated memory\s+" + SIZE + r"\s+is allocated by PyTorch")
_PRIVATE = re.compile(r"with\s+" + SIZE + r"\s+allocated in private pools")
_UNALLOCATED = re.compile(SIZE + r"\s+is reserved by\s+PyTorch but unallocated")
_OLD = re.compile(
    r"\(GPU\s+(\d+);\s*" + SIZE + r"\s+total capacity;\s*" + SIZE + r"\s+already allocated;\s*" + SIZE
    + r"\s+free;\s*(?:" + SIZE + r"\s+allowed;\s*)?" + SIZE + r"\s+(?:reserved in total by PyTorch|cached)"
)

_KERNEL = re.compile(
    r"Killed process (\d+) \(([^)]*)\)(?:,? total-vm:(\d+)kB, anon-rss:(\d+)kB(?:, file-rss:(\d+)kB)?"
    r"(?:, shmem-rss:(\d+)kB)?)?"
)
# A terminal that pads a long line at a fixed width and wraps it leaves a run of spaces inside a number
# or a word ("total-vm:53312244<spaces>kB", "f<spaces>ile-rss"); removing the run gives the line back.
_TERMINAL_PADDING = re.compile(r" {16,}")
_RAY = re.compile(
    r"Memory on the node(?: \(IP: (?P<ip>[^,)]+)(?:, ID: [^)]*)?\))?(?: where the (?:task|actor) (?:\((?P<task>.*?)\) )?"
    r"was running)? was (?P<used>\d+(?:\.\d+)?)\s*GB\s*/\s*(?P<total>\d+(?:\.\d+)?)\s*GB \((?P<frac>\d+(?:\.\d+)?)\),?\s*which exceeds"
    r" the memory usage threshold of (?P<threshold>\d+(?:\.\d+)?)"
)
_RAY_PID = re.compile(r"\bpid=(\d+)")
_RAY_NAME = re.compile(r"\bname=([^,]+)")
RAY_OOM_START = "Memory on the node"
RAY_LOW_MEMORY = "killed due to the node running low on memory"
_RAY_IP = re.compile(r"\bip: ([\d.]+|[0-9a-f:]+)\b")  # the actor's fields under an ActorDiedError
_RAY_ACTOR_PID = re.compile(r"\bpid: (\d+)")
RAY_OOM_END = "threshold of"
# The raylet's summary of its memory monitor's kills, and the older wording of one kill.
_RAY_PRESSURE = re.compile(r"(\d+) Workers \(tasks / actors\) killed due to memory pressure \(OOM\)"
                           r"(?:.*?at node \(ID: \w+, IP: ([^)\s]+)\))?")
_RAY_LOW = re.compile(r"System memory low at node with IP ([^.\s]+(?:\.\d+){3})\. Used memory \((\d+(?:\.\d+)?)GB\) / "
                      r"total capacity \((\d+(?:\.\d+)?)GB\) \([\d.]+\) exceeds threshold (\d+(?:\.\d+)?)")
# Allocation failures of the CUDA virtual-memory allocators that inference engines use for sleep
# mode: vLLM's cumem_allocator.cpp and SGLang's torch_memory_saver (CUresult / cudaError 2 is
# out of memory). torch_memory_saver's "cuMemCreate CUDA_ERROR_OUT_OF_MEMORY (may not be an
# issue ...)" is a retry, not a failure.
_CUMEM = ("CUDA Error: out of memory", "CUresult error: 2 (out of memory)", "cudaError error: 2 (out of memory)")
_CUMEM_RESULT = re.compile(r"CUresult error\s+result=2\b")


def is_cuda_oom(text: str) -> bool:
    return (any(s in text for s in OOM_STARTS) or "CUDA error: out of memory" in text
            or any(s in text for s in _CUMEM) or _CUMEM_RESULT.search(text) is not None)


def parse_cuda_oom(text: str) -> dict[str, Any] | None:
    """Fields of a CUDA OOM message (see kinds.FIELDS), or None when `text` has none."""
    if not any(s in text for s in OOM_STARTS):
        if "CUDA error: out of memory" in text:
            return {"wording": "cuda-error", "processes": []}
        if any(s in text for s in _CUMEM) or _CUMEM_RESULT.search(text):
            return {"wording": "cumem", "processes": []}
        return None
    found: dict[str, Any] = {"processes": []}
    m = _REQUESTED.search(text)
    if m:
        found["requested_bytes"] = to_bytes(m.group(1), m.group(2))
    old = _OLD.search(text)
    if old:
        g = old.groups()
        found.update(wording="old", gpu=int(g[0]), total_bytes=to_bytes(g[1], g[2]),
                     allocated_bytes=to_bytes(g[3], g[4]), free_bytes=to_bytes(g[5], g[6]),
                     allowed_bytes=to_bytes(g[7], g[8]) if g[7] else None, reserved_bytes=to_bytes(g[9], g[10]))
        return found
    found["wording"] = "new"
    new = _NEW.search(text)
    if new:
        found.update(gpu=int(new.group(1)), total_bytes=to_bytes(new.group(2), new.group(3)),
                     free_bytes=to_bytes(new.group(4), new.group(5)))
    for p in _PROCESS.finditer(text):
        found["processes"].append({"pid": int(p.group(1)) if p.group(1) else "this",
                                   "used_bytes": to_bytes(p.group(2), p.group(3))})
    for key, pattern in (("allowed_bytes", _ALLOWED), ("allocated_bytes", _ALLOCATED),
                         ("private_pool_bytes", _PRIVATE), ("reserved_unallocated_bytes", _UNALLOCATED)):
        m = pattern.search(text)
        if m:
            found[key] = to_bytes(m.group(1), m.group(2))
    return found


def parse_kernel_oom(text: str) -> dict[str, Any] | None:
    """The OOM killer's `Killed process PID (NAME) total-vm:...kB, anon-rss:...kB, ...` line, also
    as a terminal padded and wrapped it (the pid and the sizes kept)."""
    text = _TERMINAL_PADDING.sub("", text)
    m = _KERNEL.search(text)
    if m is None:
        return None
    kb = [int(v) * 1024 if v else None for v in m.groups()[2:]]
    return {"source": "kernel", "pid": int(m.group(1)), "process": m.group(2), "total_vm_bytes": kb[0],
            "anon_rss_bytes": kb[1], "file_rss_bytes": kb[2], "shmem_rss_bytes": kb[3],
            "cgroup": "Memory cgroup out of memory" in text}


def parse_ray_pressure(text: str) -> dict[str, Any] | None:
    """The raylet's `N Workers (tasks / actors) killed due to memory pressure (OOM) ... IP: ip` summary,
    or its older `System memory low at node with IP ip. Used memory (U GB) / total capacity (T GB) ...`."""
    m = _RAY_PRESSURE.search(text)
    if m:
        return {"source": "ray", "num_killed": int(m.group(1)), "node_ip": m.group(2)} if int(m.group(1)) else None
    m = _RAY_LOW.search(text)
    if m is None:
        return None
    return {"source": "ray", "node_ip": m.group(1), "used_bytes": to_bytes(m.group(2), "GB"),
            "total_bytes": to_bytes(m.group(3), "GB"), "threshold": float(m.group(4)), "num_killed": 1}


def parse_ray_low_memory(text: str) -> dict[str, Any] | None:
    """Ray's memory monitor as the killed task's error states it, without the node's numbers
    ("Worker exit detail: Task was killed due to the node running low on memory.", also
    ray.exceptions.OutOfMemoryError's first sentence when its details are cut off)."""
    if RAY_LOW_MEMORY not in text or RAY_OOM_START in text:
        return None  # "Memory on the node ... exceeds the memory usage threshold": parse_ray_oom's
    ip, pid = _RAY_IP.search(text), _RAY_ACTOR_PID.search(text)
    return {"source": "ray", "node_ip": ip.group(1) if ip else None, "pid": int(pid.group(1)) if pid else None,
            "num_killed": 1}


def parse_ray_oom(text: str) -> dict[str, Any] | None:
    """Ray's `Memory on the node (IP: ...) ... was U GB / T GB (f), which exceeds ... threshold of t`."""
    m = _RAY.search(text)
    if m is None:
        return None
    task = m.group("task") or ""
    pid, name = _RAY_PID.search(task), _RAY_NAME.search(task)
    return {"source": "ray", "node_ip": m.group("ip"), "task": m.group("task"),
            "pid": int(pid.group(1)) if pid else None, "process": name.group(1) if name else None,
            "used_bytes": to_bytes(m.group("used"), "GB"), "total_bytes": to_bytes(m.group("total"), "GB"),
            "threshold": float(m.group("threshold"))}
