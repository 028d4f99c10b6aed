"""watch never slows, alters or ends a healthy job, with real processes: a run directory whose files
block (a hung NFS mount, made here with FIFOs nobody reads), an alert command that floods its output,
and watch itself SIGKILLed while the job runs."""
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from helpers import clean_env, still_alive, tree_pids, write_program

from grpo_doctor.schema import RunPaths
from grpo_doctor.supervisor.watch import HANG_EXIT

NUM_LINES = 100_000  # about 2 MB: twice the output pipe watch widens, so a tee that stops reading stalls the job


def _watch_cmd(run_dir: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "grpo_doctor.cli.main", "watch", "--run-dir", str(run_dir), "--no-report", *args, "--"]


def _job_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("line ")]


def test_a_stdout_log_that_blocks_costs_the_log_not_the_jobs_progress(tmp_path):
    run_dir = tmp_path / "run"
    log = RunPaths(run_dir).watch_files(socket.gethostname()).stdout_log
    log.parent.mkdir(parents=True)
    os.mkfifo(log)  # opening it for writing blocks until someone reads: as a hung file system would
    job = (f"import sys, time\nstart = time.monotonic()\nfor i in range({NUM_LINES}):\n    print('line', i)\n"
           "print(f'job took {time.monotonic() - start:.2f} s', file=sys.stderr)")
    start = time.monotonic()
    out = subprocess.run(_watch_cmd(run_dir) + [sys.executable, "-c", job], env=clean_env(), cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    elapsed_s = time.monotonic() - start
    assert out.returncode == 0, out.stderr[-3000:]
    lines = _job_lines(out.stdout)
    assert len(lines) == NUM_LINES and lines[-1] == f"line {NUM_LINES - 1}"  # every line reached the terminal
    took = [line for line in out.stderr.splitlines() if line.startswith("job took")]
    assert took and float(took[0].split()[2]) < 10, out.stderr[-3000:]
    assert "Traceback" not in out.stderr
    assert f"{log}: still being written" in out.stderr  # the log's loss is said, in one line
    assert elapsed_s < 45


def test_a_rank_file_that_blocks_costs_the_records_not_the_ranks_progress(tmp_path):
    run_dir = tmp_path / "run"
    rank_file = RunPaths(run_dir).rank_file(0)
    rank_file.parent.mkdir(parents=True)
    os.mkfifo(rank_file)
    job = write_program(tmp_path, """
        import sys, time, grpo_doctor as gd
        start = time.monotonic()
        gd.init()
        for step in range(200):
            with gd.phase("rollout"):
                pass
            gd.step(step, loss=1.0)
            print("line", step, flush=True)
        print(f"job took {time.monotonic() - start:.2f} s", file=sys.stderr, flush=True)
    """, name="rank.py")
    start = time.monotonic()
    out = subprocess.run(_watch_cmd(run_dir) + [sys.executable, str(job)], env=clean_env(RANK="0"), cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    elapsed_s = time.monotonic() - start
    assert out.returncode == 0, out.stderr[-3000:]
    assert len(_job_lines(out.stdout)) == 200
    took = [line for line in out.stderr.splitlines() if line.startswith("job took")]
    # The sink waits for the open at most OPEN_WAIT_S (2 s), once; the steps wait for nothing.
    assert took and float(took[0].split()[2]) < 6, out.stderr[-3000:]
    assert "Traceback" not in out.stderr
    assert sum("hung file system" in line for line in out.stderr.splitlines()) == 1, out.stderr[-3000:]
    assert elapsed_s < 45


def test_sigkill_of_watch_leaves_a_healthy_job_running_and_what_it_leaves_behind_ended_when_it_ends(tmp_path):
    # The job double-forks a daemon into a session of its own, then runs until told to stop, printing.
    stop = tmp_path / "stop"
    job = write_program(tmp_path, f"""
        import os, subprocess, sys, time
        subprocess.Popen(['setsid', sys.executable, '-c', 'import time; time.sleep(600)'])
        print('started', flush=True)
        while not os.path.exists({str(stop)!r}):
            time.sleep(0.1)
        print('still running after watch', flush=True)
        print('to stderr too', file=sys.stderr, flush=True)
    """, name="job.py")
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(_watch_cmd(run_dir) + [sys.executable, str(job)], env=clean_env(), cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "started\n"
        # The job is watch's child that runs job.py, and the daemon it started. Picked from the whole tree,
        # the daemon's fork before its exec (same command line) could pass for the launcher, and a process
        # of watch's own for the job's: either can make this test fail under load.
        deadline = time.monotonic() + 30
        job_pids: set[int] = set()
        while len(job_pids) < 2 and time.monotonic() < deadline:  # the launcher and its setsid'd daemon
            time.sleep(0.1)
            children = [c.pid for c in psutil.Process(proc.pid).children()]
            launcher = next((p for p in children if str(job) in _cmdline(p)), None)
            if launcher is not None:
                job_pids = {launcher} | {p for p in tree_pids(launcher) if "time.sleep(600)" in _cmdline(p)}
        assert len(job_pids) == 2, job_pids
        proc.kill()  # as the OOM killer would
        proc.wait(timeout=10)
        time.sleep(1.0)
        assert still_alive(job_pids, timeout_s=0) == job_pids  # the job and its daemon run on
        stop.write_text("")
        stdout, stderr = proc.communicate(timeout=60)  # the guardian holds watch's stdout until the job ends
    finally:
        if proc.poll() is None:
            proc.kill()
    assert stdout == "still running after watch\n"
    assert "to stderr too" in stderr
    assert f"the job (pid {launcher}) runs on unsupervised" in stderr and f"kill {launcher}" in stderr, stderr
    assert still_alive(job_pids, timeout_s=20.0) == set()  # the daemon went with the job
    assert "1 process(es) it left running were ended" in stderr, stderr
    (saved,) = (run_dir / "supervisor").glob("*/stdout.log")
    assert saved.read_text() == "started\nstill running after watch\n"


@pytest.mark.slow
def test_a_hang_command_that_floods_its_output_costs_watch_bounded_memory(tmp_path):
    num_bytes = 200_000_000
    job = write_program(tmp_path, """
        import time, grpo_doctor as gd
        gd.init()
        with gd.phase("reward"):
            time.sleep(3600)
    """, name="hangs.py")
    cmd = _watch_cmd(tmp_path / "run", "--hang-timeout", "2", "--second-look", "0", "--on-hang", "kill",
                     "--on-hang-exec", f"yes | head -c {num_bytes}; echo; echo the last line") + [sys.executable, str(job)]
    probe = ("import resource, subprocess, sys; "
             "status = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode; "
             "print(status, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", probe, *cmd], env=clean_env(OMP_NUM_THREADS="1"), cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    status, peak_kib = map(int, out.stdout.split())
    assert status == HANG_EXIT, out.stderr[-3000:]
    assert "Traceback" not in out.stderr
    print(f"watch peak RSS {peak_kib / 1024:.0f} MiB")
    assert peak_kib / 1024 < 150, peak_kib  # holding the output would take 200 MB and more
    (alerts,) = (tmp_path / "run" / "supervisor").glob("*/alerts.jsonl")
    (record,) = [json.loads(line) for line in alerts.read_text().splitlines()]
    assert record["target"] == "--on-hang-exec", record
    if record["ok"]:  # done within watch's end wait (10 s): all of it was read, and counted
        assert record["output_bytes"] == num_bytes + len("\nthe last line\n")
        assert record["output_tail"].endswith("y\n\nthe last line\n") and record["output_head"].startswith("y\ny\n")


def _cmdline(pid: int) -> str:
    try:
        return " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:  # gone between listing and reading
        return ""
