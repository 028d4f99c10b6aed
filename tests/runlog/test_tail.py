"""watch's live tail and the report's read are two modes of the one decoder: the same records and the
same bad lines from the same damaged file, whether it is read at once or as it grows."""
from __future__ import annotations

import json

from grpo_doctor.runlog.columns import as_list
from grpo_doctor.runlog.decoder import RankFileTail, read_rank_file
from grpo_doctor.schema import PhaseBegin, PhaseEnd, Record, Step


def _lines() -> list[bytes]:
    common = dict(rank=3, host="node-1", pid=77, mono=1.0)
    good = [PhaseBegin(**common, step=0, t=10.0, phase="rollout", path="rollout"),
            PhaseEnd(**common, step=0, t=12.0, phase="rollout", path="rollout", duration_s=2.0, synced=True),
            Step(**common, step=0, t=12.5, metrics={"loss": 0.1})]
    lines = [json.dumps(r.to_dict()).encode() for r in good]
    wrong_type = json.loads(lines[0]) | {"t": "yesterday"}
    return [lines[0], b"\x00\x01garbage from a log collector", lines[1], json.dumps(wrong_type).encode(),
            b"{\"schema\": 1, \"kind\": \"step\"", lines[2]]


def test_tail_reads_what_the_report_reads_as_the_file_grows(tmp_path):
    path = tmp_path / "rank-00003.jsonl"
    path.write_bytes(b"")
    tail = RankFileTail(path)
    data = b"\n".join(_lines()) + b"\n"
    seen: list[Record] = []
    for cut in range(0, len(data), 37):  # appended in pieces that split lines anywhere
        with path.open("ab") as f:
            f.write(data[cut:cut + 37])
        seen += tail.read_records()
    report = read_rank_file(path)
    assert [type(r) for r in seen] == [PhaseBegin, PhaseEnd, Step] and seen[2:] == report.records
    assert seen[-1] == report.last_record
    phases = report.tabled().phases
    assert [as_list(phases[name]) for name in ("path", "begin_t", "end_t", "duration_s")] == [
        ["rollout"], [seen[0].t], [seen[1].t], [seen[1].duration_s]]
    assert tail.num_bad_lines == report.num_bad_lines == 3


def test_a_line_still_being_written_waits_for_its_newline(tmp_path):
    path = tmp_path / "rank-00003.jsonl"
    first, *_ = _lines()
    path.write_bytes(first[:20])
    tail = RankFileTail(path)
    assert tail.read_records() == []
    with path.open("ab") as f:
        f.write(first[20:] + b"\n")
    assert [type(r) for r in tail.read_records()] == [PhaseBegin]
    assert tail.num_bad_lines == 0
