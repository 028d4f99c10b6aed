"""Every whole file grpo-doctor reads goes through schema/safe_read.py, every whole file it writes through
schema/safe_write.py: this test reads every module of grpo_doctor/ with `ast` (nothing is imported)
and fails on a direct read or write outside the places listed below, naming the file, the line and
the call. A direct `path.read_text()` trusts the path to be a regular file of a sane size (a FIFO
blocks it forever, /dev/zero fills the memory); a direct `write_text()` after a temporary file and a
rename turns /dev/full into a regular file and replaces a symlink (issue 22).

What may stay direct, and why:
- streams: files appended to while a job runs (watch's logs and samples, the alerts log, the rank
  sink), lock files, py-spy's output;
- the kernel's own files: /proc of a process watch follows, the cgroup memory limits a rank reads;
- the windowed rank-file reader (runlog/), which has its own non-blocking opener;
- the package's own data (plan/flag_names) and the demo's own files.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "grpo_doctor"
WHOLE_FILE_METHODS = {"read_text", "read_bytes", "write_text", "write_bytes"}
# file (relative to grpo_doctor/) -> the kinds of direct access it may make, each for the reason given
ALLOWED = {
    "schema/safe_read.py": {"os.open"},  # the opener
    "schema/safe_write.py": {"os.open", "open", "os.replace", "mkstemp"},  # the writer; open: /proc/self/status
    "runlog/": {"os.open", "open", ".open", "read_bytes", "read_text"},  # the windowed rank-file reader
    "rank/": {"os.open", "open", ".open", "read_text"},  # the sink appends each rank's records; /proc, cgroup limits
    "supervisor/output.py": {"os.open", "open", ".open"},  # the job's output, appended
    "supervisor/alerts.py": {".open"},  # alerts.log, appended
    "supervisor/live_scan.py": {".open"},  # signatures.jsonl, appended
    "supervisor/watch.py": {".open"},  # watch-errors.log, appended
    "supervisor/sampler.py": {"open"},  # samples.jsonl, appended
    "supervisor/fleet.py": {".open"},  # the fleet channel's connect (fleet_channel.StoreChannel.open): no file
    "supervisor/run_files.py": {"open"},  # lock files
    "supervisor/stacks.py": {"open", "read_text"},  # py-spy's stdout; /proc/PID/status
    "cli/main.py": {"os.open"},  # /dev/null over a closed stdout
    "cli/summary_live.py": {"os.open", "open"},  # summary --follow: its own non-blocking open; /proc/PID/stat
    "cli/demo_watch.py": {"open", "read_text"},  # the demo's own output log and findings
    "plan/commands/flags.py": {"read_text"},  # the package's flag lists (importlib.resources)
}


def _kind(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Name):
        return {"open": "open", "mkstemp": "mkstemp"}.get(func.id)
    if not isinstance(func, ast.Attribute):
        return None
    owner = func.value.id if isinstance(func.value, ast.Name) else None
    if func.attr in WHOLE_FILE_METHODS:
        return func.attr
    if owner == "os" and func.attr in ("open", "replace", "rename"):
        return f"os.{func.attr}"
    if owner == "json" and func.attr == "load":
        return "json.load"
    if owner == "tempfile" and func.attr in ("mkstemp", "NamedTemporaryFile"):
        return "mkstemp"
    if func.attr == "open" and owner not in ("self", "Image", "urllib", "gzip", "io", "os") and not (
            isinstance(func.value, ast.Attribute) and isinstance(func.value.value, ast.Name)
            and func.value.value.id == "self" and func.value.attr == "inner"):
        return ".open"  # path.open(...)
    return None


def _allowed(relative: str, kind: str) -> bool:
    return any(relative.startswith(prefix) and kind in kinds for prefix, kinds in ALLOWED.items())


def test_every_whole_file_read_and_write_goes_through_schema():
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and (kind := _kind(node)) and not _allowed(relative, kind):
                found.append(f"grpo_doctor/{relative}:{node.lineno}: {ast.unparse(node)[:100]} ({kind})")
    assert not found, ("read or write these through grpo_doctor/schema/safe_read.py (read_bytes, read_text, "
                       "read_json, open_regular, open_text) or safe_write.py (write_file, make_dirs), or add the "
                       "file to ALLOWED with its reason:\n" + "\n".join(found))


def test_the_guard_sees_what_it_guards(tmp_path):
    sample = ast.parse("import json, os, tempfile\n"
                       "p.read_text(); p.write_bytes(b''); open(p); p.open('rb'); os.replace(a, b)\n"
                       "json.load(f); tempfile.mkstemp(); self.open(); self.inner.open(); Image.open(buf)\n")
    kinds = [k for node in ast.walk(sample) if isinstance(node, ast.Call) and (k := _kind(node))]
    assert sorted(kinds) == sorted(["read_text", "write_bytes", "open", ".open", "os.replace", "json.load", "mkstemp"])
