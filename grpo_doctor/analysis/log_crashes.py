"""Crashes that raw logs state, gathered for the `rank-crash` rule: launcher reports, CUDA faults,
rollout-engine and Ray actor deaths.

torchrun reports a failed worker twice: its agent's line ("failed (exitcode: -9) local_rank: 5
(pid: 2630) of binary: ...", local rank and pid only) and the ChildFailedError summary (global
rank, host). A report whose pid the summary also gives is the same failure; an agent line alone
(the summary cut off, or never printed) names the local rank, which is the rank on one node
(`rank_is_local` says so), as do torch.multiprocessing's "process N terminated with ..." lines (N is the
process index). srun's "task N: ..." lines name the task. gloo's lost peer ("Connection closed by peer")
is said as the rank's end, whatever rank printed it: the peer died first. The way a process ended says
where to look: -9 / SIGKILL with no Python traceback of that rank is most often the host's OOM
killer (`suspected` "host-oom", and `confirm_with` the command that shows it); -6 / SIGABRT is an
abort from C++ (NCCL's watchdog, a failed check: the message is above it); 1 is a Python exception,
whose traceback (`exception`) is the rank's last in the log.

CUDA faults ("CUDA error: an illegal memory access was encountered", device-side asserts) name
the rank when the line's prefix does; engine and actor deaths name the component, and the rank
where a Ray actor's repr does ("DTensorPolicyWorker[rank=2]"); a vLLM engine's death carries the
engine's own error (`exception`: the traceback printed nearest it). A Ray task's header
("RayTaskError(...): ray::Class.method() (pid=N, ...)") carries the task's own error, the exception that
ends the traceback right below it: a task that lost its gloo peer is that actor's end, collateral,
whichever task's error the driver happened to raise first, not a second death that names no rank.

Typical use:
    by_rank, unranked = crashes_from_logs(run.signature_rows)
"""
from __future__ import annotations

import re
from typing import Any

from grpo_doctor.logs.kinds import CHILD_FAILED, CUDA_FAULT, NCCL_ERROR, PYTHON_TRACEBACK, WORKER_DIED

DMESG = "dmesg -T | grep -i -E 'killed process|out of memory'"
# A launcher's own traceback when it gives up (torchrun, torch.multiprocessing), not a rank's
_LAUNCHER_EXCEPTIONS = ("ChildFailedError", "ProcessExitedException", "ProcessRaisedException")
_ENGINE_WRAPPERS = ("EngineDeadError", "EngineGenerateError", "RayTaskError", "CancelledError")
_EXC_NAME = re.compile(r"((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception)):")
_ENGINE_ERROR_LINES = 300  # how far from the engine's death its own traceback may be printed
_TASK_TRACEBACK_LINES = 20  # how far below a Ray task's header its traceback starts (Ray's carets in between)


def crashes_from_logs(rows: list[dict[str, Any]]) -> tuple[dict[int, dict[str, Any]], list[dict[str, Any]]]:
    """(rank -> what the logs say of its end, ends that name no rank)."""
    by_rank: dict[int, dict[str, Any]] = {}
    unranked: list[dict[str, Any]] = []
    tracebacks = _tracebacks(rows)
    task_errors, claimed = _ray_task_errors(rows)
    for index, row in enumerate(rows):
        f = row["fields"]
        if index in claimed:
            continue  # the exception line of a Ray task's traceback: that task's end (task_errors)
        if row["kind"] == CUDA_FAULT:
            info = {"exc_type": f"CUDA error: {f['error']}", "message": row["text"][:500], "phase": None,
                    "step": None, "source": row["source"], "cuda_fault": f["error"]}
            if row["rank"] is None:
                unranked.append(info)
            else:
                entry = by_rank.setdefault(int(row["rank"]), info)
                entry.setdefault("cuda_fault", f["error"])
        elif row["kind"] == WORKER_DIED:
            info = {"exc_type": f.get("exc_type"), "message": f.get("message"), "phase": None, "step": None,
                    "source": row["source"], "component": f.get("component"),
                    "actor": f.get("actor_name") or f.get("class_name"), "pid": f.get("pid"), "ip": f.get("ip"),
                    "exit_type": f.get("exit_type"), "exit_detail": f.get("exit_detail"), "exitcode": f.get("exitcode")}
            if f.get("component") == "vllm-engine":
                _add_engine_error(info, row, rows)
            if index in task_errors:
                error = task_errors[index]
                info["exception"] = error
                info["message"] = f"{info['message'] or ''} (the task's error: {error})".strip()[:500]
            info["exc_type"] = info["exc_type"] or _component_name(f)
            if f.get("component") == "peer-lost":  # a rank that lost its peer: said as such, whichever rank
                who = f"rank {row['rank']}: " if row["rank"] is not None else ""
                info.update(component="process", exc_type=f"{who}{f.get('exc_type')}: {f.get('message')}")
                unranked.append(info)
            elif f.get("rank") is not None:  # an actor whose repr names its rank ("DTensorPolicyWorker[rank=2]")
                by_rank.setdefault(int(f["rank"]), info)
            else:
                unranked.append(info)
    summary_pids = {row["fields"].get("pid") for row in rows
                    if row["kind"] == CHILD_FAILED and row["fields"].get("origin") == "summary"}
    for row in rows:
        f = row["fields"]
        if row["kind"] != CHILD_FAILED or (f.get("exitcode") in (0, None) and not f.get("signal")):
            continue
        rank, local = f.get("rank"), False
        if rank is None:
            if (f.get("origin") not in ("agent", "deepspeed", "multiprocessing") or f.get("local_rank") is None
                    or (f.get("pid") is not None and f.get("pid") in summary_pids)):
                continue
            rank, local = f["local_rank"], True
        entry = by_rank.setdefault(int(rank), {"phase": None, "step": None, "source": row["source"]})
        entry.setdefault("signal", f.get("signal"))
        entry["exitcode"] = f.get("exitcode")
        entry["root_cause"] = f.get("root_cause") if entry.get("root_cause") is None else entry["root_cause"]
        entry.setdefault("host", f.get("host") or row["host"])
        entry.setdefault("pid", f.get("pid"))
        entry.setdefault("time", f.get("time"))
        if local:
            entry.setdefault("rank_is_local", True)
    if not any(row["kind"] == CHILD_FAILED for row in rows):
        # torchrun's own traceback ending in ChildFailedError, its summary cut off before any entry
        launcher = next((row for row in rows if row["kind"] == PYTHON_TRACEBACK
                         and (row["fields"].get("exc_type") or "").endswith("ChildFailedError")), None)
        if launcher is not None:
            unranked.append({"exc_type": "ChildFailedError", "message": launcher["text"][:500], "phase": None,
                             "step": None, "source": launcher["source"], "component": "launcher"})
    _earliest_root_cause(by_rank)
    for rank, entry in by_rank.items():
        _explain_exit(entry, tracebacks.get(rank) or (tracebacks.get(None) if len(by_rank) == 1 else None))
    return by_rank, unranked


def _earliest_root_cause(by_rank: dict[int, dict[str, Any]]) -> None:
    """Each node's torchrun names its own "Root Cause (first observed failure)": where several do, the
    failure that came first by its `time` is the job's root cause; the others are not."""
    roots = {rank: entry["time"] for rank, entry in by_rank.items() if entry.get("root_cause") and entry.get("time")}
    if len(roots) > 1:
        first = min(roots, key=lambda rank: roots[rank])  # torchrun's "2026-01-07_03:14:15" sorts as text
        for rank in roots:
            by_rank[rank]["root_cause"] = rank == first


def _ray_task_errors(rows: list[dict[str, Any]]) -> tuple[dict[int, str], set[int]]:
    """A Ray task's own error, which its header ("ray::Class.method() (pid=N, ...)", read as "error in
    Class.method()") leaves to the traceback right below it: the first Python traceback that starts a few
    lines after the header in the same log, before the next header. Returns (index of the header row -> "Type: message", indexes of the
    peer-lost rows that are that same exception line). A task that lost its gloo peer died of another's
    death: said on the task's own row, its rank named by the header's pid, not as a second death of a
    process no rank names, whichever task's error the driver happened to raise first."""
    errors: dict[int, str] = {}
    claimed: set[int] = set()
    by_source: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        by_source.setdefault(row["source"], []).append(i)
    for indexes in by_source.values():
        indexes.sort(key=lambda j: rows[j]["line_number"])
        headers = [k for k, j in enumerate(indexes) if _is_task_header(rows[j])]
        for k, next_k in zip(headers, [*headers[1:], len(indexes)][:len(headers)], strict=True):
            below = indexes[k + 1:next_k]
            traceback = next((j for j in below if rows[j]["kind"] == PYTHON_TRACEBACK
                              and rows[j]["fields"].get("exc_type")
                              and rows[j]["line_number"] - rows[indexes[k]]["line_number"] <= _TASK_TRACEBACK_LINES),
                             None)
            if traceback is None:
                continue
            f = rows[traceback]["fields"]
            errors[indexes[k]] = f"{f['exc_type']}: {f.get('message') or ''}".strip().rstrip(":")[:500]
            peer = next((j for j in below[below.index(traceback):] if rows[j]["kind"] == WORKER_DIED
                         and rows[j]["fields"].get("component") == "peer-lost"
                         and rows[j]["text"] == rows[traceback]["text"]), None)
            if peer is not None:
                claimed.add(peer)
                lost = rows[peer]["fields"]
                errors[indexes[k]] = f"{lost.get('exc_type')}: {lost.get('message')}"
    return errors, claimed


def _is_task_header(row: dict[str, Any]) -> bool:
    """Ray's header over a remote task's traceback, its exception named only below it (logs/faults.py)."""
    f = row["fields"]
    return (row["kind"] == WORKER_DIED and f.get("component") == "ray-actor" and f.get("pid") is not None
            and str(f.get("exc_type") or "").startswith("error in "))


def _add_engine_error(info: dict[str, Any], death: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """The engine's own error: the Python traceback nearest the line that says it died (vLLM prints
    "EngineCore failed to start." / "Process EngineCore_0:" above it, "AsyncLLM output_handler
    failed." / EngineDeadError below it), if that is not itself an engine-dead wrapper."""
    near = [row for row in rows if abs(row["line_number"] - death["line_number"]) <= _ENGINE_ERROR_LINES and (
        row["kind"] == NCCL_ERROR or row["kind"] == PYTHON_TRACEBACK and row["fields"].get("exc_type")
        and not row["fields"]["exc_type"].endswith(_ENGINE_WRAPPERS))]
    if not near:
        return
    row = min(near, key=lambda row: abs(row["line_number"] - death["line_number"]))
    f = row["fields"]
    if row["kind"] == NCCL_ERROR:  # its traceback's exception line, read as an NCCL error (another stream's)
        error = row["text"][:300]
        exc = _EXC_NAME.match(error)
        exc_type = exc.group(1) if exc else None
    else:
        error = f"{f['exc_type']}: {f.get('message') or ''}".strip().rstrip(":")[:300]
        exc_type = f["exc_type"]
    info["exception"] = error
    info["message"] = f"{info['message'] or ''} (the engine's error: {error})".strip()[:500]
    info["exc_type"] = info["exc_type"] or exc_type


def _tracebacks(rows: list[dict[str, Any]]) -> dict[int | None, str]:
    """rank (None: unprefixed) -> "Type: message" of its last Python traceback that is not torchrun's own."""
    found: dict[int | None, str] = {}
    for row in rows:
        f = row["fields"]
        if row["kind"] == PYTHON_TRACEBACK and f.get("exc_type") and not f["exc_type"].endswith(_LAUNCHER_EXCEPTIONS):
            found[row["rank"]] = f"{f['exc_type']}: {f.get('message') or ''}".strip().rstrip(":")[:500]
    return found


def _explain_exit(entry: dict[str, Any], exception: str | None) -> None:
    signal, exitcode = entry.get("signal"), entry.get("exitcode")
    if signal == "SIGKILL" or exitcode in (-9, 137):
        if exception is None and entry.get("exc_type") is None:
            entry["suspected"] = "host-oom"
            entry["confirm_with"] = DMESG
    elif exitcode == 1 and exception is not None:
        entry.setdefault("exception", exception)
    elif signal == "SIGABRT" or exitcode in (-6, 134):
        entry.setdefault("exception", exception)


def _component_name(f: dict[str, Any]) -> str:
    return {"launcher": "torchrun reported a failed worker", "vllm-engine": "vLLM engine died",
            "vllm-worker": "vLLM worker died", "process": "process died", "ray-actor": "Ray actor died",
            "child-process": "child process died", "launcher-signal": "torchrun stopped by a signal",
            }.get(f.get("component") or "", "process died")
