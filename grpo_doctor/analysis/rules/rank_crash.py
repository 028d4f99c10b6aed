"""`rank-crash`: a training process ended abnormally.

Sources: Error records (an uncaught exception), End records with reason exception or signal,
ranks whose log stops without an End record once the run is over (killed: SIGKILL, OOM killer,
node loss), watch's summary (`gone`), and raw logs (analysis.log_crashes): torchrun's ChildFailedError
block and agent lines, srun's task lines, CUDA faults, rollout-engine and Ray actor deaths (these
last name no rank: one finding per way they died).
Ranks that failed the same way are one finding. A rank stopped by SIGTERM/SIGINT/SIGHUP while
another rank failed is collateral (the launcher tears the job down), and so is an exception
saying a peer went away (gloo's "Connection closed by peer", also as a Ray task's own error): a warning,
not critical.

Evidence keys: `exc_type`, `message` (first 500 characters), `signal`, `exitcode`, `source`
("event-log", "watch" or the log file), `root_cause` (torchrun's first failure, when stated); from
raw logs also `suspected` ("host-oom": SIGKILL with no traceback) with `confirm_with` (the command
that shows the kill), `exception` (the rank's last Python traceback, or a Ray task's own error under
its header, "Type: message"), `rank_is_local` (only torchrun's agent line named it: the local rank),
`pid`, `cuda_fault`, `component` ("vllm-engine", "vllm-worker", "ray-actor", "process": a fatal signal's
report, "launcher": torchrun's ChildFailedError without an entry), `actor`, `ip`, `exit_type`,
`exit_detail`, `num_reports`.

Where the ranks that failed on their own are (analysis/parallel_layout.py, from the rank headers and
`parallel_group` records): `coordinates` ({rank: {"host", "local_rank", "gpu_index", "gpu_pci_bus_id",
"gpu_uuid", "groups"}}), `fault_domain` ("rank", "host", "group" or "scattered"), `fault_hosts`,
`fault_group`; the title names the first rank's place and the verdict ("all 8 ranks of host X: drain host
X"). Collateral ranks and ranks stopped from outside are not placed.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from grpo_doctor.analysis.finding_facts import CrashFacts
from grpo_doctor.analysis.findings import Finding
from grpo_doctor.analysis.log_crashes import crashes_from_logs
from grpo_doctor.analysis.parallel_layout import HINTS as LAYOUT_HINTS
from grpo_doctor.analysis.parallel_layout import Placement, place
from grpo_doctor.analysis.views import RunView, View
from grpo_doctor.schema import End
from grpo_doctor.schema.ranks import format_ranks

ID = "rank-crash"
READS = {View.LOG_SIGNATURES, View.RANK_LOGS, View.RANKS, View.WATCH_ARTIFACTS}
NO_END_MESSAGE = "log stops without an end record"

HINTS = (
    "Read the first failing rank's traceback (the error record, or the root-cause entry of torchrun's "
    "ChildFailedError block): the other ranks usually fail only because it left.",
    "Killed by SIGKILL without a traceback: the kernel's OOM killer is suspected; confirm it on that host with "
    "`dmesg -T | grep -i -E 'killed process|out of memory'` (in a container or Slurm job, the memory cgroup's "
    "limit), then lower host memory use (fewer dataloader_num_workers, less CPU offload: DeepSpeed offload_param / "
    "offload_optimizer, ms-swift --offload_model / --offload_optimizer, smaller batch).",
    "Exit on SIGABRT after an NCCL timeout: the crash is a symptom; see the nccl-timeout / hang findings.",
    *LAYOUT_HINTS,
)
HINT_CUDA_FAULT = ("A CUDA fault is reported asynchronously, often at a later call than the one that caused it: rerun "
                   "that rank with CUDA_LAUNCH_BLOCKING=1 to raise it where it happens, or under `compute-sanitizer "
                   "--tool memcheck python ...` to name the kernel; a device-side assert is usually an index out of "
                   "range (token ids beyond the vocabulary, labels beyond the classes).")
HINT_ENGINE = ("The rollout engine (vLLM EngineCore) died: its own error is printed above the EngineDeadError, in the "
               "engine's process (lines prefixed EngineCore / VllmWorker): read that traceback first.")
HINT_ACTOR = ("A Ray worker process died without a Python error (SYSTEM_ERROR): most often the host's OOM killer "
              "(run `dmesg -T | grep -i -E 'killed process|out of memory'` on the node named, and look for Ray's memory "
              "monitor in raylet.out), else a segfault; read that worker's own log above the ActorDiedError.")
COLLATERAL_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP")
# Evidence keys that raw logs add (see analysis.log_crashes).
LOG_KEYS = ("suspected", "confirm_with", "exception", "rank_is_local", "pid", "cuda_fault", "component", "actor",
            "ip", "exit_type", "exit_detail", "exitcode")
# Exception messages of a rank whose peer died first (gloo, NCCL, c10d): the effect, not the cause.
PEER_LOST = ("Connection closed by peer", "Connection reset by peer", "remote worker crashing",
             "remote process exited", "Broken pipe", "NCCL communicator was aborted")


# What watch sends a hung job (--on-hang kill): a process that reports one of these then (absl's
# "*** SIGTERM received at time=..." in Ray workers) was ended by watch, not crashed.
WATCH_SIGNALS = ("SIGTERM", "SIGKILL")
SAME_MOMENT_S = 2.0  # ranks watch saw gone within this of the first went together (one node, one kill)


@dataclass(frozen=True)
class Config:
    message_chars: int = 500  # how much of an exception message goes into the evidence


def check(run: RunView, cfg: Config) -> Iterator[Finding]:
    crashes: dict[int, dict[str, Any]] = {}  # rank -> what is known of its end
    for rank, log in sorted(run.rank_logs.items()):
        end, errors = log.end, log.errors
        if errors:
            err = errors[-1]
            crashes[rank] = {"exc_type": err.exc_type, "message": err.message[: cfg.message_chars],
                             "phase": err.phase, "step": err.step, "source": "event-log"}
        if isinstance(end, End) and str(end.reason) in ("exception", "signal"):
            info = crashes.setdefault(rank, {"phase": end.open_path, "step": end.step, "source": "event-log"})
            info["signal"] = end.signal
        elif end is None and _run_is_over(run):
            last = log.last_record
            crashes.setdefault(rank, {"phase": log.open_path, "step": getattr(last, "step", None),
                                      "source": "event-log", "message": NO_END_MESSAGE})
    rank_of_pid: dict[int, int] = {}
    first_gone_t = min((i.gone_t for s in run.summaries.values() for i in s.ranks.values()
                        if i.gone and i.gone_t is not None and not i.ended_cleanly), default=None)
    for summary in run.summaries.values():
        for rank, watched in summary.ranks.items():
            if watched.pid is not None:
                rank_of_pid[watched.pid] = rank
            if watched.gone and not watched.ended_cleanly:
                entry = crashes.setdefault(rank, {"phase": watched.open_phase, "step": watched.step, "source": "watch"})
                entry.setdefault("message", watched.gone)
                if (watched.gone_t is not None and first_gone_t is not None
                        and watched.gone_t - first_gone_t > SAME_MOMENT_S):
                    entry["after_first"] = True  # left after another rank: its going is a consequence
    from_logs, unranked = crashes_from_logs(run.signature_rows)
    unranked, named_by_ray = _name_ray_ranks(unranked, rank_of_pid, crashes)
    if named_by_ray:
        # Ray reports every actor that died under a task; a rank whose process merely went too, with
        # no error of its own, was ended by Ray's shutdown after the driver saw that death.
        for rank, info in crashes.items():
            if rank not in named_by_ray and info.get("source") == "watch" and info.get("exc_type") is None:
                info["after_first"] = True
    for rank, info in from_logs.items():
        entry = crashes.setdefault(rank, info)
        if entry is not info:  # the run's own records come first; the log adds how the process ended
            for key, value in info.items():
                entry.setdefault(key, value)
            entry["exitcode"] = info.get("exitcode", entry.get("exitcode"))
    if any(s.hang_ended_by_watch for s in run.summaries.values()):
        # watch ended a hung job: the ranks it stopped, and torchrun's agent that it signalled, are the
        # `hang` finding, not crashes or a stop from outside. So is a rank that wrote no end record
        # then: stopped by watch before it could (SIGKILL after the grace period, a process too busy
        # or stuck to run its handler in time), with no error of its own.
        crashes = {r: info for r, info in crashes.items()
                   if not _collateral(info) and not _stopped_without_end(info)}
        unranked = [info for info in unranked if info.get("component") != "launcher-signal"
                    and not (info.get("component") == "process" and info.get("exc_type") in WATCH_SIGNALS)]
    yield from _unranked_findings(unranked)
    if not crashes:
        return
    any_primary = any(not _collateral(info) for info in crashes.values())
    groups: dict[tuple, list[int]] = {}
    for rank, info in sorted(crashes.items()):
        group = (info.get("exc_type"), info.get("signal"), info.get("exitcode"), info.get("phase"), info.get("step"),
                 _collateral(info))
        groups.setdefault(group, []).append(rank)
    # Primary failures first, then the ranks the launcher stopped because of them.
    ordered = sorted(groups.items(), key=lambda item: any_primary and _collateral(crashes[item[1][0]]))
    for (exc_type, signal, exitcode, phase, step, _), ranks in ordered:
        info = crashes[ranks[0]]
        collateral = any_primary and _collateral(info)
        stopped = not any_primary  # only signals from outside: a scheduler, a launcher, Ctrl-C
        how = exc_type or (f"signal {signal}" if signal else None) or (
            f"exit code {exitcode}" if exitcode is not None else info.get("message") or "unknown cause")
        where = (f" in {phase}" if phase else "") + (f" at step {step}" if step is not None else "")
        if info.get("suspected") == "host-oom" and not collateral:
            where += " with no traceback: a host OOM kill is suspected"
        elif info.get("exception") and not exc_type:
            where += f" ({info['exception'][:160]})"
        if collateral:
            title = f"rank(s) {format_ranks(ranks)} ended ({how}) after another rank failed"
        elif stopped:
            title = (f"rank(s) {format_ranks(ranks)} were stopped from outside ({how}{where}): "
                     "a scheduler time limit, preemption, the launcher or Ctrl-C")
        else:
            title = f"rank(s) {format_ranks(ranks)} crashed: {how}{where}"
        placed = Placement() if collateral or stopped else place(
            run, ranks, {r: run.host_of(r) or crashes[r].get("host") for r in ranks})
        title += placed.clause
        hosts = sorted({h for h in (run.host_of(r) or crashes[r].get("host") for r in ranks) if h})
        evidence = {"exc_type": exc_type, "message": info.get("message"), "signal": signal, "exitcode": exitcode,
                    "source": info.get("source"), "root_cause": info.get("root_cause"),
                    **{k: info[k] for k in LOG_KEYS if info.get(k) is not None}, **placed.evidence}
        yield Finding(
            id=ID, severity="warning" if collateral or stopped else "critical", title=title, ranks=tuple(ranks),
            hosts=tuple(hosts), step=step, phase=phase, evidence=evidence, facts=_facts(evidence),
            hints=_hints(signal, exitcode, info) + placed.hints,
        )


def _unranked_findings(unranked: list[dict[str, Any]]) -> Iterator[Finding]:
    """One finding per way a process that no rank names died (a CUDA fault in an unprefixed log, a
    rollout engine, a Ray actor)."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for info in unranked:
        groups.setdefault((info.get("component"), info.get("cuda_fault"), info.get("exit_type")), []).append(info)
    for (component, cuda_fault, exit_type), infos in groups.items():
        info = next((i for i in infos if i.get("exit_detail") or i.get("actor")), infos[0])
        if cuda_fault:
            title = f"a process crashed: CUDA error: {cuda_fault}"
        elif component == "ray-actor":
            who = f" {info['actor']}" if info.get("actor") else ""
            how = f" (worker exit type {exit_type})" if exit_type else ""
            title = f"Ray actor{who} died{how}" + (f" on {info['ip']}" if info.get("ip") else "")
        elif component == "launcher":
            title = "torchrun reported a failed worker (ChildFailedError); the log shows no rank's entry"
        elif component == "process":
            title = f"a process died on {info.get('exc_type')}"
        elif component == "child-process":
            title = f"a child process died ({info.get('exc_type')}" + (f", pid {info['pid']})" if info.get("pid") else ")")
        elif component == "launcher-signal":
            title = (f"torchrun's agent received {info.get('exc_type')} from outside and stopped its workers "
                     "(a closed terminal, a scheduler's time limit or preemption, Ctrl-C)")
        else:
            title = f"the rollout engine died: {info.get('exc_type')}"
            if info.get("exception") and not info["exception"].startswith(str(info.get("exc_type"))):
                title += f" ({info['exception'][:160]})"
        evidence = {"exc_type": info.get("exc_type"), "message": info.get("message"), "signal": None,
                    "exitcode": None, "source": info.get("source"), "root_cause": None,
                    "num_reports": len(infos), **{k: info[k] for k in LOG_KEYS if info.get(k) is not None}}
        yield Finding(id=ID, severity="warning" if component == "launcher-signal" else "critical", title=title,
                      ranks=(), hosts=(), step=None, phase=None, evidence=evidence, facts=_facts(evidence),
                      hints=_hints(None, None, info))


def _facts(evidence: dict[str, Any]) -> CrashFacts:
    """The values of the evidence that incidents.py judges by, typed (analysis/finding_facts.py)."""
    return CrashFacts(exc_type=evidence["exc_type"], message=evidence["message"], signal=evidence["signal"],
                      exitcode=evidence["exitcode"], cuda_fault=evidence.get("cuda_fault"),
                      root_cause=evidence["root_cause"])


def _hints(signal: str | None, exitcode: int | None, info: dict[str, Any] | None = None) -> tuple[str, ...]:
    """The traceback hint always; the OOM-killer and NCCL-abort ones only where the way it ended fits."""
    info = info or {}
    if info.get("cuda_fault"):
        return (HINT_CUDA_FAULT, HINTS[0])
    if info.get("component") == "ray-actor":
        raised = str(info.get("exc_type") or "").startswith("error in ") or "creation task" in str(info.get("message"))
        return (HINTS[0],) if raised else (HINT_ACTOR, HINTS[0])  # its own Python error, not a dead process
    if info.get("component") == "process" and info.get("exc_type") == "SIGKILL":
        return (HINTS[1], HINTS[0])  # the shell's "Killed", no traceback: the OOM killer first
    if info.get("component") in ("process", "launcher", "child-process", "launcher-signal"):
        return (HINTS[0], HINTS[2])
    if info.get("component"):
        return (HINT_ENGINE, HINTS[0])
    hints = [HINTS[0]]
    if signal == "SIGKILL" or exitcode in (-9, 137):
        hints.append(HINTS[1])
    if signal == "SIGABRT" or exitcode in (-6, 134):
        hints.append(HINTS[2])
    return tuple(hints)


def _name_ray_ranks(unranked: list[dict[str, Any]], rank_of_pid: dict[int, int],
                    crashes: dict[int, dict[str, Any]]) -> tuple[list[dict[str, Any]], set[int]]:
    """Ray's death message names the actor's pid; where watch followed that pid as a rank, the
    death is that rank's, not an unnamed process's. Returns the deaths still without a rank, and
    the ranks Ray named."""
    left, named = [], set()
    for info in unranked:
        pid = info.get("pid")
        rank = rank_of_pid.get(pid) if info.get("component") == "ray-actor" and isinstance(pid, int) else None
        if rank is None:
            left.append(info)
            continue
        entry = crashes.setdefault(rank, {"source": "watch"})
        entry.pop("after_first", None)  # Ray says this one died: it is a cause, whatever the order seen
        named.add(rank)
        for key, value in info.items():
            entry.setdefault(key, value)
    return left, named


def _collateral(info: dict[str, Any]) -> bool:
    if info.get("after_first"):
        return True
    if info.get("exc_type") is None:
        return info.get("signal") in COLLATERAL_SIGNALS
    said = str(info.get("message") or "")
    if info.get("component") == "ray-actor":  # a Ray task's own error, under its header (log_crashes.py); for
        said += f" {info.get('exception') or ''}"  # any other rank, its last traceback may be exit noise
    return any(marker in said for marker in PEER_LOST)


def _stopped_without_end(info: dict[str, Any]) -> bool:
    return info.get("exc_type") is None and info.get("message") == NO_END_MESSAGE


def _run_is_over(run: RunView) -> bool:
    """A rank without an end record is only suspicious once the job is over: watch says so, or
    another rank ended."""
    return bool(run.summaries) or any(log.end is not None for log in run.rank_logs.values())
