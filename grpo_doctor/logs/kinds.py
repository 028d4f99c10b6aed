"""The kinds of failure signature found in logs (stable strings) and the fields of each kind.

Every signature of a kind carries every field listed for it; a field the message did not state
is None (so `fields["allowed_bytes"] is None` means "no memory fraction was set"). Sizes are
bytes, durations carry their unit in the name. `FIELDS` is the contract the analyser reads.

Typical use:
    from grpo_doctor.logs.kinds import CUDA_OOM, FIELDS
    assert "requested_bytes" in FIELDS[CUDA_OOM]
"""
from __future__ import annotations

from typing import Any

CUDA_OOM = "cuda-oom"
NCCL_TIMEOUT = "nccl-timeout"
NCCL_WATCHDOG_STATUS = "nccl-watchdog-status"
NCCL_WATCHDOG_STUCK = "nccl-watchdog-stuck"
NCCL_ERROR = "nccl-error"
NCCL_WARN = "nccl-warn"
RENDEZVOUS_FAILURE = "rendezvous-failure"
CHILD_FAILED = "child-failed"
HOST_OOM = "host-oom"
PYTHON_TRACEBACK = "python-traceback"
VLLM_MEMORY = "vllm-memory"
CUDA_FAULT = "cuda-fault"
WORKER_DIED = "worker-died"
GPU_FAULT = "gpu-fault"
NCCL_RAS = "nccl-ras"

# `rank` in the NCCL kinds is the rank inside process group `pg` as the message prints it; the
# Signature's own rank is the global rank from the line's prefix when it has one.
FIELDS: dict[str, tuple[str, ...]] = {
    # wording: "new" (torch >= 2.1), "old" (<= 2.0), "cuda-error" ("CUDA error: out of memory",
    # a cudaMalloc outside the caching allocator: no numbers) or "cumem" (a CUDA virtual-memory
    # allocator of an inference engine in sleep mode: vLLM's "CUDA Error: out of memory at
    # cumem_allocator.cpp:62", SGLang's torch_memory_saver "CUresult error: 2 (out of memory)"). processes: [{"pid": int | "this",
    # "used_bytes": int}] in the order printed; `0 bytes` means NVML could not attribute, not idle.
    CUDA_OOM: ("wording", "gpu", "requested_bytes", "total_bytes", "free_bytes", "processes", "allowed_bytes",
               "allocated_bytes", "private_pool_bytes", "reserved_unallocated_bytes", "reserved_bytes"),
    NCCL_TIMEOUT: ("seq", "op", "numel_in", "numel_out", "timeout_ms", "ran_for_ms", "rank", "pg", "pg_desc"),
    # timed_out_rank: the rank a dump signal names ("Received a dump signal due to a collective timeout from
    # rank 13"): that rank timed out, and the signature is its (the printing rank only dumped).
    NCCL_WATCHDOG_STATUS: ("seq", "last_enqueued", "last_started", "last_completed", "rank", "pg", "pg_desc",
                           "timed_out_rank"),
    # terminated: the heartbeat monitor's "Terminating the process after attempting to dump debug
    # info, due to ProcessGroupNCCL watchdog hang" (stuck_s None on that line).
    NCCL_WATCHDOG_STUCK: ("stuck_s", "rank", "pg", "pg_desc", "terminated"),
    # detail: "unhandled system error", "remote process exited or there was a network error", ...
    # error_code: the ncclXxxError line; address/bad_interface as in nccl-warn, from last_error.
    # rank / pg / pg_desc: the process-group tag before the message ("[PG ID 0 PG GUID 0(default_pg)
    # Rank 1] Process group watchdog thread terminated with exception: NCCL error: ...").
    NCCL_ERROR: ("detail", "file", "line", "nccl_version", "error_code", "last_error", "address", "port",
                 "bad_interface", "rank", "pg", "pg_desc"),
    # host/pid/device: NCCL's own "host:pid:tid [dev]" header. bad_interface: the address is a
    # loopback, link-local or unspecified one, i.e. NCCL picked the wrong network interface
    # (None when the line names no address).
    NCCL_WARN: ("message", "host", "pid", "device", "address", "port", "bad_interface", "cuda_error"),
    # error_type: "address-in-use", "server-listen-failed", "DistStoreError", "DistNetworkError",
    # "RendezvousConnectionError", "RendezvousTimeoutError", "client-connect-failed",
    # "client-connect-timeout", "store-timeout" (waitForInput / Socket Timeout: a store read
    # waited in vain) (the first that applies, most telling first).
    RENDEZVOUS_FAILURE: ("error_type", "host", "port", "errno", "reason", "timeout_s", "joined", "expected"),
    # origin: "summary" (the ChildFailedError block), "agent" (the launcher's own "failed
    # (exitcode: ...)" line; both report the same failure, same pid) or "srun" (Slurm's
    # "srun: error: HOST: task N: ..."; rank is the task id) or "deepspeed" (its launcher's
    # "[...'--local_rank=4', ...] exits with return code = 1") or "multiprocessing" (torch.multiprocessing's
    # "process 1 terminated with signal SIGKILL": local_rank the process index). root_cause: None for agent lines.
    CHILD_FAILED: ("origin", "rank", "local_rank", "host", "exitcode", "pid", "signal", "root_cause", "time",
                   "error_file", "traceback", "script", "binary"),
    # source: "kernel" (OOM killer; cgroup says whether a memory cgroup's limit was hit), "ray"
    # (Ray's memory monitor: used/total of the node, threshold as a fraction; num_killed workers),
    # "slurm" (slurmstepd's oom_kill events of a step's cgroup: num_killed, step; or srun's "task N:
    # Out Of Memory": task) or "kubernetes" (a container's OOMKilled).
    HOST_OOM: ("source", "pid", "process", "anon_rss_bytes", "total_vm_bytes", "file_rss_bytes",
               "shmem_rss_bytes", "cgroup", "used_bytes", "total_bytes", "threshold", "node_ip", "task",
               "num_killed", "step"),
    # frames: "file:line in func", outermost first, the last 20; partial: the paste starts after
    # the "Traceback" line; exc_type None: the traceback was cut off before its exception line.
    PYTHON_TRACEBACK: ("exc_type", "message", "frames", "num_frames", "rank", "partial"),
    # One signature per informative line; no_cache_memory: the engine has no room for a KV cache
    # (none left, negative, zero GPU blocks, or smaller than one max-length request).
    # A CUDA fault outside NCCL: error is CUDA's text ("an illegal memory access was encountered").
    CUDA_FAULT: ("error", "exc_type", "device_side_assert"),
    # component: "vllm-engine" (EngineCore fatal error / EngineDeadError, also wrapped in Ray),
    # "vllm-worker" ("Worker proc X died unexpectedly"), "ray-actor" (ActorDiedError, "Worker
    # exit type", a remote task's "ray::Class.method() (pid=...)" header) or "process" (a fatal signal:
    # "Fatal Python error: Aborted", "*** SIGABRT received at time=..."; exc_type the signal),
    # "child-process" (SGLang's "Child process unexpectedly failed with an exit code 256": exitcode 1)
    # or "launcher-signal" (torchrun's agent "Received 1 death signal": exc_type the signal), "peer-lost"
    # (gloo's "Connection closed by peer [ip]:port": ip the peer's, logs/peer_loss.py) or "process" also for a
    # container's exit code, a launched command's exit status (logs/exit_lines.py);
    # pid / ip / actor_name / class_name as Ray prints them; rank from an actor repr "Worker[rank=2]".
    WORKER_DIED: ("component", "exc_type", "message", "class_name", "actor_name", "pid", "ip", "exit_type",
                  "exit_detail", "rank", "exitcode"),
    # The NVIDIA driver's kernel-log report of a GPU fault (logs/gpu_faults.py): xid (79 also for "GPU has
    # fallen off the bus" without an Xid line, wording "fallen-off-bus"; else "xid"), pci_bus_id as
    # "0000:3b:00", pid / process of the process the driver names (None when "<unknown>" or none),
    # detail (the driver's text after them), instance (a MIG GPU instance, "GPU-I:05"), node (the host a
    # syslog / journalctl prefix names; None for dmesg's own output).
    GPU_FAULT: ("xid", "pci_bus_id", "pid", "process", "detail", "instance", "wording", "node"),
    # NCCL's RAS status report (`ncclras`, NCCL >= 2.24) pasted into a log, one signature per report
    # (logs/nccl_ras.py: RasReport.to_dict): verdict ("dead", "incomplete", "error", "mismatch", "ok"),
    # communicators [{"label", "hash", "size", "problems", "num_missing", "missing": [{"rank", "node", "pid",
    # "gpu", ...}], "errors", "mismatch", "mismatched"}], missing_processes / dead_processes [{"pid", "node",
    # "gpus", "nvml_gpus"}] with their counts, the job summary's totals, timeouts (while gathering data).
    NCCL_RAS: ("form", "verdict", "nccl_version", "cuda_runtime", "cuda_driver", "num_nodes", "num_processes",
               "num_gpus", "groups", "communicators", "num_missing_processes", "missing_processes",
               "num_dead_processes", "dead_processes", "timeouts", "collection_s", "no_communicators"),
    VLLM_MEMORY: ("kv_cache_bytes", "weights_bytes", "activation_peak_bytes", "non_torch_bytes", "peak_torch_bytes",
                  "total_gpu_bytes", "gpu_memory_utilization", "num_gpu_blocks", "num_cpu_blocks",
                  "kv_cache_tokens", "max_model_len", "max_concurrency", "no_cache_memory"),
}
ALL_KINDS: tuple[str, ...] = tuple(FIELDS)


def complete_fields(kind: str, found: dict[str, Any]) -> dict[str, Any]:
    """`found` with every field of `kind`, in `FIELDS` order, None where the message had none."""
    return {name: found.get(name) for name in FIELDS[kind]}
