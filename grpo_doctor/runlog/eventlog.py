"""Reads a run's event log back: every rank file of one run directory or of several (one per node).

Damaged input is expected, not exceptional: a rank killed mid-write leaves a truncated last
line, log collectors splice in garbage, a node's directory may be missing. The reader skips
what it cannot parse, counts it, and says so in `RunLog.warnings`; it never raises on a bad
file, only on a path that does not exist or holds no run at all (`RunDirError`).

Typical use:
    run = load_run(["runs/job-17"])            # or one directory per node
    for rank, log in sorted(run.ranks.items()):
        print(rank, log.header.host, log.last_step, log.open_path)
    for w in run.warnings:
        print("warning:", w)
"""
from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from grpo_doctor.runlog.decode import checked_record, decode_line, paused_gc
from grpo_doctor.runlog.lines import lines_of
from grpo_doctor.runlog.rank_log import RankLog, RunLog
from grpo_doctor.schema import (
    SCHEMA_VERSION,
    BadRecord,
    Record,
    RunPaths,
)
from grpo_doctor.schema.errors import DoctorError
from grpo_doctor.schema.field_checks import MAX_WORLD_SIZE, sane_world_size
from grpo_doctor.schema.ranks import format_ranks

RANK_FILE_PATTERN = re.compile(r"rank-(\d+)\.jsonl$")


class RunDirError(DoctorError):
    """A path given to the reader is not a run directory; carries a hint for the user."""

    def __init__(self, message: str, hint: str):
        super().__init__(message)
        self.hint = hint


RankFilesReader = Callable[[list[Path]], Iterable["RankLog | OSError"]]


def load_run(paths: Sequence[str | Path], read_files: RankFilesReader | None = None) -> RunLog:
    """Load every rank file under the given run directories (or rank files named directly).

    `read_files` maps the rank files to their logs (or the OSError that reading one raised), in
    order; by default they are read one after the other with `read_rank_file`. The analysis reads
    them in parallel into `RankLog` subclasses whose phase and memory records went into tables.
    """
    if not paths:
        raise RunDirError("no run directory given", "pass the run directory that watch or the trainer printed")
    run = RunLog(dirs=[Path(p) for p in paths])
    files = [rank_file for path in run.dirs for rank_file in _rank_files(path, run.warnings)]
    with paused_gc():
        for rank_file, log in zip(files, (read_files or _read_one_by_one)(files), strict=True):
            if isinstance(log, OSError):
                run.warnings.append(f"{rank_file}: cannot be read ({log.strerror}); its rank is left out")
                continue
            _merge(run, log)
    _warn_about_gaps(run)
    return run


def _read_one_by_one(files: list[Path]) -> Iterator[RankLog | OSError]:
    for rank_file in files:
        try:
            yield read_rank_file(rank_file)
        except OSError as exc:
            yield exc


def _rank_files(path: Path, warnings: list[str]) -> list[Path]:
    """The rank files of a run directory, or `path` itself when it is a file. What is no regular
    file (a FIFO would block the reader forever, a device never end) is skipped with a warning."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise RunDirError(f"{path} does not exist", "check the path; run directories are printed at start-up") from None
    except OSError as exc:
        raise RunDirError(f"{path} cannot be read ({exc.strerror})", "check its permissions") from None
    if stat.S_ISREG(mode):
        return [path]
    if not stat.S_ISDIR(mode):
        raise RunDirError(f"{path} is {special_file_kind(mode)}, not a rank file or run directory",
                          "pass a run directory written by grpo-doctor, or one of its ranks/rank-*.jsonl files")
    ranks_dir = RunPaths(path).ranks
    try:
        names = sorted(entry for entry in os.listdir(ranks_dir) if RANK_FILE_GLOB.match(entry))
    except FileNotFoundError:
        names = []
    except OSError as exc:  # not a directory, or not readable by this user
        raise RunDirError(f"{ranks_dir} cannot be read ({exc.strerror})",
                          "check that directory's permissions (the user running grpo-doctor must read it)") from None
    files = regular_files([ranks_dir / name for name in names], warnings)
    if not files:
        raise RunDirError(
            f"{path} holds no rank files (expected {ranks_dir}/rank-00000.jsonl, ...)",
            "pass a run directory written by grpo-doctor (GRPO_DOCTOR_RUN_DIR), not its parent",
        )
    return files


RANK_FILE_GLOB = re.compile(r"rank-.*\.jsonl\Z", re.S)


def regular_files(paths: Iterable[Path], warnings: list[str]) -> list[Path]:
    """The paths that are regular files, without opening any; each other one named in a warning
    (a FIFO, device or socket: opening it could block, reading it never end)."""
    out = []
    for path in paths:
        try:
            mode = os.stat(path).st_mode
        except OSError as exc:
            warnings.append(f"{path}: cannot be read ({exc.strerror}); left out")
            continue
        if stat.S_ISREG(mode):
            out.append(path)
        else:
            warnings.append(f"{path}: cannot be read ({special_file_kind(mode)}, not a regular file); skipped")
    return out


def special_file_kind(mode: int) -> str:
    """'a FIFO', 'a character device', ... for what `os.stat` says is no regular file or directory."""
    for test, name in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "not a regular file"


def read_rank_file(path: str | Path) -> RankLog:
    path = Path(path)
    match = RANK_FILE_PATTERN.search(path.name)
    log = RankLog(rank=int(match.group(1)) if match else -1, path=path)
    records, pids = log.records, log.pids
    for line_number, line, complete in lines_of(path):
        try:
            record = checked_record(decode_line(line))
            if isinstance(record, Record):
                pids.add(record.pid)
        except (ValueError, TypeError, BadRecord) as exc:
            log.count_bad_line(line_number, complete, str(exc) if isinstance(exc, BadRecord) else None)
            continue
        if isinstance(record, Record) and log.rank < 0:
            log.rank = record.rank
        records.append(record)
    return log


def _merge(run: RunLog, log: RankLog) -> None:
    where = str(log.path)
    if log.num_bad_lines:
        how = " (the last line is truncated: the process died while writing)" if log.truncated_tail else ""
        why = f" ({log.first_bad_reason})" if log.first_bad_reason else ""
        at = f"byte {log.first_bad_line - 1}" if log.sampled else f"line {log.first_bad_line}"
        run.warnings.append(f"{where}: skipped {log.num_bad_lines} unreadable line(s), first at {at}{why}{how}")
    if log.last_record is None:
        run.warnings.append(f"{where}: no readable records")
        return
    if log.header is None:
        run.warnings.append(f"{where}: no header record; host and launch settings of rank {log.rank} are unknown")
    newer = [h.schema_version for h in log.headers if h.schema_version > SCHEMA_VERSION]
    if newer:
        run.warnings.append(
            f"{where}: written with schema {max(newer)}, this grpo-doctor reads {SCHEMA_VERSION}; "
            "upgrade grpo-doctor to read every field"
        )
    for size in sorted({h.world_size for h in log.headers if not sane_world_size(h)}):
        run.warnings.append(f"{where}: header field world_size is {size}, outside 1 to {MAX_WORLD_SIZE}; ignored")
    hosts = {h.host for h in log.headers}
    if len(log.headers) > 1 and len(hosts) > 1:
        run.warnings.append(f"{where}: rank {log.rank} was claimed from several hosts ({', '.join(sorted(hosts))})")
    if log.rank in run.ranks:
        other = run.ranks[log.rank]
        run.warnings.append(f"rank {log.rank} appears in both {other.path} and {where}; records merged in time order")
        other.absorb(log)
    else:
        run.ranks[log.rank] = log


def _warn_about_gaps(run: RunLog) -> None:
    missing = run.missing_ranks
    if missing:
        run.warnings.append(
            f"no records from rank(s) {format_ranks(missing)} of world size {run.world_size}: "
            "those processes never started recording, or their node's run directory was not passed"
        )
