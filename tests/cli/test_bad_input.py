"""Bad input gives one line (a warning, or an error and a hint), never a traceback, a hang or all the memory.

Each case is one a careful user's bad day produces: a header whose world size is corrupt, a FIFO or
a device where a file belongs, a directory the user cannot read, a log saved by PowerShell (UTF-16),
watch's files cut or edited into the wrong shape, an impossible port. The commands run as the user
runs them (`grpo-doctor ...` in a child process) where a failure would hang or exhaust the test run,
in this process where it is quick.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import pwd
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from helpers import clean_env

from grpo_doctor.cli.main import main
from grpo_doctor.schema import Header, PhaseBegin, PhaseEnd, RunPaths, Step
from grpo_doctor.schema.watch_files import WatchSummary

LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"
# A CUDA OOM as torch 2.x prints it (tests/data/logs/cuda_oom_variants.log, line 14; real_wordings.sources.md).
OOM_LINE = next(line for line in (LOGS / "cuda_oom_variants.log").read_text().splitlines()
                if "torch.OutOfMemoryError: CUDA out of memory" in line)
MEMORY_CAP_BYTES = 3 * 2**30


def _common(rank: int, step: int | None, t: float) -> dict:
    return dict(rank=rank, host=f"node-{rank}", pid=100 + rank, step=step, t=t, mono=t)


def _records(rank: int, world_size: int = 2) -> list:
    return [
        Header(**_common(rank, None, 10.0), local_rank=rank, world_size=world_size, node_rank=0, local_world_size=2,
               gpu_uuid=None, versions={"torch": "2.5.1"}, launch={}, argv=["train.py"]),
        PhaseBegin(**_common(rank, 0, 11.0), phase="rollout", path="rollout"),
        PhaseEnd(**_common(rank, 0, 12.0), phase="rollout", path="rollout", duration_s=1.0, synced=False),
        Step(**_common(rank, 0, 12.5), metrics={"loss": 0.5}),
    ]


def _write_run(run_dir: Path, world_size: int = 2, ranks=(0, 1)) -> Path:
    ranks_dir = RunPaths(run_dir).ranks
    ranks_dir.mkdir(parents=True, exist_ok=True)
    for rank in ranks:
        lines = [json.dumps(r.to_dict()) for r in _records(rank, world_size)]
        RunPaths(run_dir).rank_file(rank).write_text("\n".join(lines) + "\n")
    return run_dir


def _cli(*args: str) -> tuple[int, str, str]:
    """`grpo-doctor ARGS` in this process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(list(args))
    return status, out.getvalue(), err.getvalue()


def _limited_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP_BYTES, MEMORY_CAP_BYTES))


def _child(*args: str, timeout_s: float = 120, user: str | None = None, cwd: Path | None = None):
    """`grpo-doctor ARGS` as its own process, under a memory cap and a time limit (a hang fails the test)."""
    command = [sys.executable, "-m", "grpo_doctor.cli.main", *args]
    if user is not None:
        account = pwd.getpwnam(user)
        command = ["setpriv", f"--reuid={account.pw_uid}", f"--regid={account.pw_gid}", "--clear-groups", *command]
    return subprocess.run(command, env=clean_env(), capture_output=True, text=True, timeout=timeout_s,
                          preexec_fn=_limited_memory, cwd=cwd)


def _one_line_error(stderr: str) -> str:
    lines = stderr.splitlines()
    assert "Traceback" not in stderr and lines and lines[0].startswith("grpo-doctor: error: "), stderr
    assert len(lines) <= 2 and (len(lines) == 1 or lines[1].startswith("  hint: ")), stderr
    return lines[0]


# -- numbers that would size something -----------------------------------------------------------------


def test_a_billion_rank_world_size_is_one_warning_not_all_the_memory(tmp_path):
    run = _write_run(tmp_path / "run", world_size=1_000_000_000)
    for command in (["report", str(run), "--out", str(tmp_path / "out"), "--json"], ["summary", str(run), "--json"]):
        out = _child(*command)
        assert out.returncode in (0, 1, 3) and "Traceback" not in out.stderr, out.stderr[-2000:]
        warnings = json.loads(out.stdout)["warnings"]
        about = [w for w in warnings if "world_size" in w]
        assert len(about) == 2 and all("1000000000" in w and "rank-0000" in w for w in about), warnings


def test_a_rank_number_beyond_any_job_is_a_bad_line_named_by_its_field(tmp_path):
    run = _write_run(tmp_path / "run")
    step = Step(**_common(0, 1, 13.0), metrics={"loss": 0.4}).to_dict() | {"rank": 10**12}
    with RunPaths(run).rank_file(0).open("a") as f:
        f.write(json.dumps(step) + "\n")
    status, out, _ = _cli("summary", str(run), "--json")
    warnings = json.loads(out)["warnings"]
    assert status == 1 and any("line 5" in w and "field rank" in w for w in warnings), warnings


# -- files that are no files ---------------------------------------------------------------------------


def test_a_fifo_named_like_a_rank_file_is_skipped_without_blocking(tmp_path):
    run = _write_run(tmp_path / "run", ranks=(0,))
    os.mkfifo(RunPaths(run).rank_file(1))
    for command in (["report", str(run), "--out", str(tmp_path / "out"), "--json"], ["summary", str(run), "--json"]):
        out = _child(*command, timeout_s=90)
        assert "Traceback" not in out.stderr, out.stderr
        warnings = json.loads(out.stdout)["warnings"]
        assert any("rank-00001.jsonl" in w and "FIFO" in w for w in warnings), warnings


def test_a_fifo_log_in_an_uninstrumented_directory_is_skipped_without_blocking(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "train.log").write_text(OOM_LINE + "\n")
    os.mkfifo(logs / "live.log")
    out = _child("report", str(logs), "--out", str(tmp_path / "out"), "--json", timeout_s=90)
    findings = json.loads(out.stdout)
    assert [f["id"] for f in findings["findings"]] == ["cuda-oom"]
    assert any("live.log" in w and "FIFO" in w for w in findings["warnings"]), findings["warnings"]


@pytest.mark.parametrize("command", ["report", "summary"])
def test_a_device_or_fifo_given_as_the_path_is_one_line(tmp_path, command):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in ("/dev/zero", str(fifo)):
        out = _child(command, path, "--out", str(tmp_path / "out")) if command == "report" else _child(command, path)
        assert "Traceback" not in out.stderr, out.stderr
        if command == "summary":
            assert out.returncode == 2
            assert "device" in _one_line_error(out.stderr) or "FIFO" in out.stderr
        else:
            assert out.returncode == 3, out.stderr
            assert any(path in line and ("device" in line or "FIFO" in line) for line in out.stdout.splitlines() +
                       out.stderr.splitlines()), out.stdout + out.stderr


# -- what cannot be read -------------------------------------------------------------------------------


def test_ranks_that_is_a_file_is_a_warning_and_nothing_is_claimed_checked(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "ranks").write_text("not a directory\n")
    status, out, _ = _cli("report", str(run), "--out", str(tmp_path / "out"), "--json")
    findings = json.loads(out)
    assert status == 3
    assert any(str(run / "ranks") in w and "cannot be read" in w for w in findings["warnings"]), findings["warnings"]
    assert findings["inputs"][0]["recognised"] == [] and "crashes" in findings["not_checked"]


@contextlib.contextmanager
def _shared_dir():
    """A directory under /tmp that another user can enter (pytest's tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="grpo-doctor-perm-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _can_drop_to_nobody() -> str | None:
    if os.geteuid() != 0:
        return None  # permissions apply to this user already
    if shutil.which("setpriv") is None:
        return "setpriv is not installed: cannot run the check as another user"
    try:
        account = pwd.getpwnam("nobody")
    except KeyError:
        return "no user 'nobody' to run the check as"
    probe = subprocess.run(["setpriv", f"--reuid={account.pw_uid}", f"--regid={account.pw_gid}", "--clear-groups",
                            sys.executable, "-c", "import grpo_doctor"], capture_output=True, text=True, env=clean_env())
    return None if probe.returncode == 0 else f"cannot run grpo-doctor as nobody: {probe.stderr.strip()[:200]}"


def _as_user() -> str | None:
    """The user to run as so that permissions apply: this one when not root, else nobody (chmod 000 does not stop root)."""
    return "nobody" if os.geteuid() == 0 else None


@pytest.fixture
def unprivileged():
    reason = _can_drop_to_nobody()
    if reason:
        pytest.skip(reason)


def test_an_unreadable_ranks_directory_is_named_and_left_not_checked(unprivileged):
    with _shared_dir() as shared:
        run = _write_run(shared / "run")
        (shared / "out").mkdir(mode=0o777)
        (shared / "out").chmod(0o777)
        RunPaths(run).ranks.chmod(0o000)
        out = _child("report", str(run), "--out", str(shared / "out"), "--json", user=_as_user(), cwd=shared)
        assert "Traceback" not in out.stderr and out.returncode == 3, out.stderr
        findings = json.loads(out.stdout)
        assert any(str(RunPaths(run).ranks) in w and "cannot be read" in w for w in findings["warnings"])
        assert findings["inputs"][0]["recognised"] == [] and set(findings["not_checked"]) >= {"crashes", "hangs"}
        summary = _child("summary", str(run), user=_as_user(), cwd=shared)
        assert summary.returncode == 2 and "cannot be read" in _one_line_error(summary.stderr)


def test_unreadable_logs_and_watch_files_are_named_in_warnings(unprivileged):
    with _shared_dir() as shared:
        run = _write_run(shared / "run")
        host_dir = RunPaths(run).supervisor_host("node-0")
        host_dir.mkdir(parents=True)
        (host_dir / "signatures.jsonl").write_text("")
        (host_dir / "stdout.log").write_text(OOM_LINE + "\n")
        # watch ended and said it scanned everything: its signatures are what the report reads first
        (host_dir / "summary.json").write_text(json.dumps(WatchSummary(host="node-0").to_dict()))
        (host_dir / "signatures.jsonl").chmod(0o000)
        raw = shared / "train.log"
        raw.write_text(OOM_LINE + "\n")
        raw.chmod(0o000)
        (shared / "out").mkdir()
        (shared / "out").chmod(0o777)
        out = _child("report", str(run), str(raw), "--out", str(shared / "out"), "--json",
                     user=_as_user(), cwd=shared)
        assert "Traceback" not in out.stderr, out.stderr
        findings = json.loads(out.stdout)
        warnings = findings["warnings"]
        assert any("signatures.jsonl" in w and "cannot be read" in w for w in warnings), warnings
        assert any(str(raw) in w and "cannot be read" in w for w in warnings), warnings
        assert [i["recognised"] for i in findings["inputs"] if i["path"] == str(raw)] == [[]]
        # the saved output is scanned instead of the unreadable signatures
        assert "cuda-oom" in [f["id"] for f in findings["findings"]]


# -- encodings -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be-bom", "utf-8-sig"])
def test_a_log_saved_as_utf16_or_with_a_bom_is_read(tmp_path, encoding):
    text = OOM_LINE + "\ndone\n"  # first: a BOM left in front would hide its "[rank7]:" prefix
    data = (b"\xfe\xff" + text.encode("utf-16-be")) if encoding == "utf-16-be-bom" else text.encode(encoding)
    log = tmp_path / "train.log"
    log.write_bytes(data)
    status, out, _ = _cli("report", str(log), "--out", str(tmp_path / "out"), "--json")
    findings = json.loads(out)
    assert status == 1 and [(f["id"], f["ranks"]) for f in findings["findings"]] == [("cuda-oom", [7])], findings


# -- deep and wrong-typed JSON -------------------------------------------------------------------------


def test_json_nested_1100_levels_in_a_rank_line_is_one_bad_line(tmp_path):
    run = _write_run(tmp_path / "run")
    deep = '{"schema": 1, "kind": "step", "rank": 0, "metrics": ' + "[" * 1100 + "]" * 1100 + "}"
    assert len(deep) < 5000
    with RunPaths(run).rank_file(0).open("a") as f:
        f.write(deep + "\n")
    for command in (["report", str(run), "--out", str(tmp_path / "out"), "--json"], ["summary", str(run), "--json"]):
        status, out, _ = _cli(*command)
        assert status in (0, 1, 3)
        assert any("skipped 1 unreadable line(s), first at line 5" in w for w in json.loads(out)["warnings"])


@pytest.mark.parametrize("name, content", [
    ("summary.json", "[1, 2]"),
    ("summary.json", '{"ranks": {"0": 7}}'),
    ("summary.json", '{"ranks": {"zero": {"gone": "exit 1"}}}'),
    ("summary.json", '{"ranks": ' + "[" * 1100 + "]" * 1100 + "}"),
    ("summary.json", '{"live_scan_complete": "no", "hang_ended_by_watch": [1]}'),
    ("hang-1.json", '{"ranks": {"0": {"verdict": 3}}, "culprits": ["x"]}'),
    ("hang-1.json", '{"stacks": {"0": {"frames": [{"function": 1}]}}}'),
    ("hang-1.json", '{"detected_t": "soon", "groups": null}'),
    ("hang-1.json", "null"),
])
def test_wrong_shaped_watch_files_are_one_warning(tmp_path, name, content):
    run = _write_run(tmp_path / "run")
    host_dir = RunPaths(run).supervisor_host("node-0")
    host_dir.mkdir(parents=True)
    (host_dir / name).write_text(content)
    status, out, err = _cli("report", str(run), "--out", str(tmp_path / "out"), "--json")
    assert status in (0, 1, 3) and "Traceback" not in err
    assert sum(name in w for w in json.loads(out)["warnings"]) == 1, json.loads(out)["warnings"]


# -- the probe -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("port", ["99999", "0", "-1"])
def test_an_impossible_master_port_is_refused_in_one_line(port):
    out = subprocess.run([sys.executable, "-m", "grpo_doctor.cli.main", "probe", "--nproc-per-node", "1",
                          f"--master-port={port}"], env=clean_env(), capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert port in _one_line_error(out.stderr)
