"""watch's live scan of the job's output, off the path that forwards it.

The tee threads forward and save every byte at the job's own rate; the scan of those bytes for
failure signatures runs here, on its own thread, behind a bounded backlog. A job whose output
outruns the scanner (hundreds of MB/s, or every line an NCCL WARN, which each need a parse) is
never slowed: past `max_backlog_bytes` a run of lines is left unscanned and counted, and the
report later scans the saved output in full instead (`complete` is False in summary.json).

Repeats are aggregated: the first `samples_per_key` signatures of each (kind, rank) (of each
(kind, text) where the line names no rank) go to signatures.jsonl in full, at most `max_kept` in
all; later ones are only counted (`counts`), so memory and disk stay bounded by the number of
distinct signatures, not the number of lines.

What the job prints once watch has signalled it (`end_of_job`: --on-hang kill, watch's own SIGTERM)
is watch's doing, not evidence: torchrun's SignalException traceback would otherwise become a
`worker-died` and a `python-traceback` in the report. A mark is queued with the output at that
moment, so lines printed before it are still scanned as evidence; the signatures after it are only
counted (`after_end_counts`). Bytes the job wrote just before the signal but that the tee had not
read yet fall after the mark: a window of one pipe read.

Typical use:
    scan = LiveScan(sup_dir / "signatures.jsonl", write=guarded_write, note=console.note)
    scan.start(); tee = OutputTee(..., on_lines=scan.submit); ...; scan.stop(timeout_s=5)
"""
from __future__ import annotations

import collections
import json
import threading
from collections.abc import Callable
from pathlib import Path

from grpo_doctor.logs.signatures import LineScanner, Signature

# Kinds said on the terminal the first time each rank shows them.
NOTED_KINDS = ("cuda-oom", "nccl-timeout", "nccl-error", "rendezvous-failure", "child-failed", "host-oom", "python-traceback")


class LiveScan:
    def __init__(self, out_path: Path, *, write: Callable[[str, Callable[[], None]], bool],
                 note: Callable[[str], None], max_backlog_bytes: int = 64 * 2**20, samples_per_key: int = 20,
                 max_kept: int = 10_000) -> None:
        self.out_path = out_path
        self._write = write  # (what, fn) -> bool: runs fn, a failure said once (watch._record_write)
        self._note = note
        self._max_backlog_bytes = max_backlog_bytes
        self._samples_per_key = samples_per_key
        self._max_kept = max_kept
        self._scanner = LineScanner()
        self._queue: collections.deque[bytes | None] = collections.deque()  # None: watch signalled the job
        self._backlog_bytes = 0
        self._cond = threading.Condition()
        self._stopping = False
        self._ending = False  # after watch signals the job, its tracebacks are watch's doing: not noted
        self._after_mark = False  # the scan reached the output printed after watch's signal
        self._noted: set[tuple] = set()
        self.kept: list[Signature] = []  # the samples written
        self.counts: dict[str, int] = {}  # kind -> every signature seen before watch signalled the job
        self.after_end_counts: dict[str, int] = {}  # kind -> signatures in the job's output after that
        self._per_key: collections.Counter[tuple] = collections.Counter()
        self.skipped_bytes = 0
        self._thread = threading.Thread(target=self._run, name="grpo-doctor-live-scan", daemon=True)

    @property
    def complete(self) -> bool:
        """Every byte of output was scanned."""
        return self.skipped_bytes == 0

    def start(self) -> None:
        self._thread.start()

    def submit(self, lines: bytes) -> None:
        """Whole lines of output (called by the tee threads; never blocks them)."""
        with self._cond:
            if self._backlog_bytes + len(lines) > self._max_backlog_bytes:
                self.skipped_bytes += len(lines)
                return
            self._queue.append(lines)
            self._backlog_bytes += len(lines)
            self._cond.notify()

    def end_of_job(self) -> None:
        """watch is signalling the job now: what it prints from here on is not evidence."""
        with self._cond:
            if not self._ending:
                self._queue.append(None)
                self._cond.notify()
            self._ending = True

    def stop(self, timeout_s: float) -> bool:
        """Scans what is queued (within `timeout_s`), finishes what is open; True when all was scanned."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join(timeout=timeout_s)
        if self._thread.is_alive():
            with self._cond:  # the rest is left to the report, which scans the saved output
                self.skipped_bytes += self._backlog_bytes
                self._queue.clear()
            return False
        self._record(self._scanner.close())
        return True

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stopping:
                    self._cond.wait()
                if not self._queue:
                    return
                lines = self._queue.popleft()
                if lines is None:
                    self._after_mark = True
                    continue
                self._backlog_bytes -= len(lines)
            found: list[Signature] = []
            try:
                self._scanner.feed_chunk(lines, found)
                self._record(found)
            except Exception:  # noqa: BLE001 - a scanner bug costs signatures, never the job's output
                self.skipped_bytes += len(lines)

    def _record(self, found: list[Signature]) -> None:
        if self._after_mark:
            for sig in found:
                self.after_end_counts[sig.kind] = self.after_end_counts.get(sig.kind, 0) + 1
            return
        fresh = []
        for sig in found:
            self.counts[sig.kind] = self.counts.get(sig.kind, 0) + 1
            key = (sig.kind, sig.rank) if sig.rank is not None else (sig.kind, None, sig.text[:200])
            self._per_key[key] += 1
            if self._per_key[key] <= self._samples_per_key and len(self.kept) + len(fresh) < self._max_kept:
                fresh.append(sig)
            if sig.kind in NOTED_KINDS and key[:2] not in self._noted and not self._ending:
                self._noted.add(key[:2])
                who = f"rank {sig.rank}: " if sig.rank is not None else ""
                self._note(f"seen {sig.kind}: {who}{sig.text.strip()[:200]}")
        if fresh:
            self.kept.extend(fresh)
            self._write(self.out_path.name, lambda: self._append(fresh))

    def _append(self, found: list[Signature]) -> None:
        with self.out_path.open("a") as f:
            f.write("".join(json.dumps(sig.to_dict(), default=str) + "\n" for sig in found))
