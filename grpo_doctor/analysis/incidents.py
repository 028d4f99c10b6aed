"""Cause before effect: groups a run's findings into incidents, one root cause and the findings it explains.

A distributed job fails as a cascade. One rank hangs in a reward function, runs out of memory or dies;
every other rank then times out in the next collective, loses its peer, or is stopped by torchrun.
Sorted by severity alone, the victims' timeouts lead and the culprit comes third. Here each finding
that another one explains becomes a `consequence` whose `caused_by` is the root's `Finding.key`;
the root becomes a `root-cause` (as severe as the worst of its consequences), and the list is put in
order: each root first with its consequences right after it, incidents by severity. A consequence's
title ends with the chain in a few words: "... timed out in all_gather (because rank(s) 1 hung in
rollout)".

What explains what (the root kinds, most fundamental first; a finding is explained by the first root
that can explain it):
- gpu-fault: the machine failed under a rank (an Xid, uncorrectable ECC errors, a lost GPU): the crash,
  hang or NCCL error of a rank on that GPU is its consequence, and so are the others' timeouts and lost
  peers (a throttled GPU explains its rank's straggling). An Xid that is the application's own fault
  (13, 31, 43) or a follow-up (45) is no machine fault and explains nothing.
- rendezvous-failure: the job never formed; later collective timeouts, NCCL errors and crashes follow.
- memory-growth (critical: the projected OOM was near): the memory that grew ran out; the same rank's
  cuda-oom (GPU memory) or host-oom (host memory), its crash on a failed allocation or a SIGKILL, and,
  once one of those happened, the others' timeouts and lost peers.
- cuda-oom, host-oom: the rank that ran out of memory died; the others' NCCL errors, timeouts, peer-lost
  crashes and the dead rank's own crash record are the same event.
- collective-mismatch, hang: the culprit rank was elsewhere; those waiting in the collective timed out.
- rank-crash of a rank that failed on its own (an exception, SIGKILL, SIGSEGV): its peers' timeouts,
  "Connection closed by peer" (also of a process no rank names) and the siblings torchrun stopped are
  consequences.
- nccl-error that is not a peer's departure (e.g. "unhandled system error"): the crashes it caused.
- seed-collision, constant-reward: identical completions / a constant reward leave every group with
  zero reward spread, hence dead steps, zero advantage and zero KL.
A finding is a victim (explainable) when it says it waited for or lost a peer: nccl-timeout, the
`hang` of one host's ranks waiting for a culprit (on any host: rules/hang.py), an NCCL error of a
departed peer, a rank-crash whose exception is a collective timeout or a lost connection, one ended by SIGABRT / SIGTERM after a failure elsewhere, or the crash of the very rank that ran out of
memory.

Typical use:
    findings = link_incidents(findings)      # run_rules does this last
    root = findings[0]                       # the root cause of the most severe incident
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

from grpo_doctor.analysis.finding_facts import (
    crash_facts,
    gpu_fault_facts,
    growth_facts,
    hang_facts,
    nccl_error_facts,
)
from grpo_doctor.analysis.findings import SEVERITIES, Finding, sort_findings
from grpo_doctor.schema.ranks import format_ranks

# Root kinds in the order they are tried: the most fundamental cause first.
ROOT_ORDER = ("gpu-fault", "rendezvous-failure", "memory-growth", "cuda-oom", "host-oom", "collective-mismatch", "hang", "rank-crash",
              "nccl-error", "seed-collision", "constant-reward")
# Words of an exception raised in a rank because a collective or a peer failed, not by the rank itself.
WAITED_WORDS = ("timed out", "timeout", "connection closed by peer", "connection reset by peer", "broken pipe",
                "remote process exited", "remote worker", "communicator was aborted", "dist_backend_error",
                "distbackenderror", "processgroupnccl", "watchdog", "nccl error", "ncclsystemerror",
                "ncclremoteerror", "peer", "store")
ABORT_SIGNALS = ("SIGABRT", "SIGTERM", "SIGINT", "SIGHUP")
ABORT_EXITCODES = (-6, 134, -15, 143)
ROLLOUT_EFFECTS = ("zero-std-groups", "dead-step", "zero-kl", "constant-reward")
# Words of a failed allocation in a crash's exception (torch's CPU and CUDA allocators, Python, C++).
ALLOCATION_WORDS = ("out of memory", "can't allocate memory", "cannot allocate memory", "memoryerror",
                    "outofmemoryerror", "bad_alloc")


def link_incidents(findings: list[Finding]) -> list[Finding]:
    """The findings with `role` / `caused_by` set and in incident order (see the module docstring)."""
    findings = list(findings)
    consequence_of: dict[int, int] = {}  # index of a consequence -> index of its root
    for root_id in ROOT_ORDER:
        # torchrun names the first failure in time ("Root Cause (first observed failure)"): it goes first.
        for i in sorted(range(len(findings)), key=lambda k: crash_facts(findings[k]).root_cause is not True):
            root = findings[i]
            if root.id != root_id or i in consequence_of or _is_victim(root, findings):
                continue
            explains = _EXPLAINS[root_id]
            for j, other in enumerate(findings):
                if j != i and j not in consequence_of and j not in consequence_of.values() \
                        and explains(root, other, findings):
                    consequence_of[j] = i
    roots = list(dict.fromkeys(consequence_of.values()))  # in the order they were found to explain something
    out: list[Finding] = []
    for i, f in [(i, findings[i]) for i in roots] + [(i, f) for i, f in enumerate(findings) if i not in roots]:
        if i in consequence_of:
            root = findings[consequence_of[i]]
            out.append(dataclasses.replace(f, role="consequence", caused_by=root.key,
                                           title=f"{f.title} (because {_because(root)})"))
        elif i in roots:
            worst = min((findings[j].severity for j, r in consequence_of.items() if r == i), key=SEVERITIES.index)
            severity = min(f.severity, worst, key=SEVERITIES.index)
            out.append(dataclasses.replace(f, role="root-cause", severity=severity))
        else:
            out.append(f)
    return sort_findings(out)


def _because(root: Finding) -> str:
    """The root cause in a few words, for the consequence's own sentence: the chain in one line."""
    who = f"rank(s) {format_ranks(list(root.ranks))}" if root.ranks else None
    phrases = {
        "hang": f"{who or 'a rank'} hung" + (f" in {root.phase}" if root.phase else ""),
        "collective-mismatch": f"{who or 'some ranks'} called a different collective",
        "rank-crash": f"{who or 'a process'} failed first",
        "cuda-oom": f"{who or 'a process'} ran out of GPU memory",
        "host-oom": f"{who or 'a process'} ran out of host memory",
        "memory-growth": f"the memory of {who or 'a process'} grew until it ran out",
        "rendezvous-failure": "the job's rendezvous failed",
        "gpu-fault": _gpu_fault_phrase(root),
        "nccl-error": "NCCL failed" + (f" on {who}" if who else ""),
        "seed-collision": f"{who or 'ranks'} sample with the same seed",
        "constant-reward": "the reward is constant",
    }
    return phrases.get(root.id, root.id)


def _gpu_fault_phrase(root: Finding) -> str:
    fault = gpu_fault_facts(root)
    gpu = f"GPU {fault.gpu}" if fault.gpu is not None else "a GPU"
    where = f" on {fault.host}" if fault.host else ""
    xids = fault.xids
    return f"{gpu}{where} failed" + (f" (Xid {', '.join(map(str, xids))})" if xids else "")


def _is_victim(f: Finding, findings: list[Finding]) -> bool:
    """A finding that only says this rank waited for or lost another (never a root while a cause exists)."""
    if f.id == "nccl-timeout":
        return True
    if f.id == "hang":  # the ranks of one host waiting for a culprit on any host (rules/hang.py)
        return bool(hang_facts(f).waiting_for)
    if f.id == "nccl-error":
        return _peer_departed(f)
    if f.id == "rank-crash":
        return _crash_waited(f, findings)
    return False


def _peer_departed(f: Finding) -> bool:
    return nccl_error_facts(f).peer_departed  # rules/nccl_error.py judges that from its own fields


def _crash_waited(f: Finding, findings: list[Finding]) -> bool:
    """A crash that is an effect: its exception says it waited or lost a peer, or it was aborted or stopped
    (SIGABRT after an NCCL timeout, SIGTERM from torchrun) while something else failed."""
    if f.severity != "critical":  # rank_crash.py marks the ranks the launcher stopped after a failure
        return True
    crash = crash_facts(f)
    message = f"{crash.exc_type or ''} {crash.message or ''}".lower()
    if crash.exc_type and any(w in message for w in WAITED_WORDS):
        return True
    if crash.exc_type:
        return False
    causes = [g for g in findings if g is not f and g.id in ROOT_ORDER and g.id != "rank-crash"
              and g.severity == "critical"]
    aborted = crash.signal in ABORT_SIGNALS or crash.exitcode in ABORT_EXITCODES
    if aborted:
        return bool(causes) or any(g is not f and g.id == "rank-crash" and set(g.ranks) - set(f.ranks)
                                   for g in findings)
    # "exited with exit code 1" (torchrun, srun) says only that the rank's Python failed: where the log
    # also holds the error that made it fail (an NCCL error, an OOM), that error is the news.
    return crash.exitcode == 1 and not crash.signal and bool(causes)


def _collective_effects(root: Finding, other: Finding, findings: list[Finding]) -> bool:
    """What a rank that left the collectives (hung, mismatched, dead, out of memory) does to the others."""
    if other.id == "nccl-timeout":
        return True
    if other.id == "nccl-error":
        return _peer_departed(other) or bool(set(other.ranks) & set(root.ranks))
    if other.id == "rank-crash":
        return _crash_waited(other, findings) or bool(set(other.ranks) and set(other.ranks) <= set(root.ranks))
    if other.id == "hang":  # ranks stuck waiting for the dead or out-of-memory rank
        return root.id != "hang" and not (set(other.ranks) <= set(root.ranks) and root.id == "collective-mismatch")
    return False


def _gpu_fault_effects(root: Finding, other: Finding, findings: list[Finding]) -> bool:
    """A machine fault on a rank's GPU: that rank's crash, hang or NCCL error, and what its leaving did to the
    others. A fault that names no rank explains the findings of its host. Throttling explains straggling."""
    if other.id == "gpu-fault":
        return False
    fault = gpu_fault_facts(root)
    on_gpu = bool(set(other.ranks) & set(root.ranks)) or (
        not root.ranks and bool(root.hosts) and bool(set(other.hosts) & set(root.hosts)))
    if other.id == "straggler":
        return on_gpu and bool(fault.throttle_reasons)
    if not fault.hardware or root.severity != "critical":
        return False
    if other.id == "rank-crash" and crash_facts(other).cuda_fault in fault.cuda_errors and (
            on_gpu or not other.hosts or not root.hosts):
        return True  # the process died of that very CUDA error ("uncorrectable ECC error encountered")
    if other.id in ("rank-crash", "hang", "nccl-error", "nccl-timeout", "collective-mismatch") and on_gpu:
        return True
    return bool(root.ranks) and _collective_effects(root, other, findings)


def _rendezvous_effects(root: Finding, other: Finding, findings: list[Finding]) -> bool:
    return other.id in ("nccl-timeout", "nccl-error", "hang") or (
        other.id == "rank-crash" and (_crash_waited(other, findings) or crash_facts(other).exitcode == 1))


def _memory_effects(root: Finding, other: Finding, findings: list[Finding]) -> bool:
    if other.id in ("cuda-oom", "host-oom", "vllm-memory"):
        return False  # several ranks out of memory: each its own incident
    if other.id == "hang":
        return not set(other.ranks) <= set(root.ranks) or not root.ranks
    if other.id == "rank-crash" and (not root.ranks or not other.ranks or set(other.ranks) & set(root.ranks)):
        return True  # the process that ran out of memory died of it (a Ray actor, a torchrun child)
    return _collective_effects(root, other, findings)


def _growth_effects(root: Finding, other: Finding, findings: list[Finding]) -> bool:
    """Memory that grew toward its capacity (critical: near) and then ran out: the OOM of that memory on the
    same rank (host), the rank's crash on a failed allocation, and what its leaving did to the others."""
    if root.severity != "critical":
        return False
    if other.id in ("cuda-oom", "host-oom"):
        return _ran_out(root, other)
    if other.id == "rank-crash" and _ran_out(root, other):
        return True
    return any(_ran_out(root, g) for g in findings) and _collective_effects(root, other, findings)


def _ran_out(root: Finding, other: Finding) -> bool:
    same = bool(set(other.ranks) & set(root.ranks)) or (not other.ranks and bool(set(other.hosts) & set(root.hosts)))
    if not same:
        return False
    if other.id in ("cuda-oom", "host-oom"):
        return (growth_facts(root).memory == "gpu") == (other.id == "cuda-oom")
    if other.id == "rank-crash":
        crash = crash_facts(other)
        text = f"{crash.exc_type or ''} {crash.message or ''}".lower()
        return any(w in text for w in ALLOCATION_WORDS) or crash.signal == "SIGKILL"
    return False


def _hang_effects(root: Finding, other: Finding, findings: list[Finding]) -> bool:
    if other.id == "hang":  # the ranks hung because they waited in mismatched collectives, or for the culprit
        return root.id == "collective-mismatch" or (
            root.id == "hang" and bool(set(hang_facts(other).waiting_for) & set(root.ranks)))
    if other.id == "rank-crash" and set(other.ranks) and set(other.ranks) <= set(root.ranks):
        return _crash_waited(other, findings)  # the culprit's own crash is news, a victim's is not
    return _collective_effects(root, other, findings)


def _crash_effects(root: Finding, other: Finding, findings: list[Finding]) -> bool:
    if other.id == "rank-crash":  # a rank's own crash record is no effect; a process no rank names lost a peer
        return _crash_waited(other, findings) and not (other.ranks and set(other.ranks) <= set(root.ranks))
    return _collective_effects(root, other, findings)


def _nccl_error_effects(root: Finding, other: Finding, findings: list[Finding]) -> bool:
    return other.id in ("nccl-timeout", "hang") or (other.id == "rank-crash" and _crash_waited(other, findings)) or (
        other.id == "rank-crash" and "nccl" in (crash_facts(other).message or "").lower())


def _rollout_effects(root: Finding, other: Finding, findings: list[Finding]) -> bool:
    return other.id in ROLLOUT_EFFECTS and other.id != root.id


_EXPLAINS: dict[str, Callable[[Finding, Finding, list[Finding]], bool]] = {
    "gpu-fault": _gpu_fault_effects,
    "rendezvous-failure": _rendezvous_effects,
    "memory-growth": _growth_effects,
    "cuda-oom": _memory_effects,
    "host-oom": _memory_effects,
    "collective-mismatch": _hang_effects,
    "hang": _hang_effects,
    "rank-crash": _crash_effects,
    "nccl-error": _nccl_error_effects,
    "seed-collision": _rollout_effects,
    "constant-reward": _rollout_effects,
}
