"""`host-oom`: host (CPU) memory ran out and a process was killed: the kernel's OOM killer, a memory
cgroup's limit (containers, Slurm, k8s) or Ray's memory monitor.

From host-oom signatures (dmesg / syslog / Ray output). The killed pid is linked to a rank where the
evidence allows: torchrun's failure report for that pid (child-failed, SIGKILL / exit code -9
carries pid and rank), or a rank header with that pid when a run directory is loaded. Pids repeat
across hosts, so a link is only made when the hosts agree or one side names none. A pid that is
no rank (a dataloader worker, a vLLM worker) stays unlinked. One finding per killed process.

Evidence keys: `pid`, `process` (its name, or the Ray task), `anon_rss_bytes` (its resident
anonymous memory when killed), `total_vm_bytes`, `cgroup` (True: a memory cgroup's limit was hit,
not the machine's RAM), `used_bytes` / `total_bytes` / `threshold` (Ray: node memory and the
monitor's kill fraction), `node_ip`, `rank` (None when the pid is no known rank), `source`
("kernel", "ray", "slurm", "kubernetes", or "python": a MemoryError, with `exc_type` and
`message`), `log` (the file it was read from, or "event-log"), `num_killed` (Ray's and Slurm's count
of killed workers / oom_kill events), `step` (the Slurm step).

Also read: Slurm's "Detected N oom_kill event(s) in StepId=..." and srun's "task N: Out Of Memory"
(a step's memory cgroup: `cgroup` True), Kubernetes' OOMKilled, and the raylet's "N Workers (tasks /
actors) killed due to memory pressure (OOM)" (skipped where Ray's OutOfMemoryError details the kill).
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from grpo_doctor.analysis import remedies
from grpo_doctor.analysis.findings import Finding
from grpo_doctor.analysis.views import RunView, View
from grpo_doctor.logs.kinds import CHILD_FAILED, HOST_OOM, PYTHON_TRACEBACK
from grpo_doctor.schema.human_text import format_bytes, short_host

ID = "host-oom"
READS = {View.LOG_SIGNATURES, View.RANK_LOGS, View.RANKS}

HINT_CGROUP = ("A container / cgroup memory limit was hit, not the machine's RAM: raise the limit (docker run "
               "--memory, k8s resources.limits.memory, Slurm --mem) to what the job needs, or lower its use as below.")
HINT_RAY = ("Ray's memory monitor killed the worker when the node passed its threshold: lower the node's memory use "
            "as below, schedule fewer actors per node, or (knowing the risk of the kernel OOM killer instead) raise "
            "RAY_memory_usage_threshold.")
HINT_OFFLOAD = ("Host RAM is the limit here, not the GPU: DeepSpeed offload_optimizer / offload_param to cpu keeps "
                "Adam states in host memory (about 12-16 bytes per parameter, e.g. ~100 GB for 7B, split over the "
                "ranks that share it, plus pinned buffers); offload less (offload_param off first), or run fewer "
                "ranks per node.")
HINT_WORKERS = ("Each dataloader worker is a process with its own copy of the dataset state: lower "
                "dataloader_num_workers (e.g. 2) and avoid loading whole datasets into every rank.")
HINT_VLLM_HOST = ("Rollout engines' host copies: vLLM's sleep mode at level 1 keeps every engine's weights in host RAM "
                  "while it sleeps (" + remedies.flags(remedies.SWIFT, "sleep_level")
                  + "; level 2 discards them and reloads them from the trainer), and "
                  + remedies.flags(remedies.SWIFT, "offload_model", "offload_optimizer") + " move the trainer's "
                  "state there, once per rank on the node. (swap_space does nothing here: only vLLM's old V0 engine "
                  "reserved it; the V1 engine ignores it.)")
HINT_MEMORY_ERROR = ("Python raised MemoryError: the process asked for host memory and was refused. Check the "
                     "limits it ran under (`ulimit -v` / RLIMIT_AS, the container's or Slurm's --mem limit, "
                     "vm.overcommit_memory=2) and what it allocated at that point (the traceback), then lower "
                     "host memory use as below.")
HINTS = (HINT_CGROUP, HINT_RAY, HINT_OFFLOAD, HINT_WORKERS, HINT_VLLM_HOST, HINT_MEMORY_ERROR)

KILL_SIGNALS = ("SIGKILL",)


@dataclass(frozen=True)
class Config:
    pass  # every kill is a finding: the killed process is gone


def check(run: RunView, cfg: Config) -> Iterator[Finding]:
    ranks_of_pid = _ranks_of_pid(run)
    seen: set[tuple] = set()
    for row in run.signature_rows:
        if row["kind"] != HOST_OOM:
            continue
        f = row["fields"]
        # dmesg and syslog passed together report one kill twice.
        key = (row["host"], f.get("source"), f.get("pid"), f.get("anon_rss_bytes"), f.get("used_bytes"),
               f.get("num_killed"), f.get("step"), f.get("task"))
        if key in seen:
            continue
        seen.add(key)
        if _summary_of_a_detailed_kill(f, run.signature_rows):
            continue
        rank, rank_host = _link(ranks_of_pid, f.get("pid"), row["host"])
        host = row["host"] or rank_host or run.host_of(rank)
        yield Finding(
            id=ID, severity="critical", title=_title(f, rank), ranks=(rank,) if rank is not None else (),
            hosts=(host,) if host else (), step=None, phase=None,
            evidence={"pid": f.get("pid"), "process": f.get("process"), "anon_rss_bytes": f.get("anon_rss_bytes"),
                      "total_vm_bytes": f.get("total_vm_bytes"), "cgroup": f.get("cgroup"),
                      "used_bytes": f.get("used_bytes"), "total_bytes": f.get("total_bytes"),
                      "threshold": f.get("threshold"), "node_ip": f.get("node_ip"), "rank": rank,
                      "source": f.get("source"), "log": row["source"], "num_killed": f.get("num_killed"),
                      "step": f.get("step")},
            hints=_hints(f),
        )
    yield from _memory_errors(run)


def _memory_errors(run: RunView) -> Iterator[Finding]:
    """A Python MemoryError: the process asked for host memory and was refused (an address-space limit,
    a cgroup without swap, strict overcommit). From a rank's error record, else a traceback in a log."""
    found: dict[int | None, dict[str, Any]] = {}
    for rank_number, log in sorted(run.rank_logs.items()):
        err = next((e for e in reversed(log.errors) if e.exc_type.rpartition(".")[2] == "MemoryError"), None)
        if err is not None:
            found[rank_number] = {"exc_type": err.exc_type, "message": err.message[:500], "step": err.step,
                                  "phase": err.path, "pid": err.pid, "host": run.host_of(rank_number),
                                  "log": "event-log"}
    for row in run.signature_rows:
        f = row["fields"]
        if row["kind"] == PYTHON_TRACEBACK and (f.get("exc_type") or "").rpartition(".")[2] == "MemoryError":
            found.setdefault(row["rank"], {"exc_type": f["exc_type"], "message": (f.get("message") or "")[:500],
                                           "step": None, "phase": None, "pid": None, "host": row["host"],
                                           "log": row["source"]})
    for rank, info in found.items():
        who = f"rank {rank}" if rank is not None else "a process"
        where = (f" in {info['phase']}" if info["phase"] else "") + (
            f" at step {info['step']}" if info["step"] is not None else "")
        yield Finding(
            id=ID, severity="critical",
            title=f"host OOM: {who} raised MemoryError{where}: a host memory allocation was refused",
            ranks=(rank,) if rank is not None else (), hosts=(info["host"],) if info["host"] else (),
            step=info["step"], phase=info["phase"],
            evidence={"pid": info["pid"], "process": None, "anon_rss_bytes": None, "total_vm_bytes": None,
                      "cgroup": None, "used_bytes": None, "total_bytes": None, "threshold": None, "node_ip": None,
                      "rank": rank, "source": "python", "log": info["log"], "exc_type": info["exc_type"],
                      "message": info["message"]},
            hints=(HINT_MEMORY_ERROR, HINT_OFFLOAD, HINT_WORKERS),
        )


def _title(f: dict[str, Any], rank: int | None) -> str:
    name = f.get("process") or "unknown process"
    if f.get("source") == "slurm":
        what = f"{f['num_killed']} oom_kill event(s) in step {f['step']}" if f.get("num_killed") else name
        return f"host OOM: Slurm's memory cgroup limit was hit ({what}): the job's --mem is too small for it"
    if f.get("source") == "kubernetes":
        return "host OOM: Kubernetes killed the container at its memory limit (OOMKilled)"
    if f.get("source") == "ray" and f.get("pid") is None and f.get("used_bytes") is None and f.get("num_killed"):
        node = f" on node {f['node_ip']}" if f.get("node_ip") else ""
        return f"host OOM: Ray's memory monitor killed {f['num_killed']} worker(s){node}"
    who = f"rank {rank} (pid {f.get('pid')}, {name})" if rank is not None else f"pid {f.get('pid')} ({name})"
    if f.get("source") == "ray":
        node = f" on node {f['node_ip']}" if f.get("node_ip") else ""
        used = (f": node memory {format_bytes(f['used_bytes'])} of {format_bytes(f['total_bytes'])}, over the {f['threshold']:g} "
                f"threshold" if f.get("used_bytes") and f.get("total_bytes") and f.get("threshold") is not None else "")
        if f.get("pid") is None:
            return f"host OOM: Ray's memory monitor killed a worker{node}{used}"
        return f"host OOM: Ray's memory monitor killed {who}{node}{used}"
    killer = "a memory cgroup limit" if f.get("cgroup") else "the kernel's OOM killer"
    rss = f" holding {format_bytes(f['anon_rss_bytes'])} of host memory" if f.get("anon_rss_bytes") else ""
    return f"host OOM: {killer} killed {who}{rss}"


def _summary_of_a_detailed_kill(f: dict[str, Any], rows: list[dict[str, Any]]) -> bool:
    """The raylet's "N Workers ... killed due to memory pressure" summary repeats kills that Ray's
    OutOfMemoryError already detailed on that node."""
    if f.get("source") != "ray" or not f.get("num_killed") or f.get("used_bytes") is not None:
        return False
    return any(r["kind"] == HOST_OOM and r["fields"].get("source") == "ray" and r["fields"].get("used_bytes")
               and r["fields"].get("node_ip") in (None, f.get("node_ip")) for r in rows)


def _hints(f: dict[str, Any]) -> tuple[str, ...]:
    first = (HINT_CGROUP,) if f.get("cgroup") else (HINT_RAY,) if f.get("source") == "ray" else ()
    return first + (HINT_OFFLOAD, HINT_WORKERS, HINT_VLLM_HOST)


def _ranks_of_pid(run: RunView) -> dict[int, list[tuple[int, str | None]]]:
    """pid -> [(rank, host)] from rank headers (every attempt) and torchrun's reports of workers
    killed by SIGKILL (what the OOM killer sends)."""
    found: dict[int, list[tuple[int, str | None]]] = {}
    for rank, log in run.rank_logs.items():
        for header in log.headers:
            found.setdefault(header.pid, []).append((rank, header.host))
    for row in run.signature_rows:
        f = row["fields"]
        if (row["kind"] == CHILD_FAILED and f.get("pid") is not None and f.get("rank") is not None
                and (f.get("signal") in KILL_SIGNALS or f.get("exitcode") == -9)):
            found.setdefault(f["pid"], []).append((f["rank"], f.get("host") or row["host"]))
    return found


def _link(ranks_of_pid: dict[int, list[tuple[int, str | None]]], pid: int | None,
          host: str | None) -> tuple[int | None, str | None]:
    """The rank (and its host) of `pid`, when exactly one rank fits; None when none or several do."""
    if pid is None:
        return None, None
    fits = {(rank, rank_host) for rank, rank_host in ranks_of_pid.get(pid, [])
            if host is None or rank_host is None or short_host(rank_host) == short_host(host)}
    if len({rank for rank, _ in fits}) != 1:
        return None, None
    rank_hosts = sorted({h for _, h in fits if h})
    return next(iter(fits))[0], rank_hosts[0] if rank_hosts else None
