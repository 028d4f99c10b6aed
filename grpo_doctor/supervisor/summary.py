"""watch's last word on a job: the summary it writes (`supervisor/<host>/summary.json`) and prints.

The summary is schema/watch_files.py's WatchSummary; the report reads it back (analysis/watch_files.py)
to know the job is over, which ranks left without a clean end, and whether the output was scanned live.

Typical use:
    summary = build_summary(host, status, exit_status, hang_ended, ranks, num_hangs=1, signatures={},
                            bad_event_lines=0, live_scan_complete=True, live_scan_skipped_bytes=0)
    paths.watch_files(host).summary_json.write_text(json.dumps(summary.to_dict(), indent=2))
    for line in summary_lines(summary): console.note(line)
"""
from __future__ import annotations

import time
from collections.abc import Mapping, Set

from grpo_doctor.runlog.rank_states import CLEAN_ENDS, RankState
from grpo_doctor.schema.watch_files import WatchedRank, WatchSummary
from grpo_doctor.supervisor.launch import describe_exit
from grpo_doctor.supervisor.progress import RankProgress


def watched_ranks(progress: Mapping[int, RankProgress], pids: Mapping[int, int],
                  gone: Mapping[int, str], roles: Mapping[int, str] | None = None,
                  gone_t: Mapping[int, float] | None = None, exited: Set[int] = frozenset()) -> dict[int, WatchedRank]:
    """Every rank watch followed (by its event log or its process), as it last saw it; `roles`: rank ->
    its Ray actor's process title; `gone_t`: rank -> when its process was seen gone; `exited`: ranks
    without records that the launcher's exit status 0 says ended cleanly."""
    ranks = {}
    for rank in sorted(set(progress) | set(pids)):
        p = progress.get(rank)
        ranks[rank] = WatchedRank(
            pid=pids.get(rank) or (p.pid if p else None), step=p.step if p else None,
            open_phase=p.open_path if p else None,
            ended=str(p.ended) if p and p.ended is not None else ("exit" if rank in exited else None),
            error=p.error if p else None, gone=gone.get(rank), role=(roles or {}).get(rank),
            gone_t=(gone_t or {}).get(rank),
        )
    return ranks


def build_summary(host: str, status: int | None, exit_status: int, hang_ended: bool, ranks: dict[int, WatchedRank],
                  *, num_hangs: int, signatures: Mapping[str, int], bad_event_lines: int,
                  live_scan_complete: bool, live_scan_skipped_bytes: int) -> WatchSummary:
    return WatchSummary(
        host=host, end_t=time.time(), command_status=status, exit_status=exit_status,
        command_result=describe_exit(status), hang_ended_by_watch=hang_ended, num_hangs=num_hangs, ranks=ranks,
        signatures=dict(signatures), bad_event_lines=bad_event_lines, live_scan_complete=live_scan_complete,
        live_scan_skipped_bytes=live_scan_skipped_bytes,
    )


def summary_lines(summary: WatchSummary) -> list[str]:
    """How the job ended, every rank that did not end cleanly, the failures seen in the output."""
    # The exit status is stated once, in watch's last line: a job watch ended after a hang has no
    # status of its own worth a second number.
    lines = ["job ended by watch after the hang (--on-hang kill)" if summary.hang_ended_by_watch
             else f"job finished: {summary.command_result}"]
    for rank, info in summary.ranks.items():
        state = RankState(rank=rank, host=summary.host, step=info.step, open_phase=info.open_phase,
                          ended=info.ended, error=info.error, gone=info.gone)
        # watch notes a clean end as the rank "gone" ("ended (shutdown)"): nothing to point out either
        if not state.clean and not (info.ended in CLEAN_ENDS and not info.error and (info.gone or "").startswith("ended")):
            lines.append(f"  {state.line()}")  # worded as the report's Ranks table and `summary`
    for kind, count in summary.signatures.items():
        lines.append(f"  seen in the output: {kind} x{count}")
    if not summary.live_scan_complete:
        lines.append(f"  {summary.live_scan_skipped_bytes} bytes of output were not scanned live (the job "
                     "outran the scanner); the report scans the saved output")
    return lines
