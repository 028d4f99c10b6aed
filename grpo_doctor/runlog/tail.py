"""Following a growing rank file: the complete lines appended since the last look, for the
decoder's incremental mode (decoder.RankFileTail), with the line cap of the other modes.

`grpo-doctor watch` polls every rank file every second or so; a line still being written waits
for its newline, and garbage without newlines is dropped once it passes `MAX_LINE_BYTES`, one bad
line, as the report counts it. A look reads at most `MAX_READ_BYTES`, and never blocks: a rank
file is opened as the report opens it (lines.open_rank_file: a FIFO or a device under a rank
file's name is refused, not waited on). Inside such garbage (a 20 GB hole of NUL bytes a crash
left, a sparse file) the next look jumps to the latest part of the file, whose lines show where
the rank is now: the garbage is never read through.

Typical use:
    growing = GrowingFile(paths.rank_file(3))
    for line in growing.read_lines():   # new complete lines; garbage dropped counted in growing.num_dropped
        ...
"""
from __future__ import annotations

import os
from pathlib import Path

from grpo_doctor.runlog.lines import MAX_LINE_BYTES, READ_BLOCK_BYTES, open_rank_file

# At most this much is read per look, so a burst of output is taken in over a few polls.
MAX_READ_BYTES = 64 * READ_BLOCK_BYTES


class GrowingFile:
    """Reads the complete new lines of one growing rank file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""
        self.num_dropped = 0  # garbage dropped: lines of MAX_LINE_BYTES or more, each one bad line
        self.skipping = False  # inside a line of MAX_LINE_BYTES or more: what follows its newline is wanted

    def read_lines(self) -> list[bytes]:
        """The complete new lines that are not blank; at most two reads of MAX_READ_BYTES."""
        try:
            with open_rank_file(self.path) as f:
                lines = self._read(f)
                if self.skipping and not lines:  # garbage met in this look: on to the latest part now
                    lines = self._read(f)
        except OSError:
            return []
        return lines

    def _read(self, f) -> list[bytes]:
        if self.skipping:  # never read through garbage: on to the latest part of the file
            latest = os.fstat(f.fileno()).st_size - MAX_READ_BYTES
            if latest > self.offset:
                f.seek(latest - 1)
                self.offset = latest
                self.skipping = f.read(1) != b"\n"  # landed inside a line: it starts after its newline
        f.seek(self.offset)
        data = f.read(MAX_READ_BYTES)
        self.offset += len(data)
        if self.skipping:
            newline = data.find(b"\n")
            if newline < 0:
                return []
            self.skipping = False
            data = data[newline + 1:]
        if b"\n" not in data:
            if len(self.partial) + len(data) < MAX_LINE_BYTES:
                self.partial += data
            else:  # garbage without newlines: dropped, one bad line
                self.partial, self.skipping = b"", True
                self.num_dropped += 1
            return []
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        if len(self.partial) >= MAX_LINE_BYTES:  # garbage without newlines: dropped, one bad line
            self.partial, self.skipping = b"", True
            self.num_dropped += 1
        out = [line for line in lines if line and not line.isspace() and len(line) < MAX_LINE_BYTES]
        self.num_dropped += sum(1 for line in lines if len(line) >= MAX_LINE_BYTES)
        return out
