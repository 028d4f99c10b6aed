"""What watch does when the job stops making progress: look at every rank, twice, and say who.

Every rank's stack is taken at once with py-spy, together with what its event log says (open
phase, step, seconds since progress), the latest GPU state and any flight-recorder dumps; a few
seconds later the stacks are taken again, so a rank that is merely slow ("moving") is told from
one that is stuck. Identical stacks are grouped across ranks and the ranks the others wait for
are named. Where py-spy cannot attach, the event log alone still says which phase each rank was in.

The report is schema/watch_files.py's HangReport, written as `supervisor/<host>/hang-N.json`.

Typical use:
    report = investigate(pids, tracker, paths, second_look_s=5)
    print("\n".join(hang_lines(report)))
    paths.watch_files(host).hang_report(1).write_text(json.dumps(report.to_dict()))
"""
from __future__ import annotations

import socket
import threading
import time
from collections.abc import Mapping
from typing import Any

from grpo_doctor.checks.stack_groups import (
    compare_captures,
    culprit_ranks,
    describe,
    format_ranks,
    group_stacks,
    headline,
    is_idle_in_event_loop,
    odd_ranks,
)
from grpo_doctor.logs.nccl_ras import parse as parse_ras
from grpo_doctor.schema import RunPaths
from grpo_doctor.schema.run_paths import host_dir_name
from grpo_doctor.schema.stacks import StackCapture
from grpo_doctor.schema.watch_files import HangRank, HangReport, phase_words
from grpo_doctor.supervisor.nccl_ras_client import query_nccl_ras
from grpo_doctor.supervisor.progress import ProgressTracker
from grpo_doctor.supervisor.stacks import capture_stacks, ptrace_denied

MAX_FR_FILES_LISTED = 64
RAS_TIMEOUT_S = 8.0  # NCCL's RAS gathers from every process of the job; a hang report waits no longer


class _Ras:
    """`query_nccl_ras` in a thread of its own, started now and read once the looks are done."""

    def __init__(self, timeout_s: float) -> None:
        self._timeout_s = timeout_s
        self._answer: dict[str, Any] | None = None
        self._thread = threading.Thread(target=self._ask, name="grpo-doctor-nccl-ras", daemon=True)
        self._thread.start()

    def _ask(self) -> None:
        query = query_nccl_ras(timeout_s=self._timeout_s)
        self._answer = query.to_dict() if query is not None else None

    def result(self) -> dict[str, Any] | None:
        self._thread.join(timeout=self._timeout_s + 1.0)
        return self._answer


def hang_lines(report: HangReport) -> list[str]:
    """What watch prints about a hang, a few lines. A verdict of several nodes' watches (report.fleet)
    names each culprit's host and each node it could not hear; every watch of the job prints the same."""
    ranks = report.ranks
    whose = f"rank(s) {format_ranks(ranks)}" if ranks else "the job's Ray workers (no rank known)"
    fleet = report.fleet
    if fleet is not None:
        nodes = f"{len(fleet.nodes)} of {fleet.nnodes} nodes" if fleet.nnodes else f"{len(fleet.nodes)} nodes"
        out = [f"hang on {nodes} (verdict {fleet.id} of {fleet.decider}'s watch): no progress from {whose}"]
    else:
        out = [f"hang on {report.host}: no progress from {whose}"]
    if report.culprits:
        where = "; ".join(f"rank {r}{_role(ranks[r].role)}{_on_host(report, r)}{_where(ranks[r])}"
                          for r in report.culprits if r in ranks)
        out.append(f"  the others wait for: {where}")
    elif waited_for := [a for a in report.actors if a.get("waited_for")]:
        out.append("  the others wait for: " + "; ".join(f"Ray worker pid {a.get('pid')} ({a.get('role')})"
                                                         for a in waited_for))
    out += [f"  {line}" for line in report.groups]
    stuck, moving = report.ranks_with_verdict("stuck"), report.ranks_with_verdict("moving")
    if stuck or moving:
        out.append(f"  second look: stuck {format_ranks(stuck) or '-'}; still moving {format_ranks(moving) or '-'}")
    if report.stack_errors:
        first = next(iter(report.stack_errors.values()))
        out.append(f"  stacks missing for rank(s) {format_ranks(report.stack_errors)}: {first}")
    if not report.groups:
        for rank, info in sorted(ranks.items()):
            out.append(f"  rank {rank}: open phase {info.open_phase or '-'}, step {info.step}, "
                       f"{info.idle_s or 0:.0f} s without progress (from the event log)")
    for actor in report.actors:
        out.append(f"  Ray worker pid {actor.get('pid')} ({actor.get('role')}, no rank): {actor.get('verdict')}, "
                   f"{actor.get('where') or 'no stack'}")
    if report.nccl_ras and isinstance(report.nccl_ras.get("raw"), str) and (ras := parse_ras(report.nccl_ras["raw"])):
        out.append(f"  {ras.describe()}")
    if report.flight_recorder_files:
        out.append(f"  NCCL flight-recorder dumps: {len(report.flight_recorder_files)} file(s) in fr/")
    if fleet is not None:
        out += [f"  node {node}: {why}" for node, why in sorted(fleet.missing.items())]
    return out


def _on_host(report: HangReport, rank: int) -> str:
    """" on node1" where the report holds several hosts' ranks."""
    return f" on {report.host_of(rank)}" if report.fleet is not None or len(report.hosts) > 1 else ""


def _role(role: str | None) -> str:
    return f" ({role})" if role else ""


def _where(info: HangRank) -> str:
    """ " in rollout at step 3", or nothing where there is no event log (uninstrumented)."""
    if info.open_phase is None and info.step is None:
        return ""
    return f" {phase_words(info)} at step {info.step}"


def _actor_row(pid: int, role: str, verdict: str, capture: StackCapture | None, waited_for: bool) -> dict[str, Any]:
    """A Ray worker with no rank at the hang; one waiting in Ray's task loop is idle, not stuck."""
    main = capture.main_thread() if capture is not None and capture.ok else None
    if main is not None and is_idle_in_event_loop(main):
        verdict = "idle (waiting for a task)"
    row = {"pid": pid, "role": role, "verdict": verdict, "where": headline(main.frames) if main else None}
    return row | ({"waited_for": True} if waited_for else {})


def investigate(
    pids: Mapping[int, int],
    tracker: ProgressTracker,
    paths: RunPaths,
    *,
    second_look_s: float = 5.0,
    native: bool = False,
    stack_timeout_s: float = 10.0,
    gpus: list[dict[str, Any]] | None = None,
    roles: Mapping[int, str] | None = None,
    actors: Mapping[int, str] | None = None,
) -> HangReport:
    """`roles`: rank -> Ray process title; `actors`: pid -> title of Ray workers with no rank, whose
    stacks are taken with the ranks' (keyed by -pid, so they group with them but are never a rank)."""
    roles, actors = roles or {}, actors or {}
    now_mono = time.monotonic()
    # The host in the name: the watches of several nodes may take stacks into one shared run directory.
    first_dir, second_dir = paths.hang_stacks(f"{time.strftime('%Y%m%d-%H%M%S')}-{host_dir_name(socket.gethostname())}")
    fr_dir = paths.flight_recorder
    targets = {**pids, **{-pid: pid for pid in actors if pid not in pids.values()}}
    # NCCL's RAS is asked during the looks, off their path: bounded, None at once where nobody answers.
    ras = _Ras(RAS_TIMEOUT_S)
    first = capture_stacks(targets, first_dir, native=native, timeout_s=stack_timeout_s)
    time.sleep(second_look_s)
    second = capture_stacks(targets, second_dir, native=native, timeout_s=stack_timeout_s)
    verdicts = compare_captures(first, second)
    groups = group_stacks(second)
    ranks: dict[int, HangRank] = {}
    for rank, pid in sorted(pids.items()):
        progress = tracker.ranks.get(rank)
        verdict = verdicts.get(rank, "unknown")
        if progress is None:
            ranks[rank] = HangRank(pid=pid, verdict=verdict, role=roles.get(rank))
            continue
        ranks[rank] = HangRank(
            pid=pid, verdict=verdict, open_phase=progress.open_path, step=progress.step,
            left_phase=progress.last_left if progress.open_path is None else None,
            idle_s=round(now_mono - progress.seen_mono, 1) if progress.seen_mono else None,
            timeout_s=round(tracker.timeout_s(progress), 1), role=roles.get(rank),
        )
    context = {r: f"step {info.step}" + _role(info.role) for r, info in ranks.items() if info.step is not None}
    context.update({r: info.role for r, info in ranks.items() if info.step is None and info.role})
    context.update({key: actors[-key] for key in targets if key < 0})
    captured = {c.rank: c for c in second}
    # With no rank known (an uninstrumented OpenRLHF-style job), the workers doing something else while
    # others wait in a collective are the ones waited for, as culprit_ranks says of ranks.
    waited_for = {-r for r in culprit_ranks(groups) if r < 0} if not any(r >= 0 for r in culprit_ranks(groups)) else set()
    actor_rows = tuple(_actor_row(-key, actors[-key], verdicts.get(key, "unknown"), captured.get(key), -key in waited_for)
                       for key in sorted(targets, reverse=True) if key < 0)
    return HangReport(
        host=socket.gethostname(),
        detected_t=time.time(),
        ranks=ranks,
        groups=tuple(describe(groups, rank_context=context)),
        culprits=tuple(r for r in culprit_ranks(groups) if r >= 0),
        odd_ranks=tuple(r for r in odd_ranks(groups) if r >= 0),
        stack_dirs=(str(first_dir), str(second_dir)),
        stack_errors={c.rank: c.error for c in second if c.error and c.rank >= 0},
        ptrace_denied=ptrace_denied(second),
        flight_recorder_files=tuple(sorted(str(p.name) for p in fr_dir.glob("*"))[:MAX_FR_FILES_LISTED]
                                    if fr_dir.is_dir() else ()),
        gpus=tuple(gpus or ()),
        stacks={c.rank: main for c in second if c.rank >= 0 and c.ok and (main := c.main_thread()) is not None},
        actors=actor_rows,
        nccl_ras=ras.result(),
    )
