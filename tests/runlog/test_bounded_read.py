"""Rank files built to make the reader hang or read for minutes: sparse files of NUL bytes (50 GB
made by truncate, a 20 GB hole after the header), FIFOs and devices under a rank file's name. The
read stays within the window plan's bytes, and what can be read (the lines after the hole) is read."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from helpers import write_rank

from grpo_doctor.runlog.decoder import RankFileTail, read_rank_file
from grpo_doctor.runlog.eventlog import load_run
from grpo_doctor.runlog.lines import MAX_LINE_BYTES, NotRegularFile, lines_of, open_rank_file
from grpo_doctor.runlog.parallel_read import read_run
from grpo_doctor.runlog.tail import MAX_READ_BYTES
from grpo_doctor.schema import Header, RunPaths, Step

GB = 2**30
BUDGET_BYTES = 2**20
NUM_LATE_STEPS = 50


def _common(step=0, t=100.0):
    return dict(rank=0, host="node-0", pid=1000, step=step, t=t, mono=t)


def _header() -> Header:
    return Header(**_common(), local_rank=0, world_size=1, node_rank=0, local_world_size=1, gpu_uuid=None,
                  versions={}, launch={}, argv=[])


def _line(record) -> bytes:
    return json.dumps(record.to_dict()).encode() + b"\n"


def _sparse_or_skip(path: Path) -> None:
    """Skips where the file system stores a hole as data (a 50 GB file would fill the disk)."""
    if os.stat(path).st_blocks * 512 > 64 * 2**20:
        os.unlink(path)
        pytest.skip("this file system does not keep sparse files sparse")


def zeros_run(base: Path) -> Path:
    """A rank file of 50 GB of NUL bytes, no newline anywhere: what `truncate -s 50G` makes."""
    path = RunPaths(base / "zeros").rank_file(0)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")
    os.truncate(path, 50 * GB)
    _sparse_or_skip(path)
    return base / "zeros"


def hole_run(base: Path, hole_bytes: int = 20 * GB) -> Path:
    """A header, a hole of `hole_bytes` NUL bytes (no newline in it), then valid steps at the end."""
    path = RunPaths(base / "hole").rank_file(0)
    path.parent.mkdir(parents=True)
    with path.open("wb") as f:
        f.write(_line(_header()))
        f.seek(hole_bytes, os.SEEK_CUR)
        f.write(b"\n")  # the hole ends one line: one bad line, the lines after it are whole
        for step in range(1, NUM_LATE_STEPS + 1):
            f.write(_line(Step(**_common(step, 100.0 + step), metrics={"loss": 1.0})))
    _sparse_or_skip(path)
    return base / "hole"


def _bytes_read() -> int:
    return psutil.Process().io_counters().read_chars


@pytest.mark.timeout(20)
def test_a_sparse_50_gb_rank_file_is_read_within_its_plan(tmp_path):
    path = RunPaths(zeros_run(tmp_path)).rank_file(0)
    before = _bytes_read()
    log = read_rank_file(path, budget_bytes=BUDGET_BYTES)
    read = _bytes_read() - before
    assert log.sampled and log.last_record is None and log.num_damaged_regions >= 1
    assert read < 6 * BUDGET_BYTES  # the plan, its allowance for finishing lines, read twice at most


@pytest.mark.timeout(20)
def test_the_lines_after_a_20_gb_hole_are_read_and_the_hole_said_once(tmp_path):
    run_dir = hole_run(tmp_path)
    before = _bytes_read()
    run = read_run([run_dir], run_budget_bytes=BUDGET_BYTES)
    assert _bytes_read() - before < 6 * BUDGET_BYTES
    log = run.ranks[0]
    assert log.header is not None and log.last_step == NUM_LATE_STEPS
    assert log.num_damaged_regions >= 1
    damaged = [w for w in run.warnings if "no newline within" in w]
    assert len(damaged) == 1 and "rank-00000.jsonl" in damaged[0] and "the rest of the file was read" in damaged[0]


@pytest.mark.timeout(20)
def test_a_full_read_seeks_over_a_hole_instead_of_reading_it(tmp_path):
    run_dir = hole_run(tmp_path)
    path = RunPaths(run_dir).rank_file(0)
    with open_rank_file(path) as f:
        if os.lseek(f.fileno(), 0, os.SEEK_DATA) != 0 or os.lseek(f.fileno(), 4096, os.SEEK_DATA) < GB:
            pytest.skip("SEEK_DATA does not find the holes on this file system")
    before = _bytes_read()
    log = read_rank_file(path)  # --full-read: every line
    assert _bytes_read() - before < 4 * MAX_LINE_BYTES
    assert not log.sampled and log.last_step == NUM_LATE_STEPS and log.num_bad_lines == 1


def _cli(*args: str, timeout_s: float) -> subprocess.CompletedProcess:
    """The command line in a process of its own, killed (TimeoutExpired) past `timeout_s`."""
    return subprocess.run([sys.executable, "-m", "grpo_doctor.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout_s)


@pytest.mark.timeout(40)
@pytest.mark.parametrize("make_run", [zeros_run, hole_run], ids=["50-gb-of-zeros", "20-gb-hole"])
def test_summary_answers_in_seconds_on_sparse_rank_files(tmp_path, make_run):
    run_dir = make_run(tmp_path)
    done = _cli("summary", str(run_dir), "--json", timeout_s=25)
    assert done.returncode in (0, 1), done.stderr
    rows = json.loads(done.stdout)["ranks"]
    assert [r["last_step"] for r in rows] == ([NUM_LATE_STEPS] if run_dir.name == "hole" else [])


@pytest.mark.timeout(40)
@pytest.mark.parametrize("make_run", [zeros_run, hole_run], ids=["50-gb-of-zeros", "20-gb-hole"])
def test_report_answers_in_seconds_on_sparse_rank_files(tmp_path, make_run):
    run_dir = make_run(tmp_path)
    done = _cli("report", str(run_dir), "--out", str(tmp_path / "out"), "--json", timeout_s=25)
    assert done.returncode in (0, 1, 3), done.stderr  # 3: the zeros hold nothing to check
    warnings = json.loads(done.stdout)["warnings"]
    assert sum("no newline within" in w for w in warnings) == 1


@pytest.mark.timeout(20)
def test_watch_tail_reaches_the_lines_after_a_20_gb_hole_in_a_few_looks(tmp_path):
    path = RunPaths(hole_run(tmp_path)).rank_file(0)
    tail = RankFileTail(path)
    seen, before = [], _bytes_read()
    for _ in range(4):
        seen += tail.read_records()
    assert _bytes_read() - before < 8 * MAX_READ_BYTES
    assert [type(r) for r in seen][0] is Header
    assert [r.step for r in seen if isinstance(r, Step)] == list(range(1, NUM_LATE_STEPS + 1))
    assert tail.num_bad_lines == 1


def _special_files(ranks: Path) -> list[str]:
    """A FIFO, /dev/zero's device numbers (where this user may make a device), a symlink loop and a
    directory, under rank files' names; the kinds a warning must name."""
    ranks.mkdir(parents=True, exist_ok=True)
    os.mkfifo(ranks / "rank-00001.jsonl")
    (ranks / "rank-00002.jsonl").mkdir()
    os.symlink(ranks / "rank-00003.jsonl", ranks / "rank-00003.jsonl")
    kinds = ["a FIFO", "a directory", "symbolic links"]
    try:
        os.mknod(ranks / "rank-00004.jsonl", 0o600 | __import__("stat").S_IFCHR, os.makedev(1, 5))
        kinds.append("a character device")
    except PermissionError:
        pass
    return kinds


@pytest.mark.timeout(20)
def test_what_is_no_regular_file_is_skipped_with_one_warning_each_never_opened_blocking(tmp_path):
    write_rank(tmp_path, 0, [_header()])
    kinds = _special_files(RunPaths(tmp_path).ranks)
    run = read_run([tmp_path])
    assert sorted(run.ranks) == [0]
    for kind in kinds:
        assert sum(kind in w for w in run.warnings) == 1, (kind, run.warnings)


@pytest.mark.timeout(20)
def test_the_reader_judges_the_opened_file_not_a_stat_of_its_path(tmp_path, monkeypatch):
    """A FIFO or device swapped in after the listing was checked: the read refuses it, never blocks."""
    import stat

    from grpo_doctor.runlog import eventlog, lines

    write_rank(tmp_path, 0, [_header()])
    kinds = _special_files(RunPaths(tmp_path).ranks)
    # Every stat of a path says "a regular file", as it did before the swap.
    monkeypatch.setattr(eventlog, "_regular_files", lambda paths, said: list(paths))
    monkeypatch.setattr(lines, "_mode_of", lambda path: stat.S_IFREG | stat.S_IMODE(os.stat(path).st_mode))
    run = read_run([tmp_path])
    assert sorted(run.ranks) == [0]
    assert len([w for w in run.warnings if "left out" in w]) == len(kinds)
    for path in sorted(RunPaths(tmp_path).ranks.glob("rank-0000[12]*")):
        with pytest.raises(NotRegularFile):
            open_rank_file(path)
        with pytest.raises(NotRegularFile):
            list(lines_of(path))
    assert RankFileTail(RunPaths(tmp_path).ranks / "rank-00001.jsonl").read_records() == []


@pytest.mark.timeout(20)
def test_many_files_with_one_problem_are_one_warning_line(tmp_path):
    """5,000 empty rank files, 40 with garbage lines, 20 FIFOs: a few lines, however many files."""
    ranks = RunPaths(tmp_path).ranks
    write_rank(tmp_path, 0, [_header()])
    for rank in range(1, 5001):
        (ranks / f"rank-{rank:05d}.jsonl").write_bytes(b"")
    for rank in range(6000, 6040):
        write_rank(tmp_path, rank, [Step(**_common() | {"rank": rank}, metrics={})], tail=b"\0garbage\n")
    for rank in range(7000, 7020):
        os.mkfifo(ranks / f"rank-{rank:05d}.jsonl")
    run = load_run([tmp_path])
    assert len(run.warnings) <= 6, run.warnings
    [empty] = [w for w in run.warnings if "no readable records" in w]
    assert empty.startswith("5,000 rank files hold no readable records: ") and empty.endswith("... (the first 3)")
    assert "rank-00001.jsonl" in empty and "rank-00004.jsonl" not in empty
    [garbage] = [w for w in run.warnings if "unreadable lines" in w]
    assert garbage.startswith("40 rank files hold unreadable lines, 40 in all, skipped: ")
    [fifos] = [w for w in run.warnings if "FIFO" in w]
    assert fifos.startswith("20 files are a FIFO (named pipe), not a regular file; skipped: ")


def test_a_few_files_with_one_problem_keep_a_line_each(tmp_path):
    write_rank(tmp_path, 0, [_header()])
    for rank in (1, 2):
        RunPaths(tmp_path).rank_file(rank).write_bytes(b"")
    run = load_run([tmp_path])
    assert [w for w in run.warnings if "no readable records" in w] == [
        f"{RunPaths(tmp_path).rank_file(rank)}: no readable records" for rank in (1, 2)]
