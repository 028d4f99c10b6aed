"""The stacks watch took of every rank at a hang, read back for the rules, without grpo-doctor's own threads.

watch's hang-N.json carries each rank's main-thread stack (`stacks`); hang files written before it
did are read from the py-spy captures they point to (`stack_dirs`, also looked for under the run
directory's stacks/ when the run directory was moved). `culprit_evidence` turns the culprits'
stacks into what a finding shows: their own frames, and whether the innermost one is the user's code.

Typical use:
    for report in run.hangs:
        captures = hang_captures(report)
        evidence = culprit_evidence(captures, [1])
        evidence["culprit_code"][1]["in_user_code"]   # True: a reward function, a data loader, a sleep
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from grpo_doctor.checks.stack_groups import format_frame, frame_kind, headline, innermost_user_frame
from grpo_doctor.schema import RunPaths
from grpo_doctor.schema.safe_read import read_json
from grpo_doctor.schema.stacks import StackCapture, thread_from_pyspy_json
from grpo_doctor.schema.watch_files import HangReport

MAX_FRAMES_SHOWN = 40
MAX_CAPTURE_BYTES = 64 * 2**20  # one rank's py-spy JSON: its threads' frames, well under a megabyte


def hang_captures(report: HangReport) -> list[StackCapture]:
    """The last stack of every rank that watch could read at this hang, sorted by rank."""
    if report.stacks:
        return [StackCapture(rank, _pid(report, rank), report.host, None, (thread,))
                for rank, thread in sorted(report.stacks.items())]
    return _from_stack_dirs(report)


def _pid(report: HangReport, rank: int) -> int:
    info = report.ranks.get(rank)
    return info.pid if info is not None and info.pid is not None else -1


def _from_stack_dirs(report: HangReport) -> list[StackCapture]:
    dirs = [Path(d) for d in report.stack_dirs][-1:]
    if report.file:
        # supervisor/<host>/hang-N.json -> the run directory's stacks/, wherever it was moved
        dirs += [RunPaths(Path(report.file).parents[2]).stacks / d.name for d in dirs]
    for directory in dirs:
        captures = []
        for path in sorted(directory.glob("rank-*.json")):
            try:
                threads = tuple(thread_from_pyspy_json(t) for t in read_json(path, cap=MAX_CAPTURE_BYTES, errors="replace"))
            except (OSError, ValueError, KeyError, TypeError):
                continue  # a failed capture leaves an empty or partial file
            rank = int(path.stem.rpartition("-")[2])
            captures.append(StackCapture(rank, _pid(report, rank), report.host, None, threads).without_own_threads())
        if captures:
            return captures
    return []


def main_frames(capture: StackCapture) -> list:
    main = capture.main_thread()
    return list(main.python_frames) if main else []


def culprit_evidence(captures: list[StackCapture], culprits: list[int]) -> dict[str, Any]:
    """`culprit_stacks` ({rank: ["function (file:line)", ...] innermost first}) and `culprit_code`
    ({rank: {"in_user_code", "where", "user_frame"}}) for the culprits whose stacks were read."""
    by_rank = {c.rank: c for c in captures}
    stacks, code = {}, {}
    for rank in culprits:
        if rank not in by_rank:
            continue
        frames = main_frames(by_rank[rank])
        if not frames:
            continue
        stacks[rank] = [format_frame(f) for f in frames[:MAX_FRAMES_SHOWN]]
        user = innermost_user_frame(frames)
        innermost = next((f for f in frames if frame_kind(f) != "stdlib"), None)
        code[rank] = {"in_user_code": innermost is not None and innermost is user, "where": headline(frames),
                      "user_frame": format_frame(user) if user else None}
    return {"culprit_stacks": stacks, "culprit_code": code}
