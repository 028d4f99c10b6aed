import dataclasses

from rundata import LOGS, header, write_rank

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import host_oom

KIB, GIB = 2**10, 2**30
DMESG = ("[1834121.594190] Out of memory: Killed process 40417 (python3) total-vm:212894528kB, anon-rss:183521340kB, "
         "file-rss:71680kB, shmem-rss:8192kB, UID:1000 pgtables:371820kB oom_score_adj:0\n")
CHILD_FAILED = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-01-07_03:14:15
  host      : node-3
  rank      : 5 (local_rank: 5)
  exitcode  : -9 (pid: 40417)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 40417
============================================================
"""


def _findings(*paths):
    findings = list(host_oom.check(load_evidence(list(paths)), host_oom.Config()))
    assert all(f.id == "host-oom" and f.severity == "critical" for f in findings)
    return findings


def test_the_kernel_oom_killer_is_host_ram_not_the_gpu():
    by_pid = {f.evidence["pid"]: f for f in _findings(LOGS / "host_oom.log")}
    f = by_pid[40417]
    ev = f.evidence
    assert (ev["process"], ev["anon_rss_bytes"], ev["cgroup"], ev["source"], ev["rank"]) == (
        "python3", 183521340 * KIB, False, "kernel", None)
    assert f.ranks == () and "OOM killer" in f.title and "175.0 GiB" in f.title
    assert "offload_optimizer" in f.hints[0] and "12-16 bytes per parameter" in f.hints[0]
    assert any("dataloader_num_workers" in h for h in f.hints) and host_oom.HINT_VLLM_HOST in f.hints
    assert "V1 engine ignores it" in host_oom.HINT_VLLM_HOST  # lowering swap_space is no remedy today
    assert host_oom.HINT_CGROUP not in f.hints


def test_a_cgroup_limit_asks_to_raise_the_container_limit_first():
    f = next(f for f in _findings(LOGS / "host_oom.log") if f.evidence["pid"] == 51234)
    assert f.evidence["cgroup"] is True and "cgroup" in f.title
    assert "docker run --memory" in f.hints[0] and "resources.limits.memory" in f.hints[0]


def test_rays_memory_monitor_reports_the_node_figures():
    ray = [f for f in _findings(LOGS / "host_oom.log") if f.evidence["source"] == "ray"]
    assert [f.evidence["pid"] for f in ray] == [91085, None]
    ev = ray[0].evidence
    assert (ev["process"], ev["node_ip"], ev["threshold"]) == ("WorkerDict.__init__", "10.0.0.7", 0.95)
    assert round(ev["used_bytes"] / GIB, 2) == 59.42 and round(ev["total_bytes"] / GIB, 2) == 62.21
    assert "Ray's memory monitor" in ray[0].title and "RAY_memory_usage_threshold" in ray[0].hints[0]


def test_the_killed_pid_is_linked_to_its_rank_through_torchruns_sigkill_report(tmp_path):
    (tmp_path / "dmesg.log").write_text(DMESG)
    (tmp_path / "torchrun.log").write_text(CHILD_FAILED)
    [f] = _findings(tmp_path / "dmesg.log", tmp_path / "torchrun.log")
    assert (f.ranks, f.hosts, f.evidence["rank"]) == ((5,), ("node-3",), 5)
    assert f.title.startswith("host OOM: the kernel's OOM killer killed rank 5 (pid 40417, python3)")


def test_the_killed_pid_is_linked_to_its_rank_through_the_rank_headers(tmp_path):
    run_dir = tmp_path / "run"
    write_rank(run_dir, 1, [dataclasses.replace(header(1, 2, host="node-0"), pid=40417)])
    (tmp_path / "dmesg.log").write_text(DMESG)
    [f] = _findings(run_dir, tmp_path / "dmesg.log")
    assert (f.ranks, f.hosts, f.evidence["rank"]) == ((1,), ("node-0",), 1)


def test_a_pid_two_hosts_share_is_not_pinned_on_either_rank(tmp_path):
    run_dir = tmp_path / "run"
    write_rank(run_dir, 0, [dataclasses.replace(header(0, 4, host="node-0"), pid=40417)])
    write_rank(run_dir, 2, [dataclasses.replace(header(2, 4, host="node-1"), pid=40417)])
    (tmp_path / "dmesg.log").write_text(DMESG)  # dmesg names no host
    [f] = _findings(run_dir, tmp_path / "dmesg.log")
    assert f.ranks == () and f.evidence["rank"] is None


def test_the_same_kill_in_dmesg_and_syslog_is_one_finding_and_other_logs_give_none(tmp_path):
    (tmp_path / "kern.log").write_text(DMESG + DMESG)
    assert len(_findings(tmp_path / "kern.log")) == 1
    assert _findings(LOGS / "cuda_oom_variants.log") == []


def test_a_memoryerror_of_a_rank_is_a_host_oom_on_that_rank_with_its_phase_and_step():
    # demo --inject oom:rank=1,step=2: a real MemoryError under an address-space limit (RLIMIT_AS).
    inject = LOGS.parent / "inject" / "oom"
    [f] = _findings(inject)
    assert (f.ranks, f.phase, f.step, f.hosts) == ((1,), "forward", 2, ("vm",))
    assert (f.evidence["source"], f.evidence["exc_type"], f.evidence["log"]) == ("python", "MemoryError", "event-log")
    assert "MemoryError" in f.title and "ulimit -v" in f.hints[0]


def test_a_memoryerror_traceback_in_a_log_is_a_host_oom_and_a_cuda_oom_is_not():
    # What that demo printed: torchrun's output with rank 1's MemoryError traceback, no run directory.
    [f] = _findings(LOGS.parent / "inject" / "oom_console.log")
    assert f.ranks == (1,) and f.evidence["source"] == "python" and f.evidence["exc_type"] == "MemoryError"
    assert not [f for f in _findings(LOGS / "cuda_oom_variants.log") if f.evidence["source"] == "python"]
