"""watch's summary.json and hang-N.json read back for the rules and the report, as their schema types.

Several rules and the report read these (`ranks`, `culprits`, `stacks`, ...), each trusting the shapes
that `supervisor/summary.py` and `supervisor/hang.py` write. A file edited by hand, cut by a full disk
into valid JSON of the wrong shape, too large, or written by another tool must not stop the report: it
is left out with one warning naming the problem (the shapes are checked by the types' `from_dict`,
schema/watch_files.py). Fields this version does not know are never read.

Typical use:
    summary, hangs = read_watch_dir(WatchPaths(host_dir), files, warnings)
    summary.live_scan_complete, [h.culprits for h in hangs]
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from grpo_doctor.schema.json_shapes import FormatError
from grpo_doctor.schema.run_info import RunInfo
from grpo_doctor.schema.run_paths import WatchPaths
from grpo_doctor.schema.safe_read import UnreadableFile, read_json
from grpo_doctor.schema.slow_rounds import Survey
from grpo_doctor.schema.watch_files import HangReport, WatchSummary

# watch writes a summary or hang report of a few hundred KB at most; a larger one is not read whole.
MAX_WATCH_JSON_BYTES = 64 * 2**20


def read_watch_dir(watch: WatchPaths, files: dict[str, Path],
                   warnings: list[str]) -> tuple[WatchSummary | None, list[HangReport]]:
    """The summary (None when absent or unreadable) and the hang reports in order, of one host's
    watch directory; `files` are its regular files by name. A report without a host takes the
    directory's name."""
    summary_file = files.get(watch.summary_json.name)
    summary = read_summary(summary_file, warnings) if summary_file is not None else None
    numbered = [(n, path) for path in files.values() if (n := WatchPaths.hang_number(path)) is not None]
    hangs = []
    for _, path in sorted(numbered, key=lambda item: item[0]):
        report = read_hang_report(path, warnings)
        if report is not None:
            hangs.append(report if report.host else replace(report, host=watch.root.name))
    return summary, hangs


def read_summary(path: Path, warnings: list[str]) -> WatchSummary | None:
    """A summary.json as watch writes it, else None and one warning naming the problem."""
    data = _read_json(path, warnings)
    if data is _UNREAD:
        return None
    try:
        return WatchSummary.from_dict(data)
    except FormatError as exc:
        warnings.append(f"{path}: not as watch writes it ({exc}); left out")
        return None


def read_hang_report(path: Path, warnings: list[str]) -> HangReport | None:
    """A hang-N.json as watch writes it (its `file` set to `path`), else None and one warning."""
    data = _read_json(path, warnings)
    if data is _UNREAD:
        return None
    try:
        return HangReport.from_dict(data, file=str(path))
    except FormatError as exc:
        warnings.append(f"{path}: not as watch writes it ({exc}); left out")
        return None


def read_run_command(path: Path, warnings: list[str]) -> tuple[tuple[str, ...], dict[str, str]]:
    """The launch command run.json records and the launch variables the job found on its first host
    (empty when absent or unreadable: one warning)."""
    data = _read_json(path, warnings)
    if data is _UNREAD:
        return (), {}
    try:
        info = RunInfo.from_dict(data)
    except FormatError as exc:
        warnings.append(f"{path}: not as watch writes it ({exc}); its command is not used")
        return (), {}
    hosts = sorted(info.hosts.items())
    return info.command, (dict(hosts[0][1].launch_env) if hosts else {})


def read_memory_plan(path: Path, warnings: list[str]) -> dict | None:
    """watch's plan.json (plan/render.py's JSON), checked for the keys the report reads, else None."""
    data = _read_json(path, warnings)
    if data is _UNREAD:
        return None
    problem = _plan_shape_problem(data)
    if problem:
        warnings.append(f"{path}: not a plan as watch writes it ({problem}); left out")
        return None
    return data if isinstance(data, dict) else None  # a dict: the shape check said so


MAX_PLAN_BYTES = 2**50  # a part or a GPU larger than this is no GPU's


def _plan_shape_problem(data: object) -> str | None:
    if not isinstance(data, dict) or not isinstance(data.get("fits"), bool):
        return "no fits: true/false"
    if not isinstance(data.get("verdict"), str) or not isinstance(data.get("fixes"), list):
        return "no verdict or fixes"
    if not isinstance(data.get("assumptions", []), list):
        return "assumptions not a list"
    worst = data.get("worst_gpu")
    if not isinstance(worst, dict) or not _sizes(worst.get("peak_bytes"), abs(worst.get("free_bytes") or 0)) \
            or not isinstance(worst.get("gpus"), list):
        return "no worst_gpu with peak_bytes, free_bytes and gpus"
    gpus = data.get("gpus")
    if not isinstance(gpus, list) or not gpus:
        return "no gpus"
    for gpu in gpus:
        problem = _gpu_problem(gpu)
        if problem:
            return problem
    for fix in data["fixes"]:
        if not isinstance(fix, dict) or not isinstance(fix.get("flag"), str) or not _sizes(fix.get("frees_bytes", 0)):
            return "a fix without a flag or a size it frees"
    return None


def _gpu_problem(gpu: object) -> str | None:
    phases = gpu.get("phases") if isinstance(gpu, dict) else None
    if not isinstance(gpu, dict) or not isinstance(phases, dict) or not phases:
        return "a GPU without phases"
    for phase in phases.values():
        parts = phase.get("parts") if isinstance(phase, dict) else None
        if not isinstance(parts, dict) or not all(isinstance(k, str) and _sizes(v) for k, v in parts.items()):
            return "a phase without parts in bytes"
    if gpu.get("peak_phase") not in phases:
        return "a peak_phase that is not one of the phases"
    if not _sizes(gpu.get("capacity_bytes")) or not gpu["capacity_bytes"] or not isinstance(gpu.get("gpus"), list):
        return "a GPU without capacity_bytes or gpus"
    return None


def _sizes(*values: object) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < MAX_PLAN_BYTES for v in values)


def read_fail_slow(path: Path, host: str, warnings: list[str]) -> list[Survey]:
    """The stack-round surveys of one host's fail-slow.json (a damaged survey is left out with one warning;
    a survey without a host takes the directory's name)."""
    data = _read_json(path, warnings)
    if data is _UNREAD:
        return []
    surveys = data.get("surveys") if isinstance(data, dict) else None
    if not isinstance(surveys, list):
        warnings.append(f"{path}: not as watch writes it (no list of surveys); left out")
        return []
    out = []
    for item in surveys:
        try:
            survey = Survey.from_dict(item)
        except FormatError as exc:
            warnings.append(f"{path}: a survey not as watch writes it ({exc}); left out")
            continue
        out.append(survey if survey.host else replace(survey, host=host))
    return out


_UNREAD = object()


def _read_json(path: Path, warnings: list[str]) -> object:
    try:  # a device, a FIFO or a file past the cap is refused without being read (schema/safe_read.py)
        return read_json(path, cap=MAX_WATCH_JSON_BYTES, errors="replace", what="a file watch writes")
    except UnreadableFile as exc:
        warnings.append(f"{path}: cannot be read ({exc.why}); left out")
    return _UNREAD

