"""Exit lines of process managers other than torchrun's agent (torchrun.py), DeepSpeed's launcher (torchrun.py)
and srun (cluster.py): torch.multiprocessing, Kubernetes, accelerate and Ray's core worker.

Read (wordings from public issues):
    torch.multiprocessing.spawn.ProcessExitedException: process 0 terminated with exit code 1
    torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with signal SIGKILL
    Process 2 terminated with exit code 10, terminating remaining processes.   (torch's test harness)
    exiting process 3 with exit code: 10
        -> child-failed, origin "multiprocessing": the process index is the local rank
    Exit Code:    137        (kubectl describe pod, under "Last State: Terminated / Reason: Error")
    command terminated with exit code 137                                      (kubectl exec)
        -> worker-died, component "process"; 137 is SIGKILL from outside the container's main process
    subprocess.CalledProcessError: Command '['/usr/bin/python', ...]' returned non-zero exit status 1.
        -> worker-died, component "process" (accelerate launch, and any Python launcher using subprocess)
    Killed                                  (the shell: its foreground command died of SIGKILL)
    已杀死                                   (the same in a zh_CN locale)
    ./train.sh: line 12: 48211 Killed                  python train.py --bs 64     (bash's job line)
        -> worker-died, component "process", SIGKILL, a host OOM kill suspected
    ... actor_manager.cc:139: received notification on actor, state: DEAD, actor_id: ..., ip address: ...,
        has creation_task_exception=1
        -> worker-died, component "ray-actor"
Not a death of its own: Ray's `Failing pending tasks for actor X because the actor is already dead`, which
the core worker logs at INFO for every actor that ends without restarts (a `ray.kill` or a shutdown too;
the next line's `size=0` says nothing was queued): the actor's `state: DEAD` line says whether it failed.

Exit code 137 without "OOMKilled" does not say who sent the SIGKILL: the kernel's OOM killer inside the
container's cgroup (a child process over the limit: the pod's Reason stays "Error"), the kubelet evicting
the pod, or a preemption; `KILL_137` says how to tell them apart.

Typical use:
    parse_multiprocessing_exit("... process 0 terminated with signal SIGKILL")["signal"]   # "SIGKILL"
    parse_container_exit("      Exit Code:    137")["exc_type"]                            # "SIGKILL (exit code 137)"
"""
from __future__ import annotations

import re
from typing import Any

from grpo_doctor.logs.units import signal_name

# The pre-check's spellings (detectors.KEYWORDS): each holds an anchor byte (chunk_keywords.RARE_BYTES).
# Few and in rare groups: every line of a live job pays for each (docs/benchmarks.md). "xit" is in every exit
# line read here ("exit code", "Exit Code:", "exit status", "ProcessExitedException: process 0 terminated with
# signal SIGKILL").
KEYWORDS = ("xit", "DEAD", "Killed", "已杀死")
KILL_137 = ("SIGKILL (exit code 137) from outside the process: with Reason OOMKilled the container's memory "
            "limit; with Reason Error an OOM kill of a process inside the container (dmesg on the node: "
            "'Memory cgroup out of memory'), an eviction (kubectl get events: Evicted, node memory pressure) or a "
            "preemption / node drain (kubectl get events: Preempting, Killing; kubectl describe node)")

# torch.multiprocessing's wordings only: "ProcessExitedException: process N ..." (mp.spawn) or "Process N
# terminated with exit code C, terminating remaining processes" (its harness); a bare "Process 23814 terminated
# with exit code 1" is any tool's PID. The index is a local rank: at most MAX_PROCESS_INDEX.
_MP = re.compile(r"(?:ProcessExitedException: process (\d+) terminated with (?:exit code (-?\d+)|signal (SIG[A-Z]+))"
                 r"|\b[Pp]rocess (\d+) terminated with exit code (-?\d+), terminating remaining processes)")
MAX_PROCESS_INDEX = 4096
_MP_EXITING = re.compile(r"\bexiting process (\d+) with exit code:? (-?\d+)")
_K8S = re.compile(r"^\s*Exit Code:\s+(\d+)\s*$|command terminated with exit code (\d+)")
# A launcher named on the line (the command it ran); else the traceback above must show one (signatures.py).
LAUNCHER_WORDS = ("accelerate", "torchrun", "torch.distributed.run", "torch.distributed.launch", "deepspeed")
LAUNCHER_FRAMES = ("accelerate/commands/launch", "torch/distributed/run", "torch/distributed/launch",
                   "torch/distributed/elastic", "deepspeed/launcher")
# Ray logs "state: DEAD" for every actor's end, a kill on purpose or going out of scope included.
_RAY_FAILED = ("creation_task_exception=1", "OUT_OF_MEMORY", "WORKER_DIED", "NODE_DIED", "SYSTEM_ERROR",
               "unexpectedly", "oom_context", "runtime_env_failed", "creation_task_failure")
_SUBPROCESS = re.compile(r"Command '(.{0,200}?)'? returned non-zero exit status (-?\d+)")
_RAY_DEAD = re.compile(r"state: DEAD, actor_id: (\w+)(?:, ip address: ([^,\s]+))?")


# The whole line is the shell's word (a "Killed" inside a sentence is someone's prose), also in a zh_CN
# locale ("已杀死", "行 12" for "line 12"); other locales' words are not read yet.
_SHELL_KILLED = re.compile(r"\s*(?:\S+: (?:line|行) \d+: +(\d+) +)?(?:Killed|已杀死)(?: {2,}(\S.{0,200}?))?\s*")


def parse_shell_killed(text: str) -> dict[str, Any] | None:
    """A shell's report that its command died of SIGKILL: no traceback, so a host OOM kill is suspected."""
    m = _SHELL_KILLED.fullmatch(text)
    if m is None:
        return None
    found: dict[str, Any] = {"component": "process", "exc_type": "SIGKILL", "signal": "SIGKILL",
                             "suspected": "host-oom", "message": text.strip()[:300]}
    if m.group(1):
        found["pid"] = int(m.group(1))
    return found


def parse_multiprocessing_exit(text: str) -> dict[str, Any] | None:
    """torch.multiprocessing's report of a process that ended badly (0 is no failure)."""
    m = _MP.search(text) if "terminated with" in text else None
    if m is not None:
        index = int(m.group(1) or m.group(4))
        code, signal = m.group(2) or m.group(5), m.group(3)
        if index > MAX_PROCESS_INDEX:
            return None
        exitcode = int(code) if code is not None else None
        if exitcode == 0:
            return None
        return {"origin": "multiprocessing", "local_rank": index, "exitcode": exitcode,
                "signal": signal or signal_name(exitcode), "root_cause": None}
    m = _MP_EXITING.search(text) if "exiting process" in text else None
    if m is None or m.group(2) == "0" or int(m.group(1)) > MAX_PROCESS_INDEX:
        return None
    exitcode = int(m.group(2))
    return {"origin": "multiprocessing", "local_rank": int(m.group(1)), "exitcode": exitcode,
            "signal": signal_name(exitcode), "root_cause": None}


def parse_container_exit(text: str) -> dict[str, Any] | None:
    """A Kubernetes container's (or kubectl exec's) non-zero exit code; 137 and 143 named as signals.
    kubectl exec's "command terminated with exit code N" says any command's status: alone it is read only
    for a signal (N > 128); a pod's "Exit Code:" line only under its "Reason:" (signatures.py keeps it)."""
    m = _K8S.search(text) if "xit code" in text or "Exit Code:" in text else None
    if m is None:
        return None
    code = int(m.group(1) or m.group(2))
    if code == 0 or (m.group(2) is not None and code <= 128):
        return None
    signal = {137: "SIGKILL", 143: "SIGTERM", 139: "SIGSEGV", 134: "SIGABRT"}.get(code)
    return {"component": "process", "exitcode": code, "message": text.strip()[:300], "pod_line": m.group(1) is not None,
            "exc_type": f"{signal} (exit code {code})" if signal else f"exit code {code}",
            "exit_detail": KILL_137 if code == 137 else None}


def parse_subprocess_exit(text: str) -> dict[str, Any] | None:
    """A launcher's subprocess that failed (accelerate launch: CalledProcessError of the training command)."""
    m = _SUBPROCESS.search(text) if "non-zero exit status" in text else None
    if m is None:
        return None
    code = int(m.group(2))
    signal = signal_name(code) if code < 0 else None
    return {"component": "process", "exitcode": code, "message": text.strip()[:300],
            "launcher": any(word in m.group(1) for word in LAUNCHER_WORDS),
            "exc_type": f"CalledProcessError ({f'{signal}, ' if signal else ''}exit status {code})"}


def parse_ray_actor_dead(text: str) -> dict[str, Any] | None:
    """Ray's core worker told that an actor died (its creation task raised, or its process went)."""
    m = _RAY_DEAD.search(text) if "state: DEAD" in text else None
    if m is None:
        return None
    if not any(word in text for word in _RAY_FAILED) or "RAY_KILL" in text or "INTENTIONAL" in text:
        return None
    raised = "creation_task_exception=1" in text
    return {"component": "ray-actor", "actor_name": m.group(1), "ip": m.group(2), "message": text.strip()[:300],
            "exc_type": "ActorDiedError" + (" (its creation task raised)" if raised else "")}

