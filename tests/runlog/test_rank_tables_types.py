"""A tabled record (phase, memory) with a field of the wrong type is a bad line, as for any other kind.

The decoder judges every line against its kind's declaration before it goes into columns or
becomes a record, so the whole-file and incremental modes count the same bad lines and the tables
hold only values of their declared types.
"""
import json

import pytest

from grpo_doctor.runlog.decoder import RankFileTail, read_rank_file
from grpo_doctor.schema import Memory, PhaseBegin, PhaseEnd

COMMON = dict(rank=0, host="node-0", pid=7, step=3, t=100.0, mono=5.0)
GOOD = [PhaseBegin(**COMMON, phase="rollout", path="rollout"),
        Memory(**COMMON, tag="step", host_rss_bytes=2**30),
        PhaseEnd(**COMMON, phase="rollout", path="rollout", duration_s=1.5, synced=False)]


@pytest.mark.parametrize("index, field, value", [
    (0, "path", 7), (0, "phase", None), (2, "duration_s", "1.5"), (2, "synced", "yes"), (2, "error", [1]),
    (1, "host_rss_bytes", "1G"), (1, "tag", {"a": 1}), (1, "pid", "seven"), (1, "device", 1.5),
])
def test_a_wrong_typed_tabled_field_is_one_bad_line_in_every_mode(tmp_path, index, field, value):
    lines = [r.to_dict() for r in GOOD] * 3
    lines[3 + index] = {**lines[3 + index], field: value}
    path = tmp_path / "rank-00000.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    tail, tabled = RankFileTail(path), read_rank_file(path)
    assert len(tail.read_records()) == len(lines) - 1 and tail.num_bad_lines == tabled.num_bad_lines == 1
    assert tabled.first_bad_line == 4 + index
    assert field in tabled.first_bad_reason
    assert all(type(pid) is int for pid in tabled.pids)
