"""What cluster managers print when they kill or lose a job's processes: Slurm and Kubernetes.

Read (wordings from public issues):
    slurmstepd: error: Detected 1 oom_kill event in StepId=11300781.0. Some of the step tasks have been OOM Killed.
    slurmstepd: error: Detected 2 oom-kill event(s) in step 3756240.batch cgroup.
    srun: error: Orion-01-01: task 4: Out Of Memory
    srun: error: Orion-18-69: task 289: Bus error      (any other way a task ended)
    Last State: Terminated  Reason: OOMKilled  Exit Code: 137   (kubectl describe pod)
An oom_kill event is the step's memory cgroup hitting its limit (`--mem`), not the machine's RAM.
srun's task id is the global rank only when srun starts one task per rank.

Typical use:
    parse_cluster_oom("slurmstepd: error: Detected 1 oom_kill event in StepId=113.0. ...")  # {"source": "slurm", ...}
    parse_srun_task("srun: error: node-3: task 7: Killed")  # {"origin": "srun", "rank": 7, "signal": "SIGKILL", ...}
"""
from __future__ import annotations

import re
from typing import Any

# One of these is in every line the parsers read.
WORDS = ("oom_kill", "oom-kill", "OOMKilled", "srun: error")
# The pre-check's spellings (detectors.KEYWORDS): srun's "task N:" holds an anchor byte, "srun: error" none.
KEYWORDS = ("oom_kill", "oom-kill", "OOMKilled", ": task")

_SLURM = re.compile(r"Detected (\d+) oom[-_]kill events?(?:\(s\))? in (?:StepId=|step )([\w.]+?)\.?(?:\s|$)")
_SRUN = re.compile(r"srun: error: ([\w.-]+): tasks? ([\d,-]+): (.+?)\s*$")
_EXIT = re.compile(r"Exited with exit code (\d+)")
# srun's words for a task's end, as signals (what torchrun's reports call them).
_SRUN_SIGNALS = {"Killed": "SIGKILL", "Terminated": "SIGTERM", "Aborted": "SIGABRT", "Segmentation fault": "SIGSEGV",
                 "Bus error": "SIGBUS"}


def parse_cluster_oom(text: str) -> dict[str, Any] | None:
    """A host-oom kill reported by Slurm (oom_kill events, a task out of memory) or Kubernetes (OOMKilled)."""
    m = _SLURM.search(text) if "oom" in text else None
    if m:
        return {"source": "slurm", "num_killed": int(m.group(1)), "step": m.group(2), "cgroup": True}
    m = _SRUN.search(text) if "srun: error" in text else None
    if m and m.group(3).startswith("Out Of Memory"):
        return {"source": "slurm", "process": f"srun task {m.group(2)} on {m.group(1)}", "task": m.group(2),
                "cgroup": True}
    if "OOMKilled" in text:
        return {"source": "kubernetes", "cgroup": True, "process": None}
    return None


def parse_srun_task(text: str) -> dict[str, Any] | None:
    """srun's report of one task that ended badly (not out of memory: that is a host-oom), as a child-failed."""
    m = _SRUN.search(text) if "srun: error" in text else None
    if m is None or m.group(3).startswith("Out Of Memory") or not m.group(2).isdigit():
        return None
    how = m.group(3)
    code = _EXIT.search(how)
    signal = next((sig for word, sig in _SRUN_SIGNALS.items() if how.startswith(word)), None)
    if code is None and signal is None:
        return None
    return {"origin": "srun", "rank": int(m.group(2)), "host": m.group(1), "signal": signal,
            "exitcode": int(code.group(1)) if code else None, "traceback": how, "root_cause": None}
