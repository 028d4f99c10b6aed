"""`grpo-doctor watch` given a bad flag value or an unusable run directory: one line (a cause and a fix),
never a traceback. A value watch cannot use is refused before the job starts (exit 2, nothing made);
a run directory that cannot be written costs records, never the job or its exit status."""
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from helpers import clean_env, write_program

from grpo_doctor.supervisor.watch import HANG_EXIT


def _watch(tmp_path: Path, *args: str, job: str = "print('job ran')", timeout_s: float = 60, **env: str):
    cmd = [sys.executable, "-m", "grpo_doctor.cli.main", "watch", "--no-report", *args, "--", sys.executable, "-c", job]
    return subprocess.run(cmd, env=clean_env(OMP_NUM_THREADS="1", **env), cwd=tmp_path, capture_output=True,
                          text=True, timeout=timeout_s)


def _refused(out: subprocess.CompletedProcess, *words: str) -> None:
    assert out.returncode == 2, out.stderr[-3000:]
    assert "Traceback" not in out.stderr and "job ran" not in out.stdout, out.stderr[-3000:]
    (line,) = [line for line in out.stderr.splitlines() if line.startswith("grpo-doctor: error:")]
    for word in words:
        assert word in line, line


@pytest.mark.parametrize("url", ["https://[::1", "http://a b/x", "http://127.0.0.1:99999/x", "http://127.0.0.1:0/x",
                                 "https://hooks.slack.com/services/T/B/x\ny", "http:///x"])
def test_a_notify_url_that_cannot_be_posted_to_is_refused_before_the_job_starts(tmp_path, url):
    out = _watch(tmp_path, "--run-dir", str(tmp_path / "run"), "--notify", url)
    _refused(out, "--notify")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("flag", "value"), [
    *((flag, "nan") for flag in ("--hang-timeout", "--hang-factor", "--hang-floor", "--hang-initial",
                                 "--uninstrumented-timeout", "--second-look", "--sample-interval")),
    ("--hang-timeout", "inf"), ("--second-look", "inf"), ("--sample-interval", "inf")])
def test_a_time_or_factor_that_is_not_a_finite_number_is_refused_before_the_job_starts(tmp_path, flag, value):
    out = _watch(tmp_path, "--run-dir", str(tmp_path / "run"), flag, value)
    _refused(out, flag, value)
    assert not (tmp_path / "run").exists()


def test_a_run_directory_through_a_symlink_loop_is_one_line_before_the_job_starts(tmp_path):
    (tmp_path / "loop").symlink_to("loop")
    out = _watch(tmp_path, "--run-dir", str(tmp_path / "loop" / "run"))
    _refused(out, "--run-dir", "symbolic link")
    out = _watch(tmp_path, GRPO_DOCTOR_RUN_DIR=str(tmp_path / "loop"))
    _refused(out, "GRPO_DOCTOR_RUN_DIR", "symbolic link")


def test_a_run_directory_with_a_too_long_name_costs_records_not_the_jobs_exit_status(tmp_path):
    run_dir = tmp_path / ("a" * 300) / "run"
    out = _watch(tmp_path, "--run-dir", str(run_dir), job="import sys; print('job ran'); sys.exit(3)")
    assert out.returncode == 3, out.stderr[-3000:]
    assert out.stdout == "job ran\n"
    assert "Traceback" not in out.stderr and "internal error" not in out.stderr, out.stderr[-3000:]
    problems = [line for line in out.stderr.splitlines() if "File name too long" in line]
    assert len(problems) == 1, out.stderr[-3000:]
    assert "--run-dir" in problems[0]  # the fix
    assert not any(p.name.startswith("aaa") for p in tmp_path.iterdir())


def _garbage_server() -> tuple[socket.socket, int]:
    """A TCP server that answers every connection with a line that is no HTTP status line."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                conn.sendall(b"garbage\r\n\r\n")
    threading.Thread(target=serve, daemon=True).start()
    return server, server.getsockname()[1]


def test_an_alert_that_fails_at_send_time_is_one_line_never_a_thread_traceback(tmp_path):
    server, port = _garbage_server()
    job = write_program(tmp_path, """
        import time, grpo_doctor as gd
        gd.init()
        with gd.phase("reward"):
            time.sleep(3600)
    """, name="hangs.py")
    try:
        cmd = [sys.executable, "-m", "grpo_doctor.cli.main", "watch", "--run-dir", str(tmp_path / "run"),
               "--hang-timeout", "2", "--second-look", "0", "--on-hang", "kill", "--no-report",
               "--notify", f"http://127.0.0.1:{port}/services/secret", "--", sys.executable, str(job)]
        out = subprocess.run(cmd, env=clean_env(OMP_NUM_THREADS="1"), cwd=tmp_path, capture_output=True, text=True,
                             timeout=120)
    finally:
        server.close()
    assert out.returncode == HANG_EXIT, out.stderr[-3000:]
    assert "Traceback" not in out.stderr and "Exception in thread" not in out.stderr, out.stderr[-3000:]
    failed = [line for line in out.stderr.splitlines() if "alert to" in line and "failed" in line]
    assert len(failed) == 1 and "secret" not in failed[0], out.stderr[-3000:]
    assert f"http://127.0.0.1:{port}/…" in failed[0]
