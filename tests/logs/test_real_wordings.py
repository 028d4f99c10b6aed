"""Families of real wording read from verbatim lines of public issues (tests/data/logs/real_wordings.log;
each line's source is in real_wordings.sources.md): launcher reports in every shape, the NCCL heartbeat
monitor, Ray and vLLM deaths, sleep-mode OOMs, CUDA faults, Slurm kills, terminal-wrapped lines."""
from __future__ import annotations

from pathlib import Path

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import host_oom, nccl_timeout, rank_crash
from grpo_doctor.logs.signatures import scan_file, scan_text

DATA = Path(__file__).resolve().parents[1] / "data" / "logs"
LOG = DATA / "real_wordings.log"


def _by_line():
    return {s.line_number: s for s in scan_file(LOG)}


def test_torchrun_agent_line_is_read_behind_glog_and_when_richs_handler_cuts_it():
    sigs = _by_line()
    glog, rich = sigs[1].fields, sigs[2].fields
    assert (glog["exitcode"], glog["local_rank"], glog["pid"], glog["signal"]) == (-9, 5, 2630, "SIGKILL")
    assert glog["binary"] == "/root/miniconda3/bin/python"
    assert (rich["exitcode"], rich["local_rank"], rich["pid"], rich["binary"]) == (-9, 5, 22, None)


def test_a_line_the_terminal_broke_mid_word_is_read_whole_with_the_rank_of_its_first_piece():
    sigs = _by_line()
    stuck = sigs[4]
    assert (stuck.kind, stuck.rank, stuck.fields["stuck_s"], stuck.fields["pg"]) == ("nccl-watchdog-stuck", 6, 480, 0)
    timeout = sigs[6]  # "opera" / "tion timeout: ... before ti" / "ming out."
    assert (timeout.kind, timeout.fields["seq"], timeout.fields["op"], timeout.fields["ran_for_ms"]) == (
        "nccl-timeout", 4, "BROADCAST", 1800010)


def test_ray_actor_death_reads_the_actor_identity_printed_under_it():
    died = _by_line()[9].fields
    assert (died["component"], died["exc_type"], died["pid"], died["ip"]) == ("ray-actor", "RayActorError", 12529,
                                                                            "10.166.157.101")
    assert died["actor_name"] == "5SO3sRWorkerDict_0:1" and died["exit_type"] == "SYSTEM_ERROR"


def test_sleep_mode_allocators_out_of_memory_is_a_cuda_oom_and_a_retry_is_not():
    assert _by_line()[18].fields["wording"] == "cumem"
    [sig] = [s for s in scan_text("[rank0]: RuntimeError: CUDA Error: out of memory at "
                                  "/workspace/csrc/cumem_allocator.cpp:62\n") if s.kind == "cuda-oom"]
    assert sig.fields["wording"] == "cumem"
    retry = ("[torch_memory_saver.cpp] cuMemCreate CUDA_ERROR_OUT_OF_MEMORY (may not be an issue e.g. torch "
             "allocator will free cache and retry)\n")
    assert not [s for s in scan_text(retry) if s.kind == "cuda-oom"]


def test_cuda_faults_name_the_cuda_error_and_out_of_memory_is_not_one():
    sigs = _by_line()
    assert sigs[20].fields["error"] == "an illegal memory access was encountered"
    assert sigs[21].fields["device_side_assert"]
    assert not [s for s in scan_text("RuntimeError: CUDA error: out of memory\n") if s.kind == "cuda-fault"]


def test_slurm_kills_are_host_ooms_of_the_cgroup_and_srun_task_ends_are_crashes():
    sigs = _by_line()
    assert (sigs[22].fields["source"], sigs[22].fields["num_killed"], sigs[22].fields["cgroup"]) == ("slurm", 1, True)
    assert sigs[25].fields["num_killed"] == 2 and sigs[23].fields["task"] == "4"
    assert (sigs[24].kind, sigs[24].rank, sigs[24].fields["signal"]) == ("child-failed", 289, "SIGBUS")


def test_findings_from_the_real_wordings():
    run = load_evidence([LOG])
    crashes = list(rank_crash.check(run, rank_crash.Config()))
    by_rank = {f.ranks: f for f in crashes}
    # torchrun's agent line alone names the local rank; -9 without a traceback: a host OOM kill is suspected
    killed = by_rank[(5,)]
    assert killed.evidence["suspected"] == "host-oom" and "dmesg" in killed.evidence["confirm_with"]
    assert killed.evidence["rank_is_local"]
    titles = " | ".join(f.title for f in crashes)
    assert "CUDA error: an illegal memory access was encountered" in titles
    assert "rollout engine died" in titles and "Ray actor 5SO3sRWorkerDict_0:1 died" in titles
    fault = next(f for f in crashes if f.evidence.get("cuda_fault"))
    assert "CUDA_LAUNCH_BLOCKING=1" in fault.hints[0]
    ooms = list(host_oom.check(run, host_oom.Config()))
    assert {f.evidence["source"] for f in ooms} == {"ray", "slurm"}
    assert any(f.evidence["num_killed"] == 2 for f in ooms)
    [timeout] = nccl_timeout.check(run, nccl_timeout.Config())
    assert isinstance(timeout.evidence["pg"], int) and isinstance(timeout.evidence["pg_desc"], str)


def test_a_timeout_stated_only_by_the_status_line_fills_last_enqueued_and_last_completed(tmp_path):
    log = tmp_path / "job.log"
    log.write_text(LOG.read_text().splitlines()[25] + "\n")
    [f] = nccl_timeout.check(load_evidence([log]), nccl_timeout.Config())
    assert (f.evidence["seq"], f.evidence["last_enqueued"], f.evidence["last_completed"]) == (87, 87, 86)
    assert f.ranks == (12,)


def test_the_heartbeat_monitor_alone_is_an_nccl_timeout_naming_the_ranks_it_stopped(tmp_path):
    log = tmp_path / "job.log"
    log.write_text("\n".join(LOG.read_text().splitlines()[3:5]) + "\n")
    [f] = nccl_timeout.check(load_evidence([log]), nccl_timeout.Config())
    assert (f.ranks, f.evidence["stuck_s"]) == ((6,), 480)
