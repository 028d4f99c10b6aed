"""Big rank files read by window: the latest steps exactly as a full read gives them, the middle
sampled, a restart in the unread middle still found, and the user told."""
from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import run_rules
from grpo_doctor.runlog.decoder import read_rank_file, record_from_dict
from grpo_doctor.runlog.lines import MAX_LINE_BYTES, lines_of
from grpo_doctor.runlog.window import (
    DAMAGED_REGION,
    REGION_BREAK,
    ReadPlan,
    last_header_offset,
    plan_read,
    region_lines,
)
from grpo_doctor.schema import Error, RunPaths

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_report import PHASES, STRAGGLER_RANK, write_run  # noqa: E402  (the benchmark's realistic run)

BUDGET_BYTES = 1 << 20


@pytest.fixture(scope="module")
def big_run(tmp_path_factory) -> Path:
    """40 ranks x 1,200 steps (the straggler is rank 37): 1.9 MB a file, over a 1 MB share."""
    run_dir = tmp_path_factory.mktemp("big") / "run"
    write_run(run_dir, 40, 1200)
    return run_dir


def test_region_lines_yield_whole_lines_only(tmp_path):
    rng = random.Random(3)
    lines = [b"x" * rng.randint(1, 900) + str(i).encode() for i in range(5000)]
    path = tmp_path / "f"
    path.write_bytes(b"\n".join(lines) + b"\n")
    data = path.read_bytes()
    whole = plan_read(len(data), None)
    assert [line for _, line, _ in region_lines(path, whole, MAX_LINE_BYTES)] == [
        line for _, line, _ in lines_of(path)]
    plan = plan_read(len(data), 1_200_000)
    assert not plan.whole and len(plan.regions) > 3
    got = [(offset, line) for offset, line, _ in region_lines(path, plan, MAX_LINE_BYTES) if line is not REGION_BREAK]
    for offset, line in got:  # each starts a line of the file and is all of it
        assert offset == 1 or data[offset - 2:offset - 1] == b"\n"
        assert data[offset - 1:offset - 1 + len(line) + 1] == line + b"\n"
    assert len({offset for offset, _ in got}) == len(got)
    assert got[0][1] == lines[0] and got[-1][1] == lines[-1]
    assert len(got) < len(lines)


def test_latest_steps_are_read_exactly_as_a_full_read_gives_them(big_run):
    path = RunPaths(big_run).rank_file(STRAGGLER_RANK)
    full = read_rank_file(path)
    windowed = read_rank_file(path, budget_bytes=BUDGET_BYTES)
    assert windowed.sampled and not full.sampled
    assert windowed.header == full.header and windowed.end == full.end
    assert windowed.last_step == full.last_step == 1199
    assert windowed.last_record == full.last_record
    full_ends = list(full.tables.phases["end_t"])
    windowed_ends = list(windowed.tables.phases["end_t"])
    latest = windowed_ends[-len(PHASES) * 100:]  # the last 100 steps' phases, value for value
    assert latest == full_ends[-len(latest):]
    assert len(windowed_ends) < len(full_ends) / 2
    assert set(windowed_ends) <= set(full_ends)  # a phase is paired only inside a region: none made up


def test_windowed_report_finds_what_the_full_read_finds(big_run):
    full = load_evidence([big_run], read_budget_bytes=None)
    windowed = load_evidence([big_run], read_budget_bytes=40 * BUDGET_BYTES)
    assert not any("read by window" in w for w in full.warnings)
    [said] = [w for w in windowed.warnings if "read by window" in w]
    assert "40 rank file(s)" in said and "--full-read" in said
    assert len(windowed.phases) < len(full.phases) / 2
    assert set(windowed.steps["step"]) <= set(full.steps["step"])
    found_full, found_windowed = run_rules(full)[0], run_rules(windowed)[0]
    assert {(f.id, tuple(f.ranks)) for f in found_full} == {(f.id, tuple(f.ranks)) for f in found_windowed}
    assert any(f.id == "straggler" and tuple(f.ranks) == (STRAGGLER_RANK,) for f in found_windowed)


def test_a_restart_in_the_unread_middle_is_found(tmp_path):
    """Two attempts; the first ends in an error, a third of the way in. The windowed read still knows
    the latest attempt's header and the first attempt's error."""
    run_dir = tmp_path / "run"
    write_run(run_dir, 1, 1500)
    path = RunPaths(run_dir).rank_file(0)
    lines = path.read_bytes().splitlines(keepends=True)
    cut = len(lines) // 3
    first_header = record_from_dict(json.loads(lines[0]))
    last = json.loads(lines[cut - 1])
    error = Error(rank=0, host=last["host"], pid=last["pid"], step=last["step"], t=last["t"], mono=last["mono"],
                  exc_type="RuntimeError", message="NCCL communicator was aborted", traceback="", phase="rollout",
                  path="rollout")
    restart = first_header.to_dict() | {"pid": 51_000, "t": last["t"] + 30.0, "mono": last["mono"] + 30.0}
    later = [json.dumps(json.loads(line) | {"pid": 51_000}).encode() + b"\n" for line in lines[cut:]]
    path.write_bytes(b"".join([*lines[:cut], json.dumps(error.to_dict()).encode() + b"\n",
                               json.dumps(restart).encode() + b"\n", *later]))
    full = read_rank_file(path)
    windowed = read_rank_file(path, budget_bytes=BUDGET_BYTES)
    assert windowed.sampled
    assert windowed.header == full.header and windowed.header.pid == 51_000
    assert [e.message for e in windowed.records if isinstance(e, Error)] == ["NCCL communicator was aborted"]
    assert windowed.errors == full.errors == []  # the latest attempt's: none
    assert windowed.end == full.end


def test_report_says_it_read_by_window_and_full_read_reads_every_line(big_run, tmp_path, capsys):
    from grpo_doctor.cli.main import main

    assert main(["report", str(big_run), "--out", str(tmp_path / "windowed"), "--json"]) == 0
    windowed = json.loads(capsys.readouterr().out)
    assert main(["report", str(big_run), "--out", str(tmp_path / "full"), "--json", "--full-read"]) == 0
    full = json.loads(capsys.readouterr().out)
    assert any("read by window" in w and "--full-read" in w for w in windowed["warnings"])
    assert not any("read by window" in w for w in full["warnings"])
    assert [(f["id"], f["ranks"]) for f in windowed["findings"]] == [(f["id"], f["ranks"]) for f in full["findings"]]


def test_an_overlong_line_in_a_region_loses_no_line_after_it(tmp_path):
    path = tmp_path / "f"
    later = [f"line{i}".encode() for i in range(5)]
    path.write_bytes(b"x" * 300_000 + b"\n" + b"\n".join(later) + b"\n")
    size = path.stat().st_size
    got = list(region_lines(path, ReadPlan(size, ((0, size),)), 100_000))
    assert got[0] == (1, b"", True)  # one bad line, as lines_of counts it
    assert [line for _, line, _ in got[1:]] == later
    cut_inside = list(region_lines(path, ReadPlan(size, ((0, 1000),)), 100_000))
    assert cut_inside == [(1, DAMAGED_REGION, True)]  # given up, not "the process died mid-write"
    assert cut_inside[0][1] is DAMAGED_REGION


def test_a_header_with_no_newline_before_it_ends_the_search(tmp_path):
    """Zeros a crash left, then a restart's header: the backward search ends (it once looped for ever)."""
    run_dir = tmp_path / "run"
    write_run(run_dir, 1, 1500)
    path = RunPaths(run_dir).rank_file(0)
    lines = path.read_bytes().splitlines(keepends=True)
    cut = len(lines) // 3
    header = json.loads(lines[0]) | {"pid": 51_000}
    later = [json.dumps(json.loads(line) | {"pid": 51_000}).encode() + b"\n" for line in lines[cut:]]
    path.write_bytes(b"".join([*lines[:cut], b"\0" * 3_000_000, json.dumps(header).encode() + b"\n", *later]))
    assert last_header_offset(path, path.stat().st_size, 64 * 2**20) is not None
    log, full = read_rank_file(path, budget_bytes=BUDGET_BYTES), read_rank_file(path)
    assert log.sampled and log.last_step == full.last_step == 1499
    assert log.header == full.header  # the zeros and the header are one garbage line to both
