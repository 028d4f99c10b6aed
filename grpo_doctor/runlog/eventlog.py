"""A run's event log: every rank file of one run directory or of several (one per node), each read
by the one decoder (decoder.py), merged into a `RunLog` with what is wrong with them said.

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

from grpo_doctor.runlog.decode import paused_gc
from grpo_doctor.runlog.decoder import RANK_FILE_PATTERN, read_rank_file
from grpo_doctor.runlog.file_warnings import FileWarnings
from grpo_doctor.runlog.lines import MAX_LINE_BYTES, file_kind
from grpo_doctor.runlog.rank_log import RankLog, RunLog
from grpo_doctor.schema import SCHEMA_VERSION, RunPaths
from grpo_doctor.schema.errors import DoctorError
from grpo_doctor.schema.field_checks import MAX_WORLD_SIZE, sane_world_size
from grpo_doctor.schema.ranks import format_ranks

__all__ = ["RANK_FILE_PATTERN", "RunDirError", "load_run", "regular_files", "special_file_kind"]


class RunDirError(DoctorError):
    """A path given to the reader is not a run directory; carries a hint for the user."""

    def __init__(self, message: str, hint: str):
        super().__init__(message)
        self.hint = hint


RankFilesReader = Callable[[list[Path]], Iterable["RankLog | OSError"]]


def load_run(paths: Sequence[str | Path], read_files: RankFilesReader | None = None) -> RunLog:
    """Load every rank file under the given run directories (or rank files named directly).

    `read_files` maps the rank files to their logs (or the OSError that reading one raised), in
    order; by default they are read whole, one after the other, by the decoder (decoder.py), every
    record typed; parallel_read.py reads them into column batches in worker processes, by window
    where a file is big.
    """
    if not paths:
        raise RunDirError("no run directory given", "pass the run directory that watch or the trainer printed")
    run = RunLog(dirs=[Path(p) for p in paths])
    said = FileWarnings()  # per-file warnings, one line per reason when many files share it
    files = [rank_file for path in run.dirs for rank_file in _rank_files(path, said)]
    with paused_gc():
        for rank_file, log in zip(files, (read_files or _read_one_by_one)(files), strict=True):
            if isinstance(log, OSError):
                why = log.strerror or str(log)
                said.add(f"{{n}} rank files cannot be read ({why}); their ranks are left out",
                         f"{rank_file}: cannot be read ({why}); its rank is left out", str(rank_file))
                continue
            _merge(run, log, said)
    run.warnings += said.lines()
    _warn_about_gaps(run)
    return run


def _read_one_by_one(files: list[Path]) -> Iterator[RankLog | OSError]:
    for rank_file in files:
        try:
            yield read_rank_file(rank_file, columns=False)
        except OSError as exc:
            yield exc


def _rank_files(path: Path, said: FileWarnings) -> list[Path]:
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
    files = _regular_files([ranks_dir / name for name in names], said)
    if not files:
        raise RunDirError(
            f"{path} holds no rank files (expected {ranks_dir}/rank-00000.jsonl, ...)",
            "pass a run directory written by grpo-doctor (GRPO_DOCTOR_RUN_DIR), not its parent",
        )
    return files


RANK_FILE_GLOB = re.compile(r"rank-.*\.jsonl\Z", re.S)


def regular_files(paths: Iterable[Path], warnings: list[str]) -> list[Path]:
    """The paths that are regular files, without opening any; the others named in warnings (a FIFO,
    device or socket: opening it could block, reading it never end), one line per reason when many
    share it. What is opened is checked again (lines.open_rank_file): the path may change."""
    said = FileWarnings()
    out = _regular_files(paths, said)
    warnings += said.lines()
    return out


def _regular_files(paths: Iterable[Path], said: FileWarnings) -> list[Path]:
    out = []
    for path in paths:
        try:
            mode = os.stat(path).st_mode
        except OSError as exc:
            why = exc.strerror or str(exc)
            said.add(f"{{n}} files cannot be read ({why}); left out", f"{path}: cannot be read ({why}); left out",
                     str(path))
            continue
        if stat.S_ISREG(mode):
            out.append(path)
        else:
            kind = special_file_kind(mode)
            said.add(f"{{n}} files are {kind}, not a regular file; skipped",
                     f"{path}: cannot be read ({kind}, not a regular file); skipped", str(path))
    return out


def special_file_kind(mode: int) -> str:
    """'a FIFO', 'a character device', ... for what `os.stat` says is no regular file or directory."""
    return file_kind(mode)


def _merge(run: RunLog, log: RankLog, said: FileWarnings) -> None:
    """`log` into `run`; what is wrong with it said to `said` (one line per reason for many files)."""
    _warn_about_file(log, said)
    if log.last_record is not None:
        if log.rank in run.ranks:
            other = run.ranks[log.rank]
            said.add("{n} ranks appear in two files each; records merged in time order",
                     f"rank {log.rank} appears in both {other.path} and {log.path}; records merged in time order",
                     f"rank {log.rank} ({other.path} and {log.path})")
            other.absorb(log)
        else:
            run.ranks[log.rank] = log


def _warn_about_file(log: RankLog, said: FileWarnings) -> None:
    where = str(log.path)
    if log.num_bad_lines and log.first_bad_line is not None:  # the first is set with the count
        how = " (the last line is truncated: the process died while writing)" if log.truncated_tail else ""
        why = f" ({log.first_bad_reason})" if log.first_bad_reason else ""
        at = f"byte {log.first_bad_line - 1}" if log.sampled else f"line {log.first_bad_line}"
        said.add("{n} rank files hold unreadable lines, {amount} in all, skipped",
                 f"{where}: skipped {log.num_bad_lines} unreadable line(s), first at {at}{why}{how}",
                 f"{where} ({log.num_bad_lines} from {at})", amount=log.num_bad_lines)
    if log.num_damaged_regions:
        cap = f"{MAX_LINE_BYTES // 2**20} MB"
        said.add(f"{{n}} rank files hold regions with no newline within {cap} (garbage, or a hole of NUL bytes), "
                 "{amount} in all, given up; the rest of each file was read",
                 f"{where}: {log.num_damaged_regions} region(s) with no newline within {cap} (garbage, or a hole "
                 f"of NUL bytes), first at byte {log.first_damaged_offset}, given up; the rest of the file was read",
                 f"{where} (from byte {log.first_damaged_offset})", amount=log.num_damaged_regions)
    if log.last_record is None:
        said.add("{n} rank files hold no readable records", f"{where}: no readable records", where)
        return
    if log.header is None:
        said.add("{n} rank files hold no header record; host and launch settings of their ranks are unknown",
                 f"{where}: no header record; host and launch settings of rank {log.rank} are unknown", where)
    newer = [h.schema_version for h in log.headers if h.schema_version > SCHEMA_VERSION]
    if newer:
        said.add(f"{{n}} rank files were written with a newer schema than {SCHEMA_VERSION}, which this grpo-doctor "
                 "reads; upgrade grpo-doctor to read every field",
                 f"{where}: written with schema {max(newer)}, this grpo-doctor reads {SCHEMA_VERSION}; "
                 "upgrade grpo-doctor to read every field", f"{where} (schema {max(newer)})")
    for size in sorted({h.world_size for h in log.headers if not sane_world_size(h)}):
        said.add(f"{{n}} rank file headers give a world_size outside 1 to {MAX_WORLD_SIZE}; ignored",
                 f"{where}: header field world_size is {size}, outside 1 to {MAX_WORLD_SIZE}; ignored",
                 f"{where} ({size})")
    hosts = {h.host for h in log.headers}
    if len(log.headers) > 1 and len(hosts) > 1:
        said.add("{n} ranks were claimed from several hosts",
                 f"{where}: rank {log.rank} was claimed from several hosts ({', '.join(sorted(hosts))})",
                 f"{where} ({', '.join(sorted(hosts)[:3])})")


def _warn_about_gaps(run: RunLog) -> None:
    missing = run.missing_ranks
    if missing:
        run.warnings.append(
            f"no records from rank(s) {format_ranks(missing)} of world size {run.world_size}: "
            "those processes never started recording, or their node's run directory was not passed"
        )
