"""What watch does when the job stops making progress: look at every rank, twice, and say who.

Every rank's stack is taken at once with py-spy, together with what its event log says (open
phase, step, seconds since progress), the latest GPU state and any flight-recorder dumps; a few
seconds later the stacks are taken again, so a rank that is merely slow ("moving") is told from
one that is stuck. Identical stacks are grouped across ranks and the ranks the others wait for
are named. Where py-spy cannot attach, the event log alone still says which phase each rank was in.

Typical use:
    report = investigate(ranks, tracker, paths, second_look_s=5)
    print("\n".join(report.lines()))
    (paths.supervisor / host / "hang.json").write_text(json.dumps(report.to_dict()))
"""
from __future__ import annotations

import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_doctor.checks.stack_groups import (
    compare_captures,
    culprit_ranks,
    describe,
    format_ranks,
    group_stacks,
    odd_ranks,
)
from grpo_doctor.supervisor.progress import ProgressTracker
from grpo_doctor.supervisor.stacks import capture_stacks, ptrace_denied

MAX_FR_FILES_LISTED = 64


@dataclass
class HangReport:
    host: str
    detected_t: float
    ranks: dict[int, dict[str, Any]]  # rank -> pid, open_phase, step, idle_s, timeout_s, verdict, stack
    groups: list[str]  # one line per group of identical stacks
    culprits: list[int]
    odd: list[int]
    stack_dirs: list[str]
    stack_errors: dict[int, str] = field(default_factory=dict)
    ptrace_denied: bool = False
    flight_recorder_files: list[str] = field(default_factory=list)
    gpus: list[dict[str, Any]] = field(default_factory=list)
    # rank -> its main thread at the second look (ThreadStack.to_dict), for the rules to read
    # without the capture files (the run directory may have moved).
    stacks: dict[int, dict[str, Any]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host, "detected_t": self.detected_t,
            "ranks": {str(k): v for k, v in sorted(self.ranks.items())}, "groups": self.groups,
            "culprits": self.culprits, "odd_ranks": self.odd, "stack_dirs": self.stack_dirs,
            "stack_errors": {str(k): v for k, v in self.stack_errors.items()},
            "ptrace_denied": self.ptrace_denied, "flight_recorder_files": self.flight_recorder_files,
            "gpus": self.gpus, "stacks": {str(k): v for k, v in sorted(self.stacks.items())},
        }

    def lines(self) -> list[str]:
        out = [f"hang on {self.host}: no progress from rank(s) {format_ranks(self.ranks)}"]
        if self.culprits:
            where = "; ".join(
                f"rank {r} in {self.ranks[r].get('open_phase') or 'no phase'} at step {self.ranks[r].get('step')}"
                for r in self.culprits if r in self.ranks
            )
            out.append(f"  the others wait for: {where}")
        out += [f"  {line}" for line in self.groups]
        stuck = [r for r, info in self.ranks.items() if info.get("verdict") == "stuck"]
        moving = [r for r, info in self.ranks.items() if info.get("verdict") == "moving"]
        if stuck or moving:
            out.append(f"  second look: stuck {format_ranks(stuck) or '-'}; still moving {format_ranks(moving) or '-'}")
        if self.stack_errors:
            first = next(iter(self.stack_errors.values()))
            out.append(f"  stacks missing for rank(s) {format_ranks(self.stack_errors)}: {first}")
        if not self.groups:
            for rank, info in sorted(self.ranks.items()):
                out.append(f"  rank {rank}: open phase {info.get('open_phase') or '-'}, step {info.get('step')}, "
                           f"{info.get('idle_s', 0):.0f} s without progress (from the event log)")
        if self.flight_recorder_files:
            out.append(f"  NCCL flight-recorder dumps: {len(self.flight_recorder_files)} file(s) in fr/")
        return out


def investigate(
    pids: Mapping[int, int],
    tracker: ProgressTracker,
    stacks_root: Path,
    fr_dir: Path,
    *,
    second_look_s: float = 5.0,
    native: bool = False,
    stack_timeout_s: float = 10.0,
    gpus: list[dict[str, Any]] | None = None,
) -> HangReport:
    now_mono = time.monotonic()
    label = time.strftime("hang-%Y%m%d-%H%M%S")
    first_dir, second_dir = stacks_root / f"{label}-a", stacks_root / f"{label}-b"
    first = capture_stacks(pids, first_dir, native=native, timeout_s=stack_timeout_s)
    time.sleep(second_look_s)
    second = capture_stacks(pids, second_dir, native=native, timeout_s=stack_timeout_s)
    verdicts = compare_captures(first, second)
    groups = group_stacks(second)
    ranks: dict[int, dict[str, Any]] = {}
    for rank, pid in sorted(pids.items()):
        progress = tracker.ranks.get(rank)
        info: dict[str, Any] = {"pid": pid, "verdict": verdicts.get(rank, "unknown")}
        if progress is not None:
            info.update(
                open_phase=progress.open_path, step=progress.step,
                idle_s=round(now_mono - progress.seen_mono, 1) if progress.seen_mono else None,
                timeout_s=round(tracker.timeout_s(progress), 1),
            )
        ranks[rank] = info
    context = {r: f"step {info['step']}" for r, info in ranks.items() if info.get("step") is not None}
    return HangReport(
        host=socket.gethostname(),
        detected_t=time.time(),
        ranks=ranks,
        groups=describe(groups, rank_context=context),
        culprits=culprit_ranks(groups),
        odd=odd_ranks(groups),
        stack_dirs=[str(first_dir), str(second_dir)],
        stack_errors={c.rank: c.error for c in second if c.error},
        ptrace_denied=ptrace_denied(second),
        flight_recorder_files=sorted(str(p.name) for p in fr_dir.glob("*"))[:MAX_FR_FILES_LISTED] if fr_dir.is_dir() else [],
        gpus=gpus or [],
        stacks={c.rank: main.to_dict() for c in second if c.ok and (main := c.main_thread()) is not None},
    )
