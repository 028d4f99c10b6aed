"""Families of real wording read from verbatim lines of public issues (tests/data/logs/real_wordings.log;
each line's source is in real_wordings.sources.md): launcher reports in every shape, the NCCL heartbeat
monitor, Ray and vLLM deaths, sleep-mode OOMs, CUDA faults, Slurm kills, terminal-wrapped lines."""
from __future__ import annotations

from pathlib import Path

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import gpu_fault, host_oom, nccl_timeout, rank_crash
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


def test_ray_task_headers_name_the_rank_from_the_actors_repr():
    header = _by_line()[27]
    assert (header.kind, header.rank, header.fields["component"]) == ("worker-died", 13, "ray-actor")
    assert (header.fields["class_name"], header.fields["actor_name"], header.fields["pid"]) == (
        "DTensorPolicyWorkerV2", "lm_policy-1-5", 18211)


def test_torchrun_agent_stopped_by_a_signal_in_every_shape_names_the_signal():
    sigs = _by_line()
    assert [(sigs[n].fields["component"], sigs[n].fields["exc_type"]) for n in (28, 29, 30)] == [
        ("launcher-signal", "SIGTERM"), ("launcher-signal", "SIGINT"), ("launcher-signal", "SIGHUP")]


def test_child_process_deaths_read_the_raw_wait_status_and_sglangs_sigquit():
    sigs = _by_line()
    assert (sigs[31].fields["exitcode"], sigs[31].fields["pid"], sigs[31].fields["exc_type"]) == (1, 97721, "exit code 1")
    assert sigs[32].fields["component"] == "child-process"


def test_vllm_engine_core_deaths_in_every_wording_are_engine_deaths():
    sigs = _by_line()
    assert {sigs[n].fields["component"] for n in (33, 34, 35)} == {"vllm-engine"}
    assert sigs[35].fields["actor_name"] == "EngineCore_0"


def test_ray_memory_monitor_through_the_killed_tasks_error_is_a_host_oom():
    assert (_by_line()[36].kind, _by_line()[36].fields["source"]) == ("host-oom", "ray")


def test_a_status_line_a_collector_split_is_joined_back_with_its_counts():
    status = _by_line()[37]
    assert (status.rank, status.fields["seq"], status.fields["last_enqueued"], status.fields["last_completed"]) == (
        3, 2070, 2082, 2069)


def test_an_nccl_error_behind_the_default_groups_tag_names_that_rank_and_a_subgroups_does_not():
    assert _by_line()[39].rank == 1
    [sub] = [s for s in scan_text("[PG ID 2 PG GUID 5(TP) Rank 1] Process group watchdog thread terminated with "
                                  "exception: NCCL error: remote process exited or there was a network error\n")
             if s.kind == "nccl-error"]
    assert (sub.rank, sub.fields["pg"]) == (None, 2)


def test_old_tcpstores_connect_timeout_is_a_rendezvous_failure_with_its_timeout():
    connect = _by_line()[43]
    assert (connect.kind, connect.fields["error_type"], connect.fields["timeout_s"]) == (
        "rendezvous-failure", "client-connect-timeout", 60.0)


def test_a_terminal_padded_paste_is_cut_where_a_keyword_follows_the_padding():
    log = DATA.parent / "corpus" / "nemo-rl" / "dtensor-policy-worker-creation-actor-died.log"
    [died] = [s for s in scan_file(log) if s.kind == "worker-died"]
    assert (died.rank, died.fields["exc_type"], died.fields["pid"]) == (2, "ActorDiedError", 2791977)
    # a right-aligned location after padding (Rich) is no line of its own
    assert scan_text("failed (exitcode: -9) local_rank: 5 (pid: 22) of" + " " * 40 + "api.py:673\n")[0].fields[
        "local_rank"] == 5


def test_findings_from_the_new_families():
    crashes = list(rank_crash.check(load_evidence([LOG]), rank_crash.Config()))
    titles = " | ".join(f.title for f in crashes)
    assert "torchrun's agent received SIGTERM from outside" in titles  # the first of the three, one finding
    assert "a child process died (exit code 1, pid 97721)" in titles
    ranked = next(f for f in crashes if f.ranks == (13,))
    assert ranked.evidence["component"] == "ray-actor" and ranked.severity == "critical"
    ooms = list(host_oom.check(load_evidence([LOG]), host_oom.Config()))
    assert any(f.evidence.get("source") == "ray" for f in ooms)


def test_the_drivers_xid_lines_behind_dmesg_syslog_and_journal_prefixes():
    sigs = _by_line()
    dbe, retire, gsp = sigs[44].fields, sigs[45].fields, sigs[46].fields
    assert (dbe["xid"], dbe["pci_bus_id"], dbe["pid"], dbe["process"], dbe["node"]) == (48, "0000:07:00", None, None,
                                                                                      "worker4")
    assert dbe["detail"].startswith("An uncorrectable double bit error (DBE)") and retire["xid"] == 64
    assert (gsp["xid"], gsp["pci_bus_id"], gsp["pid"], gsp["process"], gsp["node"]) == (119, "0000:61:00", 905052,
                                                                                      "python", None)
    lost, again = sigs[47].fields, sigs[48].fields
    assert (lost["xid"], lost["pid"], lost["wording"], again["wording"]) == (79, None, "xid", "fallen-off-bus")
    assert lost["pci_bus_id"] == again["pci_bus_id"] == "0000:2b:00"
    three = sigs[49]  # "The NVIDIA GPU 0000:b3:00.0" / "(PCI ID: ...) installed ..." / "fallen off the bus ..."
    assert (three.kind, three.fields["xid"], three.fields["pci_bus_id"]) == ("gpu-fault", 79, "0000:b3:00")
    assert 50 not in sigs and 51 not in sigs
    follow, ctxsw = sigs[52].fields, sigs[53].fields
    assert (follow["xid"], follow["pid"], follow["process"]) == (45, 1818990, "python3")
    assert (ctxsw["xid"], ctxsw["process"], ctxsw["detail"]) == (109, "pt_main_thread", "Ch 00000008, errorString CTX "
                                                                 "SWITCH TIMEOUT, Info 0x58005")
    assert sigs[54].fields["error"] == "uncorrectable ECC error encountered"


def test_gpu_faults_from_the_real_wordings():
    found = {f.evidence["pci_bus_id"]: f for f in gpu_fault.check(load_evidence([LOG]), gpu_fault.Config())}
    ecc = found["0000:07:00"]
    assert (ecc.severity, ecc.hosts, ecc.evidence["xids"]) == ("critical", ("worker4",), [48, 64])
    assert [d["mnemonic"] for d in ecc.evidence["xid_details"]] == ["ROBUST_CHANNEL_GPU_ECC_DBE",
                                                                    "INFOROM_DRAM_RETIREMENT_FAILURE"]
    assert found["0000:2b:00"].evidence["xids"] == [79]  # the Xid line and its "fallen off the bus": one event
    assert found["0000:b3:00"].evidence["xids"] == [79] and found["0000:61:00"].evidence["pids"] == [905052]
    assert (found["0000:dc:00"].severity, found["0000:dc:00"].evidence["hardware"]) == ("info", False)
    [cuda] = [f for f in found.values() if f.evidence["cuda_errors"]]
    assert cuda.severity == "critical" and cuda.evidence["sources"] == ["cuda-error"]
