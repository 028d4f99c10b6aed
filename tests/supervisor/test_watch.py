"""`grpo-doctor watch` end to end: real torchrun, real gloo ranks, real py-spy."""
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import clean_env, free_port, still_alive, tree_pids, write_program
from sample_files import load_samples

from grpo_doctor.supervisor.childenv import child_environment
from grpo_doctor.supervisor.sampler import ProcSample
from grpo_doctor.supervisor.watch import HANG_EXIT


def watch_cmd(run_dir: Path, *watch_args: str) -> list[str]:
    return [sys.executable, "-m", "grpo_doctor.cli.main", "watch", "--run-dir", str(run_dir), *watch_args, "--"]


def torchrun(nproc: int = 2) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}", "--master-addr=127.0.0.1",
            f"--master-port={free_port()}"]


def run_watch(cmd: list[str], tmp_path: Path, timeout_s: float = 240, **env):
    return subprocess.run(cmd, env=clean_env(OMP_NUM_THREADS="1", **env), cwd=tmp_path, capture_output=True,
                          text=True, timeout=timeout_s)


def run_watch_tracked(cmd: list[str], tmp_path: Path, timeout_s: float = 240, **env):
    """run_watch, also returning the pid of every process seen in watch's tree while it ran (torchrun and
    the ranks carry nothing of the run directory in their command lines: only their pids find them)."""
    proc = subprocess.Popen(cmd, env=clean_env(OMP_NUM_THREADS="1", **env), cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    seen: set[int] = set()
    deadline = time.monotonic() + timeout_s
    while True:
        seen |= tree_pids(proc.pid)
        try:
            stdout, stderr = proc.communicate(timeout=0.25)
            return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr), seen
        except subprocess.TimeoutExpired:
            if time.monotonic() > deadline:
                proc.kill()
                raise


def hang_report(run_dir: Path) -> dict:
    (path,) = (run_dir / "supervisor").glob("*/hang-1.json")
    return json.loads(path.read_text())


@pytest.mark.distributed
def test_a_stuck_rank_of_the_reference_trainer_is_named_with_its_phase_and_step(tmp_path):
    run_dir = tmp_path / "run"
    cmd = watch_cmd(run_dir, "--hang-floor", "5", "--hang-factor", "3", "--second-look", "1", "--on-hang", "kill")
    cmd += torchrun() + ["-m", "grpo_doctor_trainer.train", "--model", "tiny", "--steps", "8", "--dist-timeout-s", "600",
                         "--inject", "hang:rank=1,phase=rollout,step=3"]
    out, pids = run_watch_tracked(cmd, tmp_path)
    assert out.returncode == HANG_EXIT, out.stderr[-3000:]
    assert "step 2 loss" in out.stdout  # the job's output reached the terminal
    report = hang_report(run_dir)
    assert report["culprits"] == [1], json.dumps(report)[-3000:]
    assert report["ranks"]["1"]["open_phase"] == "rollout" and report["ranks"]["1"]["step"] == 3
    assert report["ranks"]["0"]["open_phase"] == "reward" and report["ranks"]["1"]["verdict"] == "stuck"
    for stack_dir in report["stack_dirs"]:
        assert {p.name for p in Path(stack_dir).glob("rank-*.json")} == {"rank-00000.json", "rank-00001.json"}
    assert "the others wait for: rank 1 in rollout at step 3" in out.stderr
    assert "grpo-doctor: CRITICAL hang: hang on" in out.stderr and f"report: {run_dir / 'report.html'}" in out.stderr
    html = (run_dir / "report.html").read_text()
    assert 'data-finding-id="hang"' in html and "The others wait for rank(s) 1" in html
    assert "rank 1 (odd one out): rollout, step 3, stuck" in html  # its stack, opened in the report
    findings = json.loads((run_dir / "findings.json").read_text())["findings"]
    assert findings[0]["id"] == "hang"
    # watch itself ended the job: torchrun's "Received 15 death signal" is no stop from outside
    assert not any("from outside" in f["title"] for f in findings), [f["title"] for f in findings]
    assert len(pids) >= 3, pids  # torchrun and both ranks at least
    assert still_alive(pids, timeout_s=5.0) == set()


@pytest.mark.distributed
def test_an_uninstrumented_script_gets_its_stuck_rank_named_from_the_stacks_alone(tmp_path):
    script = write_program(tmp_path, """
        import os, time, torch, torch.distributed as dist
        dist.init_process_group("gloo")
        rank = dist.get_rank()
        def load_next_batch():
            time.sleep(3600)
        for it in range(100):
            if rank == 1 and it == 3:
                load_next_batch()
            t = torch.ones(4)
            dist.all_reduce(t)
            print(f"rank {rank} iteration {it}", flush=True)
    """, name="plain.py")
    run_dir = tmp_path / "run"
    cmd = watch_cmd(run_dir, "--hang-timeout", "4", "--second-look", "1", "--on-hang", "kill") + torchrun() + [str(script)]
    out, pids = run_watch_tracked(cmd, tmp_path)
    assert out.returncode == HANG_EXIT, out.stderr[-3000:]
    report = hang_report(run_dir)
    assert report["culprits"] == [1], json.dumps(report)[-3000:]
    assert any("all_reduce" in line and "rank 0" in line for line in report["groups"])
    assert any("load_next_batch" in line and "rank 1" in line for line in report["groups"])
    assert not (run_dir / "ranks").exists()  # nothing was instrumented
    assert len(pids) >= 3, pids  # torchrun and both ranks at least
    assert still_alive(pids, timeout_s=5.0) == set()


def test_by_default_a_reported_hang_leaves_the_job_running_to_its_own_exit_status(tmp_path):
    # --on-hang report (the default): the stall is investigated and reported, and the job, which was
    # only slow, goes on and ends as it would have without watch.
    job = write_program(tmp_path, """
        import sys, time, grpo_doctor as gd
        gd.init()
        for step in range(3):
            with gd.phase("rollout"):
                time.sleep(0.2)
            gd.step(step, loss=1.0)
        with gd.phase("rollout"):
            print("stalling", flush=True)
            time.sleep(10)
        print("resumed", flush=True)
        sys.exit(3)
    """, name="slow.py")
    run_dir = tmp_path / "run"
    out, pids = run_watch_tracked(watch_cmd(run_dir, "--hang-timeout", "2", "--second-look", "1", "--no-report")
                                  + [sys.executable, str(job)], tmp_path)
    assert out.returncode == 3, out.stderr[-3000:]  # the job's own status, not HANG_EXIT
    assert out.stdout.split() == ["stalling", "resumed"]
    assert "taking the stacks of rank(s) 0" in out.stderr and "ending the job" not in out.stderr
    report = hang_report(run_dir)
    assert report["ranks"]["0"]["open_phase"] == "rollout" and report["ranks"]["0"]["step"] == 3
    summary = json.loads(next((run_dir / "supervisor").glob("*/summary.json")).read_text())
    assert (summary["exit_status"], summary["hang_ended_by_watch"]) == (3, False) and summary["num_hangs"] >= 1
    assert summary["ranks"]["0"]["ended"] == "exit"
    assert still_alive(pids, timeout_s=10.0) == set()


def test_a_rank_found_after_a_long_silent_start_is_not_taken_for_a_hang(tmp_path):
    # The launcher is silent for longer than the timeout before the rank appears, and the rank
    # computes silently (as when importing torch on a loaded machine): no hang until it is idle.
    rank = "import time\nend = time.monotonic() + 4\nwhile time.monotonic() < end: pass\nprint('rank done', flush=True)"
    launcher = f"sleep 4; RANK=0 exec {sys.executable} -c \"{rank}\""
    out = run_watch(watch_cmd(tmp_path / "run", "--hang-timeout", "2", "--no-report") + ["sh", "-c", launcher], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "rank done" in out.stdout and "taking the stacks" not in out.stderr
    assert not list((tmp_path / "run" / "supervisor").glob("*/hang-*.json"))
    # The shell exec'ed into the rank: same pid, new program, found all the same.
    (samples,) = (tmp_path / "run" / "supervisor").glob("*/samples.jsonl")
    assert any(isinstance(s, ProcSample) and s.rank == 0 and (s.cpu_pct or 0) > 0 for s in load_samples(samples))


@pytest.mark.distributed
def test_a_rank_killed_with_sigkill_is_named_with_its_last_phase(tmp_path):
    run_dir = tmp_path / "run"
    cmd = watch_cmd(run_dir) + torchrun() + ["-m", "grpo_doctor_trainer.train", "--model", "tiny", "--steps", "6",
                                             "--inject", "crash:rank=1,step=2,how=sigkill,phase=backward"]
    out = run_watch(cmd, tmp_path)
    assert out.returncode == 1  # torchrun's own status, passed through
    summary = json.loads(next((run_dir / "supervisor").glob("*/summary.json")).read_text())
    assert "backward at step 2" in (summary["ranks"]["1"]["gone"] or "")
    assert "rank 1 pid" in out.stderr and "SIGKILL" in out.stderr
    assert summary["signatures"].get("child-failed")


@pytest.mark.distributed
def test_an_uninstrumented_job_that_ends_cleanly_is_not_called_a_crash(tmp_path):
    """Its ranks write no end record: the launcher's exit status 0 is what says they ended well."""
    script = write_program(tmp_path, """
        import torch.distributed as dist
        dist.init_process_group("gloo")
        dist.barrier()
        print("done", flush=True)
    """, name="plain.py")
    run_dir = tmp_path / "run"
    out = run_watch(watch_cmd(run_dir) + torchrun() + [str(script)], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "gone" not in out.stderr and "rank-crash" not in out.stderr, out.stderr[-3000:]
    findings = json.loads((run_dir / "findings.json").read_text())["findings"]
    assert not [f for f in findings if f["id"] == "rank-crash"], findings


@pytest.mark.distributed
def test_an_uninstrumented_rank_that_exits_while_the_others_run_is_said_live(tmp_path):
    script = write_program(tmp_path, """
        import os, time
        time.sleep(3 if os.environ["RANK"] == "1" else 12)
    """, name="plain.py")
    run_dir = tmp_path / "run"
    out = run_watch(watch_cmd(run_dir) + torchrun() + [str(script)], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    said = [line for line in out.stderr.splitlines() if "rank 1 pid" in line and "while other ranks run on" in line]
    assert said and "not instrumented" in said[0], out.stderr[-3000:]


@pytest.mark.distributed
def test_ctrl_c_to_watch_leaves_no_process_behind(tmp_path):
    run_dir = tmp_path / "run"
    cmd = watch_cmd(run_dir) + torchrun() + ["-m", "grpo_doctor_trainer.train", "--model", "tiny", "--steps", "10000"]
    proc = subprocess.Popen(cmd, env=clean_env(OMP_NUM_THREADS="1"), cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not list((run_dir / "ranks").glob("rank-*.jsonl")) and time.monotonic() < deadline:
            time.sleep(0.5)
        time.sleep(2)
        pids = tree_pids(proc.pid)  # torchrun and both ranks: neither carries the run directory in its command
        assert len(pids) >= 3, pids
        proc.send_signal(signal.SIGINT)
        time.sleep(1)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    assert still_alive(pids, timeout_s=5.0) == set()


def test_exit_statuses_are_passed_through(tmp_path):
    assert run_watch(watch_cmd(tmp_path / "a") + [sys.executable, "-c", "raise SystemExit(7)"], tmp_path).returncode == 7
    killed = run_watch(watch_cmd(tmp_path / "b") + ["sh", "-c", "kill -TERM $$"], tmp_path)
    assert killed.returncode == 128 + signal.SIGTERM


def test_a_command_that_does_not_exist_is_one_line_and_127(tmp_path):
    out = run_watch(watch_cmd(tmp_path / "run") + ["no-such-launcher", "--x"], tmp_path)
    assert out.returncode == 127
    assert out.stderr.splitlines()[0] == "grpo-doctor: error: command not found: 'no-such-launcher'"
    assert "Traceback" not in out.stderr


def test_output_of_a_non_python_command_passes_through_and_is_saved(tmp_path):
    cmd = watch_cmd(tmp_path / "run") + ["sh", "-c", "printf 'hello\\r\\nno newline'; echo oops >&2"]
    out = subprocess.run(cmd, env=clean_env(), cwd=tmp_path, capture_output=True, timeout=60)
    assert out.returncode == 0
    assert out.stdout == b"hello\r\nno newline" and b"oops\n" in out.stderr
    (saved,) = (tmp_path / "run" / "supervisor").glob("*/stdout.log")
    assert saved.read_bytes() == b"hello\r\nno newline"


def test_the_job_gets_the_run_dir_and_flight_recorder_but_user_settings_win(tmp_path):
    code = ("import os; print(os.environ['GRPO_DOCTOR_RUN_DIR'], os.environ['TORCH_NCCL_TRACE_BUFFER_SIZE'], "
            "os.environ['TORCH_NCCL_DUMP_ON_TIMEOUT'], 'TORCH_FR_BUFFER_SIZE' in os.environ)")
    out = run_watch(watch_cmd(tmp_path / "run") + [sys.executable, "-c", code], tmp_path, TORCH_NCCL_TRACE_BUFFER_SIZE="5")
    assert out.stdout.split() == [str((tmp_path / "run").resolve()), "5", "1", "False"]
    run_json = json.loads((tmp_path / "run" / "run.json").read_text())
    (host,) = run_json["hosts"].values()
    assert "TORCH_NCCL_TRACE_BUFFER_SIZE" not in host["env_set_by_watch"]
    assert host["env_set_by_watch"]["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"


def test_flight_recorder_variables_use_the_names_of_the_installed_torch(tmp_path):
    new, _ = child_environment({}, tmp_path, torch_version="2.13.0+cpu")
    old, _ = child_environment({}, tmp_path, torch_version="2.5.1")
    assert new["TORCH_FR_BUFFER_SIZE"] == "2000" and "TORCH_NCCL_TRACE_BUFFER_SIZE" not in new
    assert new["TORCH_FR_DUMP_TEMP_FILE"].endswith("fr/nccl_trace_rank_")
    assert old["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "2000" and "TORCH_FR_BUFFER_SIZE" not in old


def test_a_cuda_oom_in_the_output_is_noted_live(tmp_path):
    message = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.42 GiB. GPU 7 has a total capacity "
               "of 79.35 GiB of which 950.19 MiB is free. Process 1234 has 29.59 GiB memory in use. Of the allocated "
               "memory 20.00 GiB is allocated by PyTorch, and 1.00 GiB is reserved by PyTorch but unallocated.")
    out = run_watch(watch_cmd(tmp_path / "run") + [sys.executable, "-c", f"print({message!r})"], tmp_path)
    assert "grpo-doctor: seen cuda-oom" in out.stderr
    (sigs,) = (tmp_path / "run" / "supervisor").glob("*/signatures.jsonl")
    assert any(json.loads(line)["kind"] == "cuda-oom" for line in sigs.read_text().splitlines())


def test_watches_on_two_hosts_share_one_run_directory(tmp_path):
    if subprocess.run(["unshare", "--uts", "true"], capture_output=True).returncode != 0:
        pytest.skip("UTS namespaces are not permitted here (needs root or CAP_SYS_ADMIN)")
    run_dir = tmp_path / "shared"
    procs = []
    for host in ("node-a", "node-b"):
        inner = " ".join(watch_cmd(run_dir) + [sys.executable, "-c", "'print(42)'"])
        procs.append(subprocess.Popen(["unshare", "--uts", "sh", "-c", f"hostname {host} && exec {inner}"],
                                      env=clean_env(), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    for proc in procs:
        assert proc.wait(timeout=60) == 0, proc.stderr.read()
    run_json = json.loads((run_dir / "run.json").read_text())
    assert sorted(run_json["hosts"]) == ["node-a", "node-b"]
    for host in ("node-a", "node-b"):
        assert (run_dir / "supervisor" / host / "stdout.log").read_text() == "42\n"
        assert json.loads((run_dir / "supervisor" / host / "summary.json").read_text())["host"] == host


@pytest.mark.slow
def test_hundreds_of_megabytes_of_output_pass_through_in_bounded_memory(tmp_path):
    writer = ("import sys\nout = sys.stdout.buffer\nout.write(b'y' * (20 << 20))\n"
              "for _ in range(180):\n    out.write((b'x' * 1023 + b'\\n') * 1024)\n")
    cmd = watch_cmd(tmp_path / "run", "--no-report") + [sys.executable, "-c", writer]  # the streaming alone
    probe = ("import resource, subprocess, sys; "
             "subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, check=True); "
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", probe, *cmd], env=clean_env(), cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    peak_rss_mib = int(out.stdout.strip()) / 1024
    assert peak_rss_mib < 150  # watch streamed 200 MB; holding it would need more than that
    (saved,) = (tmp_path / "run" / "supervisor").glob("*/stdout.log")
    assert saved.stat().st_size == (20 << 20) + 180 * 1024 * 1024


def test_a_closed_terminal_pipe_does_not_block_the_job(tmp_path):
    writer = "import sys\nfor i in range(200000):\n    print('line', i)\nprint('done', file=sys.stderr)"
    cmd = " ".join(watch_cmd(tmp_path / "run") + [sys.executable, "-c", f'"{writer}"'])
    out = subprocess.run(["bash", "-c", f"set -o pipefail; {cmd} | head -c 1000 > /dev/null"], env=clean_env(),
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert "done" in out.stderr  # the job ran to its end
    (saved,) = (tmp_path / "run" / "supervisor").glob("*/stdout.log")
    assert saved.read_text().splitlines()[-1] == "line 199999"


def test_a_record_with_a_malformed_step_does_not_stop_supervision(tmp_path):
    # A step given as a string, then a good record: the bad one is counted and skipped where the records
    # are read, and the rank is followed on. (The conftest fails the test if watch's last-resort guard,
    # which logs to watch-errors.log, had to catch it instead.)
    good = {'schema': 1, 'kind': 'step', 'rank': 0, 'host': 'h', 'pid': 1, 'step': 5, 't': 2.0, 'mono': 2.0,
            'metrics': {}}
    bad = dict(good, step='2', t=1.0, mono=1.0)
    writer = ("import json, os, time; d = os.environ['GRPO_DOCTOR_RUN_DIR'] + '/ranks'; os.makedirs(d)\n"
              f"open(d + '/rank-00000.jsonl', 'w').write(json.dumps({bad!r}) + '\\n' + json.dumps({good!r}) + '\\n')\n"
              "time.sleep(3); print('finished')")
    out = run_watch(watch_cmd(tmp_path / "run") + [sys.executable, "-c", writer], tmp_path)
    assert out.returncode == 0 and out.stdout.strip() == "finished", out.stderr[-3000:]
    assert "internal error" not in out.stderr
    summary = json.loads(next((tmp_path / "run" / "supervisor").glob("*/summary.json")).read_text())
    assert summary["bad_event_lines"] == 1
    assert summary["ranks"]["0"]["step"] == 6  # the record after the bad one was read: step 5 done
