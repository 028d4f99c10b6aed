"""Failure signatures read from real-format logs: every kind, every wording, mangled by collectors."""
from __future__ import annotations

import json
from pathlib import Path

from grpo_doctor.logs.kinds import FIELDS
from grpo_doctor.logs.signatures import LineScanner, Signature, scan_file, scan_text

DATA = Path(__file__).resolve().parents[1] / "data" / "logs"
GiB, MiB, KiB = 2**30, 2**20, 2**10


def _scan(name: str) -> list[Signature]:
    return scan_file(DATA / name)


def _of(sigs: list[Signature], kind: str) -> list[Signature]:
    return [s for s in sigs if s.kind == kind]


def test_case4_oom_names_the_gpu_the_request_and_the_processes_sharing_it():
    sigs = _scan("cuda_oom_variants.log")
    rank7 = next(s for s in _of(sigs, "cuda-oom") if s.rank == 7)
    assert rank7.line_number == 14
    assert rank7.fields == {
        "wording": "new", "gpu": 7, "requested_bytes": int(1.42 * GiB), "total_bytes": int(79.35 * GiB),
        "free_bytes": int(950.19 * MiB),
        "processes": [{"pid": 48213, "used_bytes": int(29.59 * GiB)}, {"pid": 48377, "used_bytes": int(48.83 * GiB)}],
        "allowed_bytes": None, "allocated_bytes": int(27.01 * GiB), "private_pool_bytes": None,
        "reserved_unallocated_bytes": int(1.02 * GiB), "reserved_bytes": None}
    assert rank7.fields["requested_bytes"] == 1524713390
    rank6 = next(s for s in _of(sigs, "cuda-oom") if s.rank == 6)
    assert rank6.fields["processes"] == [{"pid": "this", "used_bytes": int(29.40 * GiB)},
                                         {"pid": 48376, "used_bytes": int(48.83 * GiB)}]


def test_interleaved_tracebacks_are_kept_apart_per_rank():
    tbs = {s.rank: s for s in _of(_scan("cuda_oom_variants.log"), "python-traceback")}
    assert set(tbs) == {6, 7}
    assert tbs[7].fields["exc_type"] == "torch.OutOfMemoryError"
    assert tbs[7].fields["message"].startswith("CUDA out of memory. Tried to allocate 1.42 GiB. GPU 7 ")
    assert tbs[7].fields["frames"] == [
        "/opt/ms-swift/swift/cli/rlhf.py:5 in <module>",
        "/opt/ms-swift/swift/trainers/rlhf_trainer/grpo_trainer.py:1210 in _generate_and_score_completions",
        "/usr/local/lib/python3.10/dist-packages/torch/nn/modules/module.py:1750 in _call_impl"]
    assert tbs[6].fields["frames"][-1].endswith("stage_1_and_2.py:2041 in backward")
    assert (tbs[7].line_number, tbs[6].line_number, tbs[7].fields["partial"]) == (1, 2, False)


def test_every_oom_wording_reads_its_numbers():
    ooms = {s.line_number: s.fields for s in _of(_scan("cuda_oom_variants.log"), "cuda-oom")}
    old = ooms[16]  # torch <= 2.0
    assert (old["wording"], old["gpu"], old["requested_bytes"], old["total_bytes"]) == ("old", 0, 36 * MiB, int(7.93 * GiB))
    assert (old["allocated_bytes"], old["free_bytes"], old["reserved_bytes"]) == (
        int(130.35 * MiB), int(47.06 * MiB), 188 * MiB)
    assert (old["processes"], old["reserved_unallocated_bytes"], old["allowed_bytes"]) == ([], None, None)
    assert (ooms[17]["allowed_bytes"], ooms[17]["allocated_bytes"]) == (int(11.85 * GiB), 0)  # a memory fraction
    capacty = ooms[18]  # torch 2.1 misspells "capacity"
    assert (capacty["wording"], capacty["total_bytes"], capacty["free_bytes"]) == ("new", int(39.38 * GiB), int(29.81 * MiB))
    pooled = ooms[19]  # PYTORCH_ALLOC_CONF wording, private pools, a fraction, NVML unable to attribute
    assert pooled["requested_bytes"] == 896 * KiB and pooled["free_bytes"] == 0
    assert pooled["processes"] == [{"pid": 2752205, "used_bytes": 0}, {"pid": 2752300, "used_bytes": 0}]
    assert (pooled["allowed_bytes"], pooled["private_pool_bytes"], pooled["reserved_unallocated_bytes"]) == (
        int(46.51 * GiB), 436 * MiB, int(120.54 * MiB))
    assert ooms[26] == {**{k: None for k in FIELDS["cuda-oom"]}, "wording": "cuda-error", "processes": []}


def test_an_oom_split_over_lines_by_a_collector_is_joined_back():
    split = next(s for s in _of(_scan("cuda_oom_variants.log"), "cuda-oom") if s.rank == 2)
    assert split.line_number == 20 and split.text.endswith("is reserved by PyTorch but unallocated.")
    assert split.fields["gpu"] == 2 and split.fields["requested_bytes"] == 304 * MiB
    assert split.fields["processes"] == [{"pid": "this", "used_bytes": int(93.84 * GiB)}]
    assert (split.fields["private_pool_bytes"], split.fields["reserved_unallocated_bytes"]) == (
        118 * MiB, int(744.36 * MiB))


def test_a_watchdog_timeout_names_the_ranks_that_reported_and_so_the_one_that_did_not():
    sigs = _scan("torchrun_nccl_timeout.log")
    timeouts = _of(sigs, "nccl-timeout")
    assert sorted(s.rank for s in timeouts) == [0, 1, 2, 3, 4, 5, 6]  # rank 7 never arrived; repeats folded
    assert {(s.fields["seq"], s.fields["op"], s.fields["timeout_ms"]) for s in timeouts} == {(1043, "ALLREDUCE", 600000)}
    rank3 = next(s for s in timeouts if s.rank == 3)
    assert rank3.fields == {"seq": 1043, "op": "ALLREDUCE", "numel_in": 1259621, "numel_out": 1259621,
                            "timeout_ms": 600000, "ran_for_ms": 600081, "rank": 3, "pg": None, "pg_desc": None}
    status = {s.rank: s.fields for s in _of(sigs, "nccl-watchdog-status")}
    assert set(status) == {0, 1, 2, 3}
    assert status[3] == {"seq": 1043, "last_enqueued": 1045, "last_started": None, "last_completed": 1042,
                         "rank": 3, "pg": 0, "pg_desc": "default_pg", "timed_out_rank": None}
    [stuck] = _of(sigs, "nccl-watchdog-stuck")
    assert (stuck.rank, stuck.fields["stuck_s"], stuck.fields["pg"]) == (6, 480, 0)


def test_torchrun_reports_every_failed_worker_and_its_root_cause():
    sigs = _scan("torchrun_nccl_timeout.log")
    agent, *summary = _of(sigs, "child-failed")
    assert agent.fields["origin"] == "agent" and agent.line_number == 27
    assert (agent.fields["local_rank"], agent.fields["pid"], agent.fields["exitcode"], agent.fields["signal"]) == (
        3, 40413, -6, "SIGABRT")
    assert agent.fields["binary"] == "/usr/bin/python3" and agent.fields["root_cause"] is None
    assert [(s.rank, s.fields["exitcode"], s.fields["signal"], s.fields["root_cause"]) for s in summary] == [
        (0, -6, "SIGABRT", False), (7, -9, "SIGKILL", False), (3, -6, "SIGABRT", True)]
    root = summary[-1].fields
    assert (root["host"], root["local_rank"], root["pid"], root["time"], root["script"], root["error_file"]) == (
        "node-1", 3, 40413, "2024-12-18_20:37:21", "train_grpo.py", "<N/A>")
    [launcher] = _of(sigs, "python-traceback")
    assert launcher.fields["exc_type"] == "torch.distributed.elastic.multiprocessing.errors.ChildFailedError"
    assert launcher.fields["message"] is None and launcher.fields["num_frames"] == 4


def test_older_watchdog_wordings_and_a_wrapped_timeout():
    sigs = _scan("nccl_timeout_older_torch.log")
    first, wrapped = _of(sigs, "nccl-timeout")
    assert (first.fields["numel_in"], first.fields["numel_out"], first.fields["op"]) == (None, None, "BROADCAST")
    assert (wrapped.line_number, wrapped.rank, wrapped.fields["rank"], wrapped.fields["pg"]) == (5, 2, 0, 1)
    assert (wrapped.fields["op"], wrapped.fields["numel_out"], wrapped.fields["ran_for_ms"]) == (
        "_REDUCE_SCATTER_BASE", 8388608, 600038)
    status = _of(sigs, "nccl-watchdog-status")  # "Exception ... detected" and "Timeout at" are one report
    assert [(s.rank, s.fields["seq"], s.fields["pg"], s.fields["pg_desc"]) for s in status] == [
        (1, 6463, 0, "default_pg"), (5, 88, 2, None)]
    assert (status[1].fields["rank"], status[1].fields["last_started"], status[1].fields["last_completed"]) == (1, 88, 87)


def test_nccl_errors_carry_the_last_error_printed_on_later_lines():
    sigs = _scan("nccl_errors.log")
    errors = {s.line_number: s for s in _of(sigs, "nccl-error")}
    system = errors[13]
    assert system.rank == 3 and system.fields["detail"] == "unhandled system error"
    assert (system.fields["file"], system.fields["line"], system.fields["nccl_version"]) == (
        "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp", 1970, "2.19.3")
    assert system.fields["error_code"] == "ncclSystemError"
    assert system.fields["last_error"] == "socketStartConnect: Connect to 127.0.1.1<43561> failed : Software caused connection abort"
    assert (system.fields["address"], system.fields["port"], system.fields["bad_interface"]) == ("127.0.1.1", 43561, True)
    assert (errors[17].fields["detail"], errors[17].fields["error_code"], errors[17].fields["last_error"]) == (
        "unhandled cuda error", "ncclUnhandledCudaError", None)
    remote = errors[19]
    assert (remote.rank, remote.fields["detail"], remote.fields["file"]) == (
        0, "remote process exited or there was a network error", None)
    assert remote.fields["last_error"] == "socketProgress: Connection closed by remote peer node-4<51234>"
    assert errors[23].fields["detail"] == "internal error - please report this issue to the NCCL developers"
    assert errors[23].fields["last_error"].startswith("Error while creating shared memory segment")  # one collapsed line
    assert errors[24].fields["detail"] == "invalid usage"  # the log's last line, finished by close()


def test_nccl_invalid_usage_keeps_its_code_and_drops_the_nccl_debug_warn_advice():
    [sig] = _of(scan_text(
        "[rank5]: RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, invalid usage "
        "(run with NCCL_DEBUG=WARN for details), NCCL version 2.19.3\n"
        "[rank5]: ncclInvalidUsage: This usually reflects invalid usage of NCCL library.\n"
        "[rank5]: Last error:\n"
        "[rank5]: Duplicate GPU detected : rank 5 and rank 4 both on CUDA device 3d000\n"), "nccl-error")
    assert (sig.fields["detail"], sig.fields["error_code"], sig.fields["nccl_version"]) == (
        "invalid usage", "ncclInvalidUsage", "2.19.3")
    assert sig.fields["last_error"].startswith("Duplicate GPU detected")


def test_nccl_warnings_flag_connects_to_a_wrong_interface():
    warns = {s.line_number: s.fields for s in _of(_scan("nccl_errors.log"), "nccl-warn")}
    assert (warns[2]["host"], warns[2]["pid"], warns[2]["device"]) == ("node-2", 40417, 7)
    assert [(warns[n]["address"], warns[n]["bad_interface"]) for n in (2, 3, 4, 5)] == [
        ("127.0.1.1", True), ("fe80::a00:27ff:fe4e:66a1%eth1", True), ("10.0.0.4", False), ("node-4", False)]
    assert warns[6]["cuda_error"] == "invalid argument"
    assert warns[7]["message"] == "[Proxy Service 3] Failed to execute operation Connect from rank 3, retcode 3"


def test_rendezvous_failures_say_what_failed_and_where():
    got = [(s.fields["error_type"], s.fields["host"], s.fields["port"], s.fields["errno"])
           for s in _of(_scan("rendezvous_failures.log"), "rendezvous-failure")]
    assert got == [
        ("client-connect-failed", "node-1", 29500, 111), ("client-connect-failed", "10.0.0.1", 29500, 110),
        ("DistNetworkError", "node-1", 29500, 113), ("client-connect-timeout", "127.0.0.1", 48315, None),
        ("address-in-use", "::", 29500, 98), ("server-listen-failed", None, None, None),
        ("address-in-use", "::", 29500, 98), ("DistStoreError", None, None, None),
        ("RendezvousConnectionError", None, None, None), ("RendezvousTimeoutError", None, None, None)]
    sigs = _of(_scan("rendezvous_failures.log"), "rendezvous-failure")
    assert sigs[0].fields["reason"] == "Connection refused" and sigs[3].fields["timeout_s"] == 600.0
    assert (sigs[7].fields["joined"], sigs[7].fields["expected"], sigs[7].fields["timeout_s"]) == (1, 2, 901.0)


def test_store_failures_without_a_socket_word_are_found_too(tmp_path):
    log = tmp_path / "node1.log"
    log.write_text("[E1121 10:00:00.000000 TCPStore.cpp:359] [c10d] TCP client failed to connect/validate to host "
                   "10.0.0.1:29500 - retrying (try=0, timeout=1800000ms, delay=1000ms): Connection refused\n"
                   "torch.distributed.DistNetworkError: Connection reset by peer\n")
    got = [(s.line_number, s.fields["error_type"], s.fields["host"], s.fields["port"]) for s in scan_file(log)]
    assert got == [(1, "client-connect-failed", "10.0.0.1", 29500), (2, "DistNetworkError", None, None)]


def test_host_oom_from_the_kernel_and_from_ray():
    sigs = _scan("host_oom.log")
    # OutOfMemoryError's first sentence is a kill of its own where no details follow; here they do
    # (the host-oom rule keeps the detailed one).
    low = [s for s in sigs if "running low on memory" in s.text]
    assert [(s.line_number, s.fields["source"], s.fields["used_bytes"]) for s in low] == [(6, "ray", None), (8, "ray", None)]
    kernel, cgroup, summary, ray, wrapped = [s for s in sigs if s not in low]
    assert (summary.fields["source"], summary.fields["num_killed"], summary.fields["node_ip"]) == ("ray", 1, "10.0.0.7")
    assert kernel.fields == {**{k: None for k in FIELDS["host-oom"]}, "source": "kernel", "pid": 40417,
                             "process": "python3", "anon_rss_bytes": 183521340 * KiB, "total_vm_bytes": 212894528 * KiB,
                             "file_rss_bytes": 71680 * KiB, "shmem_rss_bytes": 8192 * KiB, "cgroup": False}
    assert (cgroup.fields["pid"], cgroup.fields["process"], cgroup.fields["cgroup"]) == (51234, "pt_main_thread", True)
    assert (ray.fields["source"], ray.fields["node_ip"], ray.fields["threshold"]) == ("ray", "10.0.0.7", 0.95)
    assert (ray.fields["used_bytes"], ray.fields["total_bytes"]) == (int(59.42 * GiB), int(62.21 * GiB))
    assert (ray.fields["pid"], ray.fields["process"]) == (91085, "WorkerDict.__init__")
    assert (wrapped.line_number, wrapped.fields["used_bytes"], wrapped.fields["node_ip"]) == (9, int(113.81 * GiB), None)


def test_vllm_memory_lines_one_signature_each():
    got = {s.line_number: {k: v for k, v in s.fields.items() if v is not None} for s in _scan("vllm_memory.log")}
    assert got[1] == {"weights_bytes": int(14.9889 * GiB), "no_cache_memory": False}  # vLLM's "GB" is GiB
    assert got[3] == {"total_gpu_bytes": int(79.15 * GiB), "gpu_memory_utilization": 0.5, "no_cache_memory": False}
    assert got[4] == {"weights_bytes": int(14.99 * GiB), "non_torch_bytes": int(0.14 * GiB),
                      "activation_peak_bytes": int(1.45 * GiB), "kv_cache_bytes": int(23.00 * GiB), "no_cache_memory": False}
    assert got[5] == {"num_gpu_blocks": 26916, "num_cpu_blocks": 4681, "no_cache_memory": False}
    assert got[6] == {"total_gpu_bytes": int(44.35 * GiB), "peak_torch_bytes": int(9.52 * GiB),  # wrapped over 3 lines
                      "non_torch_bytes": int(0.34 * GiB), "kv_cache_bytes": int(8.77 * GiB),
                      "gpu_memory_utilization": 0.42, "no_cache_memory": False}
    assert got[9]["weights_bytes"] == int(8.3215 * GiB) and got[10]["kv_cache_bytes"] == int(4.5 * GiB)
    assert got[11]["kv_cache_tokens"] == 147456
    assert (got[12]["max_model_len"], got[12]["max_concurrency"]) == (32768, 4.5)
    assert got[13] == {"kv_cache_bytes": -int(1.25 * GiB), "no_cache_memory": True}
    assert got[14]["num_gpu_blocks"] == 0 and got[14]["no_cache_memory"]
    assert got[15] == {"no_cache_memory": True}
    assert got[16] == {"max_model_len": 32768, "kv_cache_tokens": 20000, "no_cache_memory": True}
    assert set(got) == {1, 3, 4, 5, 6, 9, 10, 11, 12, 13, 14, 15, 16}  # stats lines and "takes 5.61 s" say nothing


def test_a_log_mangled_by_collectors_still_reads():
    sigs = _scan("collector_mangled.log")
    tbs = {s.rank: s.fields for s in _of(sigs, "python-traceback")}
    assert set(tbs) == {0, 4, 8}  # Slurm labels + ANSI colours (0, 8); escaped newlines in JSON (4)
    assert tbs[0]["exc_type"] == tbs[8]["exc_type"] == "torch.distributed.DistBackendError"
    assert tbs[4] == {"exc_type": "ValueError", "message": "could not convert string to float: \\u0027\\u0027",
                      "frames": ["/workspace/reward.py:31 in score"], "num_frames": 1, "rank": 4, "partial": False}
    errors = _of(sigs, "nccl-error")  # the same error, once per rank
    assert [(s.rank, s.fields["error_code"], s.fields["address"]) for s in errors] == [
        (0, "ncclRemoteError", "node-2"), (8, "ncclRemoteError", "node-2")]
    assert [(s.rank, s.fields["ran_for_ms"]) for s in _of(sigs, "nccl-timeout")] == [(1, 1800024), (9, 1800031)]
    assert _of(sigs, "nccl-watchdog-status")[0].rank == 1  # behind CloudWatch and Ray prefixes
    failed = [(s.rank, s.fields["host"], s.fields["exitcode"], s.fields["signal"], s.fields["root_cause"])
              for s in _of(sigs, "child-failed")]
    assert failed == [(7, "node-3", -6, "SIGABRT", False), (4, "node-3", -9, "SIGKILL", True),  # block on one line
                      (12, "node-4", 1, None, True)]  # one entry per line


def test_a_paste_that_starts_mid_traceback_still_names_the_exception():
    tb, oom = _scan("pasted_mid_traceback.txt")
    assert (tb.kind, tb.line_number, tb.fields["partial"], tb.fields["exc_type"]) == (
        "python-traceback", 3, True, "torch.OutOfMemoryError")
    assert tb.fields["frames"] == [
        "/usr/local/lib/python3.10/dist-packages/deepspeed/runtime/engine.py:1899 in forward",
        "/usr/local/lib/python3.10/dist-packages/transformers/models/qwen2/modeling_qwen2.py:813 in forward"]
    assert oom.kind == "cuda-oom" and oom.fields["requested_bytes"] == int(4.64 * GiB)


def test_binary_garbage_and_empty_files_never_raise():
    [oom] = _scan("binary_garbage.log")
    assert (oom.kind, oom.rank, oom.fields["free_bytes"]) == ("cuda-oom", 2, 896 * KiB)
    assert _scan("empty.log") == [] and scan_text("") == []


def test_every_signature_has_its_kinds_fields_and_survives_json():
    for path in sorted(DATA.iterdir()):
        for sig in scan_file(path):
            assert list(sig.fields) == list(FIELDS[sig.kind]), (path.name, sig.kind)
            assert Signature.from_dict(json.loads(json.dumps(sig.to_dict()))) == sig


def test_feed_returns_each_signature_on_the_line_that_completes_it():
    scanner = LineScanner()
    lines = (DATA / "cuda_oom_variants.log").read_text().splitlines()
    completed = {i + 1: [s.kind for s in scanner.feed(line)] for i, line in enumerate(lines)}
    assert completed[14] == ["python-traceback", "cuda-oom"]  # rank 7's exception line ends both
    assert completed[20] == [] and completed[25] == ["cuda-oom"]  # the split OOM: on its last piece
    assert completed[26] == ["cuda-oom"]  # "CUDA error: out of memory" is whole on its line
    assert scanner.feed("[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB.") == []
    # The stream's next line cannot continue the message, so the message ends there as it is.
    [cut] = scanner.feed("[rank3]: Traceback (most recent call last):")
    assert (cut.kind, cut.line_number, cut.fields["requested_bytes"], cut.fields["total_bytes"]) == (
        "cuda-oom", 28, 2 * MiB, None)
    held = LineScanner()
    assert held.feed("[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB.") == []
    [oom] = held.close()  # a message still waiting for its continuation ends with the log
    assert (oom.kind, oom.rank, oom.fields["requested_bytes"], oom.fields["gpu"]) == ("cuda-oom", 3, 2 * MiB, None)


def test_close_reports_a_traceback_cut_off_by_a_kill():
    scanner = LineScanner()
    for line in ["[rank1]: Traceback (most recent call last):", '[rank1]:   File "train.py", line 9, in <module>',
                 "[rank1]:     step()", "[rank0]: {'loss': 0.1}"]:
        assert scanner.feed(line) == []
    [cut] = scanner.close()
    assert (cut.rank, cut.fields["exc_type"], cut.fields["frames"]) == (1, None, ["train.py:9 in <module>"])
    assert scanner.close() == [] and scanner.feed("[rank1]: RuntimeError: late") == []


def test_no_prefix_of_any_fixture_line_makes_the_scanner_raise():
    # Collectors cut lines anywhere; every cut of every fixture line must scan quietly.
    scanner = LineScanner()
    for path in sorted(DATA.iterdir()):
        for line in path.read_bytes().decode("utf-8", "replace").splitlines():
            for end in range(0, len(line) + 1, 3):
                scanner.feed(line[:end])
    scanner.close()


def test_a_paste_inside_torchruns_block_still_yields_its_entry_and_other_tables_do_not():
    [entry] = scan_text("  host      : node-3\n  rank      : 7 (local_rank: 7)\n  exitcode  : -9 (pid: 1)\n")
    assert (entry.kind, entry.rank, entry.fields["host"], entry.fields["signal"]) == ("child-failed", 7, "node-3", "SIGKILL")
    assert scan_text("server config:\n  host      : 0.0.0.0\n  port      : 8000\n") == []
