"""Which parser reads which line: the keyword pre-check, the one-line parsers, the wrapped messages.

Stateless; `signatures.LineScanner` keeps the state (streams, tracebacks, blocks, joins) and
asks this module what a line says. `is_hot` is the pre-check every line of a live job pays, so
it is a handful of substring tests; `detect` runs only the parsers whose own cheap test passes.

Typical use:
    if is_hot(message):
        for kind, fields in detect(message):
            ...
"""
from __future__ import annotations

import functools
from typing import Any

from grpo_doctor.logs import (
    cluster,
    exit_lines,
    faults,
    gpu_faults,
    nccl,
    nccl_ras,
    oom,
    peer_loss,
    rendezvous,
    torchrun,
    vllm,
)
from grpo_doctor.logs.joiner import JoinSpec
from grpo_doctor.logs.kinds import (
    CHILD_FAILED,
    CUDA_FAULT,
    CUDA_OOM,
    GPU_FAULT,
    HOST_OOM,
    NCCL_ERROR,
    NCCL_RAS,
    NCCL_TIMEOUT,
    NCCL_WARN,
    NCCL_WATCHDOG_STATUS,
    NCCL_WATCHDOG_STUCK,
    RENDEZVOUS_FAILURE,
    VLLM_MEMORY,
    WORKER_DIED,
)
from grpo_doctor.logs.pytraceback import HEADER

# Every line that can start a signature holds one of these; any other line costs the pre-check
# and nothing more (unless its stream has a traceback, block or wrapped message open, or it ends
# a traceback: a traceback's exception line is read whatever it holds). Each keyword holds an
# anchor byte (chunk_keywords.RARE_BYTES) so that `scan_file` finds all of them in a dozen shared
# passes over a file's bytes, and a byte of LINE_ANCHORS so that `is_hot` tests most keywords only
# on the lines that hold their anchor. Spellings are chosen for that: torchrun's padded field
# names ("host      :", "rank      :"), Slurm's ": task", "*** SIG" for the fatal-signal banners.
KEYWORDS = (
    "emory",  # CUDA/HIP OOM, the kernel's and Ray's OOM reports, vLLM's memory lines
    "atchdog",  # NCCL watchdog: timeout, status, heartbeat
    "NCCL work", "Heartbeat monitor",  # status lines without "watchdog" ("Timeout at NCCL work: 5, ..."), the monitor
    "NCCL WARN", "NCCL error",
    "Traceback", 'File "',  # a traceback, or a paste that starts inside one
    "ocket", "joined", "endezvous",  # c10d sockets, DistStoreError's clients, torchrun's rendezvous
    "TCP client", "DistNetworkError", "DistStoreError",  # TCPStore's retries; store errors without a socket word
    "exitcode", "host      :", "rank      :", "Root Cause",  # torchrun's agent line, ChildFailedError's fields
    "exits with return code",  # DeepSpeed's launcher
    "Killed process",  # older kernels put the OOM killer's numbers on their own line
    *vllm.KEYWORDS,
    "waitForInput",  # a c10d store read that timed out ("Socket Timeout" has "ocket")
    *faults.KEYWORDS,  # CUDA faults, rollout-engine, Ray actor and process deaths
    *cluster.KEYWORDS,  # Slurm and Kubernetes kills
    *gpu_faults.KEYWORDS,  # the NVIDIA driver's Xid events in the kernel log
    *nccl_ras.KEYWORDS,  # NCCL's RAS status report (ncclras) pasted into a log: opens a block (signatures.py)
    *nccl.FAILURE_KEYWORDS,  # ProcessGroupNCCL taking the process down, an aborted communicator
    *exit_lines.KEYWORDS,  # torch.multiprocessing, Kubernetes, accelerate, Ray core-worker exits
    *peer_loss.KEYWORDS,  # gloo's lost peer
)
# `is_hot`'s first test per keyword: the first of these bytes the keyword holds, in this order
# (rarest in training logs first, counted over the benchmark's log and tests/data). Keywords with
# one anchor are tested only on lines that hold it, so a line pays one `in` per anchor and a few
# keyword tests, not one test per keyword (docs/benchmarks.md).
LINE_ANCHORS = '*HjzK"ADLPCbyxumhk杀'


def _anchor_groups(keywords: tuple[str, ...]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for word in keywords:
        anchor = next((c for c in LINE_ANCHORS if c in word), None)
        if anchor is None:
            raise ValueError(f"keyword {word!r} holds none of the line anchors {LINE_ANCHORS!r}")
        groups.setdefault(anchor, []).append(word)
    return groups


def _compile_is_hot(groups: dict[str, list[str]]):
    """One boolean expression over the groups: `("H" in t and "Heartbeat monitor" in t) or ...`.
    Evaluated as straight-line bytecode it costs about half of the same tests in a loop."""
    tests = " or ".join(f"({anchor!r} in t and ({' or '.join(f'{w!r} in t' for w in words)}))"
                        for anchor, words in groups.items())
    return eval(compile(f"lambda t: bool({tests})", "<is_hot>", "eval"))  # built from the constants above


def _without_superstrings(keywords: tuple[str, ...]) -> tuple[str, ...]:
    """The keywords that hold no other keyword: a line holding "PEER_DEAD" holds "DEAD", so testing the shorter
    one alone answers for both ("exitcode" and "exits with return code" hold "xit")."""
    return tuple(k for k in keywords if not any(o != k and o in k for o in keywords))


_IS_HOT = _compile_is_hot(_anchor_groups(_without_superstrings(KEYWORDS)))
_NCCL_PARSERS = ((NCCL_TIMEOUT, nccl.parse_watchdog_timeout), (NCCL_WATCHDOG_STATUS, nccl.parse_watchdog_status),
                 (NCCL_WATCHDOG_STUCK, nccl.parse_watchdog_stuck), (NCCL_ERROR, nccl.parse_nccl_error),
                 (NCCL_WARN, nccl.parse_nccl_warn), (NCCL_ERROR, nccl.parse_nccl_failure))
_VLLM_VOCABULARY = ("iB", "GB", "emory", "KV", "ache", "utilization", "tokens", "=")
# Messages that arrive wrapped over lines, and how each one's continuation looks.
JOIN_SPECS = (
    JoinSpec(CUDA_OOM, lambda t: any(s in t for s in oom.OOM_STARTS), lambda t: any(e in t for e in oom.OOM_ENDS),
             oom.OOM_VOCABULARY, 12, (HEADER,)),
    JoinSpec(NCCL_TIMEOUT, lambda t: nccl.TIMEOUT_START in t, lambda t: nccl.TIMEOUT_END in t,
             nccl.TIMEOUT_VOCABULARY, 4, (HEADER,)),
    JoinSpec(NCCL_ERROR, nccl.starts_error, nccl.error_complete, nccl.ERROR_VOCABULARY, 5, (HEADER,)),
    JoinSpec(HOST_OOM, lambda t: oom.RAY_OOM_START in t, lambda t: oom.RAY_OOM_END in t,
             ("exceeds", "threshold", "GB", "running", "IP"), 3, (HEADER,)),
    # Ray prints an actor's identity on tab-indented lines under "The actor died unexpectedly ...".
    JoinSpec(WORKER_DIED, lambda t: faults.ACTOR_START in t, lambda t: "Worker exit type" in t or "owner has died" in t,
             faults.ACTOR_VOCABULARY, 8, (HEADER,)),
    # "... its creation task, ray::lm_policy-0-2:Worker.__init__() (pid=2791977, ip=..., actor_id=" / "79f3...,
    # repr=Worker[rank=2])": the actor's identity continues until the header's closing parenthesis.
    JoinSpec(WORKER_DIED, lambda t: faults.CREATION_START in t, lambda t: t.rstrip().endswith(")"),
             ("repr=", "actor_id", "pid=", "ip="), 3, (HEADER,)),
    # "Timeout at NCCL work: 2070, last enqueued " / "NCCL work: 2082, last completed NCCL work: 2069."
    JoinSpec(NCCL_WATCHDOG_STATUS, nccl.starts_status, nccl.status_complete, nccl.STATUS_VOCABULARY, 3, (HEADER,)),
    # Newer drivers print "NVRM: The NVIDIA GPU 0000:b3:00.0" / "NVRM: (PCI ID: ...) installed in this
    # system has" / "NVRM: fallen off the bus and is not responding to commands."
    JoinSpec(GPU_FAULT, gpu_faults.starts_fallen, gpu_faults.fallen_complete, ("NVRM:",), 4, (HEADER,)),
    *(JoinSpec(VLLM_MEMORY, lambda t, s=start: s in t, lambda t, e=ends: any(x in t for x in e),
               _VLLM_VOCABULARY, 3, (HEADER,)) for start, ends in vllm.JOINS),
)


def is_hot(text: str) -> bool:
    """True when `text` holds a keyword: it may start a signature."""
    return _IS_HOT(text)


def detect(text: str) -> list[tuple[str, dict[str, Any]]]:
    """(kind, fields) for every one-line signature `text` states (fields not yet completed).

    A log that repeats one message (an NCCL WARN from every rank, every few ms) parses it once: the
    parsers are pure, so their answers are remembered per text, and each caller gets its own dict
    (nested values are shared: Signature.to_dict copies them deeply)."""
    return [(kind, None if fields is None else dict(fields)) for kind, fields in _detect_cached(text)]


@functools.lru_cache(maxsize=4096)
def _detect_cached(text: str) -> tuple[tuple[str, dict[str, Any]], ...]:
    return tuple(_detect(text))


def _detect(text: str) -> list[tuple[str, dict[str, Any]]]:
    found: list[tuple[str, dict[str, Any] | None]] = []
    memory = "emory" in text
    if memory and oom.is_cuda_oom(text):
        found.append((CUDA_OOM, oom.parse_cuda_oom(text)))
    if "NCCL" in text or "atchdog" in text or "Heartbeat monitor" in text or nccl.TAKEN_DOWN_WORDS in text:
        found.extend((kind, parse(text)) for kind, parse in _NCCL_PARSERS)
    if any(word in text for word in rendezvous.KEYWORDS):
        found.append((RENDEZVOUS_FAILURE, rendezvous.parse_rendezvous(text)))
    if "exitcode" in text:
        found.append((CHILD_FAILED, torchrun.parse_agent_line(text)))
    if "exits with return code" in text:
        found.append((CHILD_FAILED, torchrun.parse_deepspeed_line(text)))
    if "Killed process" in text:
        found.append((HOST_OOM, oom.parse_kernel_oom(text)))
    if memory and oom.RAY_OOM_START in text:
        found.append((HOST_OOM, oom.parse_ray_oom(text)))
    if memory and "emory pressure" in text or "System memory low" in text:
        found.append((HOST_OOM, oom.parse_ray_pressure(text)))
    if memory and oom.RAY_LOW_MEMORY in text:
        found.append((HOST_OOM, oom.parse_ray_low_memory(text)))
    if any(word in text for word in cluster.WORDS):
        found.append((HOST_OOM, cluster.parse_cluster_oom(text)))
        found.append((CHILD_FAILED, cluster.parse_srun_task(text)))
    if "CUDA error" in text or "thread: [" in text or "cuda runtime error" in text:
        found.append((CUDA_FAULT, faults.parse_cuda_fault(text)))
    if any(word in text for word in faults.DEATH_WORDS):
        found.append((WORKER_DIED, faults.parse_worker_died(text)))
    if "terminated with" in text or "exiting process" in text:
        found.append((CHILD_FAILED, exit_lines.parse_multiprocessing_exit(text)))
    if "xit Code:" in text or "command terminated with" in text:
        found.append((WORKER_DIED, exit_lines.parse_container_exit(text)))
    if "non-zero exit status" in text:
        found.append((WORKER_DIED, exit_lines.parse_subprocess_exit(text)))
    if "Killed" in text or "已杀死" in text:
        found.append((WORKER_DIED, exit_lines.parse_shell_killed(text)))
    if "state: DEAD" in text:
        found.append((WORKER_DIED, exit_lines.parse_ray_actor_dead(text)))
    if "by peer" in text:
        found.append((WORKER_DIED, peer_loss.parse_peer_loss(text)))
    if "PEER_DEAD" in text:
        found.append((NCCL_RAS, _ras_fields(nccl_ras.parse_monitor_line(text))))
    if "Xid (" in text or "fallen off the bus" in text:
        found.append((GPU_FAULT, gpu_faults.parse_gpu_fault(text)))
    if memory or any(word in text for word in vllm.KEYWORDS):
        found.append((VLLM_MEMORY, vllm.parse_vllm_memory(text)))
    return [(kind, fields) for kind, fields in found if fields is not None]


def _ras_fields(report: nccl_ras.RasReport | None) -> dict[str, Any] | None:
    return None if report is None else report.to_dict()
