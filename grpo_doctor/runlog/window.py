"""Which bytes of a big rank file the report reads: the head and the latest part in full, the middle sampled.

A week of GRPO on 1,024 GPUs writes about 160 M records (40 GB): reading every line cannot answer
in minutes, and the report does not show every old record in full detail. So the run gets a read
budget (`RUN_BUDGET_BYTES`, shared by its rank files, never under `MIN_FILE_BUDGET_BYTES` a file).
A file within its share is read whole, exactly as before. A larger one is read as regions:
  - its head (the header, the first steps),
  - its last part, about 60 % of the share: the steps a hang, crash or straggler shows in, in full,
  - evenly spaced blocks of the middle (the rest of the share): a sample of the old steps' metrics,
    phases and memory, so trends over the whole run still draw, at a lower resolution.
Everything a rank writes at the end of an attempt (its error, its end record) is in the last part,
or, for an attempt that a restart ended in the middle, in the window around the restart's header,
which `restart_regions` adds when the pids read show a restart that no read header explains.

The cost therefore grows with the budget and the number of ranks, not with the history. The reader
(decoder.py) pairs phases only inside a region: `REGION_BREAK` between regions clears the
phases open so far, as the middle's unread lines may have closed them.

Typical use:
    plan = plan_read(path.stat().st_size, budget_bytes=8 * 2**20)
    for offset, line, complete in region_lines(path, plan):   # REGION_BREAK between regions
        ...
"""
from __future__ import annotations

import os
import re
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

from grpo_doctor.runlog.lines import READ_BLOCK_BYTES, open_rank_file, skip_holes

# The whole run's budget, about 300 k records of detail: what the report shows (the latest steps of
# every rank, trends over the run) fits in it; at 32 ranks a file gets 2 MB (about 600 steps in
# full), at 64 ranks 1 MB.
RUN_BUDGET_BYTES = 64 * 2**20
# A file's share never goes below this (the latest ~90 steps of 16 records in full, whatever the
# number of ranks): at 1,024 ranks the run reads 512 MB.
MIN_FILE_BUDGET_BYTES = 512 * 1024
HEAD_BYTES = 64 * 1024
TAIL_SHARE = 0.6
SAMPLE_BLOCK_BYTES = 16 * 1024
# Around a restart found in the middle: the end of the attempt before it (its error, its end record).
RESTART_WINDOW_BYTES = 256 * 1024
# How far back from the last part a restart's header is looked for, in multiples of the bytes a
# file's plan reads (at 512 KB, the last 16 MB before it).
RESTART_SEARCH_SHARES = 32
# Between regions in `region_lines`' output; compared by identity, never a line of a file.
REGION_BREAK = bytes(bytearray(b"\0region-break"))
# In `region_lines`' output where a region was given up: no newline within the line cap (garbage, a
# hole of NUL bytes), or its last line not finished within the file's allowance. Compared by identity.
DAMAGED_REGION = bytes(bytearray(b"\0damaged-region"))


@dataclass(frozen=True)
class ReadPlan:
    """Byte ranges [start, end) of a file to read, in order and apart; a range is widened to whole
    lines when read."""

    size_bytes: int
    regions: tuple[tuple[int, int], ...]

    @property
    def whole(self) -> bool:
        return self.regions == ((0, self.size_bytes),)

    @property
    def planned_bytes(self) -> int:
        return sum(end - start for start, end in self.regions)

    def with_regions(self, extra: list[tuple[int, int]]) -> ReadPlan:
        return ReadPlan(self.size_bytes, _merged([*self.regions, *extra], self.size_bytes))


def file_budget_bytes(num_files: int, run_budget_bytes: int = RUN_BUDGET_BYTES) -> int:
    return max(MIN_FILE_BUDGET_BYTES, run_budget_bytes // max(num_files, 1))


def plan_read(size_bytes: int, budget_bytes: int | None) -> ReadPlan:
    """The whole file when it fits `budget_bytes` (or there is no budget), else head, samples, tail."""
    if budget_bytes is None or size_bytes <= budget_bytes:
        return ReadPlan(size_bytes, ((0, size_bytes),))
    tail_bytes = int(budget_bytes * TAIL_SHARE)
    tail_start = size_bytes - tail_bytes
    regions = [(0, HEAD_BYTES), (tail_start, size_bytes)]
    num_samples = max(0, (budget_bytes - tail_bytes - HEAD_BYTES) // SAMPLE_BLOCK_BYTES)
    middle = tail_start - HEAD_BYTES
    for i in range(num_samples):
        start = HEAD_BYTES + (i + 1) * middle // (num_samples + 1) - SAMPLE_BLOCK_BYTES // 2
        regions.append((start, start + SAMPLE_BLOCK_BYTES))
    return ReadPlan(size_bytes, _merged(regions, size_bytes))


def _merged(regions: list[tuple[int, int]], size_bytes: int) -> tuple[tuple[int, int], ...]:
    out: list[list[int]] = []
    for start, end in sorted((max(0, s), min(size_bytes, e)) for s, e in regions):
        if end <= start:
            continue
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return tuple((s, e) for s, e in out)


def prefetch(path: Path, plan: ReadPlan) -> None:
    """Ask the kernel to start reading the plan's regions now (POSIX_FADV_WILLNEED), so that on a cold
    disk the reads of every file of a run are in flight together instead of one seek at a time;
    nothing where the platform has no posix_fadvise."""
    if not hasattr(os, "posix_fadvise"):
        return
    try:
        f = open_rank_file(path)  # never a blocking open: a FIFO may have taken the file's name
    except OSError:
        return  # reading it will say why
    with f:
        try:
            for start, end in plan.regions:
                os.posix_fadvise(f.fileno(), start, end - start, os.POSIX_FADV_WILLNEED)
        except OSError:
            pass


def region_lines(path: Path, plan: ReadPlan, max_line_bytes: int) -> Iterator[tuple[int, bytes, bool]]:
    """(byte offset of the line + 1, line without its newline, ended with a newline) for the lines
    of each region, `REGION_BREAK` between regions. A region starting inside a line begins after
    it; one ending inside a line finishes it. Blank lines are skipped, an overlong one ending inside
    its region is yielded empty (one bad line, as `lines_of` counts it).

    The bytes read are bounded by the plan, whatever the file holds (a sparse 50 GB file of NUL
    bytes, garbage without newlines): past a region's end only its last line is finished, with at
    most `max_line_bytes` for it and the plan's bytes for the whole file (at most twice the plan is
    read). A region given up (a line without newline running past the region or the cap, a region
    start with no newline within the cap) yields `DAMAGED_REGION` once, never a line; the holes of
    a sparse file are seeked over while looking for a newline.
    """
    allowance = [plan.planned_bytes]  # for reading past the regions' ends, spent by _lines_between
    with open_rank_file(path) as f:
        done = 0  # where the previous region's reading stopped
        for start, end in plan.regions:
            if end <= done:
                continue
            if start > done:  # lines in between go unread: what was open may have closed there
                if done:
                    yield 0, REGION_BREAK, True
            else:
                start = done
            if start > 0:
                f.seek(start - 1)
                if f.read(1) != b"\n":  # inside a line: the region's lines begin after it
                    found, scanned = _next_line_start(f, start, end)
                    if scanned >= max_line_bytes:  # no newline within the cap: garbage or a hole
                        yield start + 1, DAMAGED_REGION, True
                    if found is None:
                        done = end
                        continue
                    start = found
            f.seek(start)
            done = yield from _lines_between(f, start, end, max_line_bytes, allowance)


def _next_line_start(f, start: int, end: int) -> tuple[int | None, int]:
    """Where the first line starting in [start, end) starts (None: none does), and how many bytes
    were passed over without a newline; read one block at a time, holes seeked over."""
    offset = start
    while offset < end:
        data_at = skip_holes(f, offset)
        if data_at >= end:
            return None, end - start
        if data_at != offset:
            offset = data_at
            f.seek(offset)
        block = f.read(min(READ_BLOCK_BYTES, end - offset))
        if not block:
            break
        newline = block.find(b"\n")
        if newline >= 0:
            return offset + newline + 1, offset + newline - start
        offset += len(block)
    return None, offset - start


def _lines_between(f, start: int, end: int, max_line_bytes: int,
                   allowance: list[int]) -> Generator[tuple[int, bytes, bool], None, int]:
    """The lines starting in [start, end), the last finished past `end` within `allowance[0]`
    bytes (spent here); returns where the reading stopped."""
    offset = line_start = start  # offset: bytes read so far; line_start: where the line being read begins
    parts: list[bytes] = []  # the line being read, across blocks, held below the cap
    held = 0
    skipping = False  # inside a line of max_line_bytes or more: its bytes are not held, nor all read
    while offset < end:
        if skipping:  # a hole reads as NUL bytes, never a newline
            data_at = skip_holes(f, offset)
            if data_at != offset:
                offset = min(data_at, end)
                f.seek(offset)
                if offset >= end:
                    break
        block = f.read(min(READ_BLOCK_BYTES, end - offset))
        if not block:
            break
        block_start = offset
        offset += len(block)
        newline = block.find(b"\n")
        if newline < 0:
            if not skipping:
                parts.append(block)
                held += len(block)
                if held >= max_line_bytes:  # garbage without newlines: read past, not held
                    skipping, parts, held = True, [], 0
            continue
        if skipping:  # the overlong line ends here: one bad line
            yield line_start + 1, b"", True
            skipping = False
            line_start = block_start + newline + 1
            block = block[newline + 1:]
            lines = block.split(b"\n")
        else:
            lines = block.split(b"\n")
            if parts:
                parts.append(lines[0])
                lines[0] = b"".join(parts)
                parts, held = [], 0
        rest = lines.pop()
        for line in lines:
            if line and not line.isspace():
                yield line_start + 1, (b"" if len(line) >= max_line_bytes else line), True
            line_start += len(line) + 1
        if rest:
            if len(rest) >= max_line_bytes:
                skipping = True
            else:
                parts, held = [rest], len(rest)
    if skipping:  # an overlong line runs past the region: given up, not read to its end
        yield line_start + 1, DAMAGED_REGION, True
        return offset
    if not parts:
        return offset
    # The region ended inside a line: finish it, within the cap and the file's allowance.
    limit = min(max_line_bytes - held, allowance[0])
    read = 0
    while read < limit:
        block = f.read(min(READ_BLOCK_BYTES, limit - read))
        if not block:  # the end of the file: the process died while writing its last line
            line = b"".join(parts)
            allowance[0] -= read
            if not line.isspace():
                yield line_start + 1, line, False
            return offset + read
        newline = block.find(b"\n")
        if newline >= 0:
            parts.append(block[:newline])
            read += newline + 1
            allowance[0] -= read
            line = b"".join(parts)
            if not line.isspace():
                yield line_start + 1, line, True
            return offset + read
        parts.append(block)
        read += len(block)
    allowance[0] -= read
    yield line_start + 1, DAMAGED_REGION, True  # no newline within the cap or the allowance: given up
    return offset + read


# As the sink writes it, and as a JSON writer with spaces would.
_HEADER_KIND = re.compile(rb'"kind":\s*"header"')
_HEADER_KIND_MAX_BYTES = 32


def last_header_offset(path: Path, before: int, max_back_bytes: int) -> int | None:
    """Where the last header line before `before` starts, searched backwards over at most
    `max_back_bytes` (a restart's header in the unread middle); None when there is none there. The
    holes of a sparse file are passed over unread."""
    lowest = max(0, before - max_back_bytes)
    with open_rank_file(path) as f:
        end = before
        while end > lowest:
            start = max(lowest, end - 8 * READ_BLOCK_BYTES)
            if skip_holes(f, start) >= end:  # nothing but a hole here
                end = start
                continue
            f.seek(start)
            block = f.read(end - start + _HEADER_KIND_MAX_BYTES)
            at = max((m.start() for m in _HEADER_KIND.finditer(block)), default=-1)
            if at >= 0:
                return _line_start(f, start + at, lowest)
            end = start
    return None


def _line_start(f, at: int, lowest: int) -> int | None:
    """Where the line holding byte `at` starts: after the newline before it, found no lower than
    `lowest` (the file's first line starts at 0)."""
    end = at
    while end > lowest:
        start = max(lowest, end - READ_BLOCK_BYTES)
        if skip_holes(f, start) >= end:  # a hole holds no newline
            end = start
            continue
        f.seek(start)
        newline = f.read(end - start).rfind(b"\n")
        if newline >= 0:
            return start + newline + 1
        end = start
    return 0 if lowest == 0 else None


def restart_regions(path: Path, plan: ReadPlan) -> list[tuple[int, int]]:
    """The window around the last header in the middle of the file (see the module doc), looked for
    no further back than RESTART_SEARCH_SHARES x the bytes planned: the search must not cost what
    the window saves."""
    tail_start = plan.regions[-1][0]
    at = last_header_offset(path, tail_start, RESTART_SEARCH_SHARES * plan.planned_bytes)
    if at is None or at < HEAD_BYTES:
        return []
    return [(at - RESTART_WINDOW_BYTES, at + RESTART_WINDOW_BYTES)]


def sampled_files_warning(run) -> list[str]:
    """One line for all the rank files read by window (a `RunLog`'s), none when every line was read."""
    sampled = [log for log in run.ranks.values() if log.sampled]
    if not sampled:
        return []
    plans = [log.tables.read_plan for log in sampled if log.tables is not None and log.tables.read_plan is not None]
    total = sum(plan.size_bytes for plan in plans)
    read = sum(plan.planned_bytes for plan in plans)
    return [f"{len(sampled)} rank file(s), {total / 2**20:,.0f} MB, are larger than their share of the read budget: "
            f"read by window, {read / 2**20:,.0f} MB (the head, the latest steps in full, samples of the middle); "
            "older steps are shown at a lower resolution. Pass --full-read to read every line"]
