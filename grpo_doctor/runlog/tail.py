"""Following rank files as they grow: the records appended since the last look, decoded and
checked exactly as the report's reader (eventlog.py) decodes and checks them, with its line cap.

`grpo-doctor watch` polls every rank file every second or so; a line still being written waits
for its newline, and garbage without newlines is dropped once it passes `MAX_LINE_BYTES`, one bad
line, as the report counts it.

Typical use:
    tail = RankFileTail(paths.rank_file(3))
    for record in tail.read_records():   # new complete records; bad lines counted in tail.num_bad_lines
        ...
"""
from __future__ import annotations

from pathlib import Path

from grpo_doctor.runlog.decode import checked_record, decode_line
from grpo_doctor.runlog.lines import MAX_LINE_BYTES, READ_BLOCK_BYTES
from grpo_doctor.schema import BadRecord, Record

# At most this much is read per look, so a burst of output is taken in over a few polls.
MAX_READ_BYTES = 64 * READ_BLOCK_BYTES


class RankFileTail:
    """Reads the complete new lines of one growing rank file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""
        self.num_bad_lines = 0

    def read_lines(self) -> list[bytes]:
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read(MAX_READ_BYTES)
        except OSError:
            return []
        self.offset += len(data)
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        if len(self.partial) >= MAX_LINE_BYTES:  # garbage without newlines: dropped, one bad line
            self.partial = b""
            self.num_bad_lines += 1
        return [line for line in lines if line and not line.isspace()]

    def read_records(self) -> list[Record]:
        """The new records; lines that are no record (or of a kind this version does not know) are
        skipped, the bad ones counted."""
        records = []
        for line in self.read_lines():
            if len(line) >= MAX_LINE_BYTES:
                self.num_bad_lines += 1
                continue
            try:
                record = checked_record(decode_line(line))
            except (ValueError, TypeError, BadRecord):
                self.num_bad_lines += 1
                continue
            if isinstance(record, Record):
                records.append(record)
        return records
