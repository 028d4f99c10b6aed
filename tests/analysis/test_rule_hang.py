from rundata import write_hang

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import hang


def _report(host="node-0"):
    # The shape grpo_doctor.schema.watch_files.HangReport.to_dict writes.
    return {
        "host": host, "detected_t": 1700000000.0,
        "ranks": {"0": {"pid": 11, "verdict": "stuck", "open_phase": "reward", "step": 2, "idle_s": 31.0,
                        "timeout_s": 30.0},
                  "1": {"pid": 12, "verdict": "stuck", "open_phase": "rollout", "step": 2, "idle_s": 33.5,
                        "timeout_s": 30.0}},
        "groups": ["rank 0: all_reduce <- reward", "rank 1: broadcast <- rollout"], "culprits": [1], "odd_ranks": [1],
        "stack_dirs": ["stacks/hang-a", "stacks/hang-b"], "stack_errors": {}, "ptrace_denied": False,
        "flight_recorder_files": [], "gpus": [],
    }


def test_hang_names_the_culprit_rank_its_phase_and_step(tmp_path):
    write_hang(tmp_path, "node-0", 1, _report())
    [f] = hang.check(load_evidence([tmp_path]), hang.Config())
    assert (f.id, f.severity, f.ranks, f.hosts, f.phase, f.step) == ("hang", "critical", (1,), ("node-0",), "rollout", 2)
    assert f.evidence["culprits"] == [1] and f.evidence["stuck_ranks"] == [0, 1]
    assert f.evidence["max_idle_s"] == 33.5 and f.evidence["open_phases"] == {0: "reward", 1: "rollout"}
    assert any("TORCH_NCCL_DUMP_ON_TIMEOUT=1" in h for h in f.hints)


def test_without_culprits_the_stuck_ranks_are_named(tmp_path):
    report = _report() | {"culprits": []}
    report["ranks"]["1"]["verdict"] = "moving"
    write_hang(tmp_path, "node-0", 1, report)
    write_hang(tmp_path, "node-1", 2, _report("node-1"))
    findings = list(hang.check(load_evidence([tmp_path]), hang.Config()))
    assert [(f.hosts, f.ranks) for f in findings] == [(("node-0",), (0,)), (("node-1",), (1,))]


def _with_headers(tmp_path, nproc_node1):
    from rundata import header, write_rank
    for rank, nproc in ((0, "2"), (2, nproc_node1)):
        launch = {"NNODES": "2", "NPROC_PER_NODE": nproc, "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}
        write_rank(tmp_path, rank, [header(rank, launch=launch)])
    write_hang(tmp_path, "node-0", 1, _report())
    [f] = [f for f in hang.check(load_evidence([tmp_path]), hang.Config())]
    return f


def test_make_launch_identical_is_advised_only_when_settings_differ_between_nodes(tmp_path):
    same = _with_headers(tmp_path / "same", "2")
    assert hang.HINT_LAUNCH not in same.hints and not any("identical on every node" in h for h in same.hints)
    differ = _with_headers(tmp_path / "differ", "1")
    assert hang.HINT_LAUNCH in differ.hints and "NPROC_PER_NODE" in hang.HINT_LAUNCH


def test_the_timeout_hint_names_each_frameworks_default_and_never_advises_600_s(tmp_path):
    write_hang(tmp_path, "node-0", 1, _report())
    [f] = hang.check(load_evidence([tmp_path]), hang.Config())
    [timeout] = [h for h in f.hints if "timeout" in h.lower() and "ddp_timeout" in h]
    assert "--ddp_timeout 600" not in timeout and "1800 s" in timeout and "actor_rollout_ref.nccl_timeout" in timeout
    assert "18000000 s" in timeout  # ms-swift: a hang never errors unless it is set
    [fr] = [h for h in f.hints if "TORCH_FR_BUFFER_SIZE" in h]
    assert "TORCH_NCCL_TRACE_BUFFER_SIZE" in fr and "TORCH_NCCL_ASYNC_ERROR_HANDLING at its default" in fr


# --- recorded runs of the reference trainer (tests/data/inject/) -------------------------------------

INJECT = __import__("pathlib").Path(__file__).resolve().parents[1] / "data" / "inject"


def test_a_rank_open_in_a_phase_for_the_whole_timeout_is_the_hang_from_rank_records_alone():
    # demo --inject hang:rank=1,phase=rollout,step=2 --dist-timeout-s 20: rank 0 raised gloo's "Timed out
    # waiting 20000ms" in reward's all_gather; rank 1 sat in rollout until torchrun's SIGTERM.
    [f] = hang.check(load_evidence([INJECT / "hang"]), hang.Config())
    assert (f.id, f.ranks, f.phase, f.step) == ("hang", (1,), "rollout", 2)
    assert f.evidence["source"] == "event-log" and f.evidence["waiting_ranks"] == [0]
    assert f.evidence["open_phases"] == {0: "reward", 1: "rollout"} and f.evidence["timeout_ms"] == 20000
    assert 20.0 <= f.evidence["max_idle_s"] < 25.0
    assert f.evidence["waiting_calls"][0]["op"] == "all_gather" and f.evidence["ended"] == {1: "SIGTERM"}


def test_ranks_that_raised_themselves_are_no_hang():
    # desync: both ranks raised in a collective (collective-mismatch); oom: rank 1 raised MemoryError.
    for run in ("desync", "oom", "slow"):
        assert not list(hang.check(load_evidence([INJECT / run]), hang.Config())), run


def test_a_hang_in_user_code_shows_the_culprits_own_frames_without_grpo_doctors_threads():
    [f] = hang.check(load_evidence([INJECT / "watch_hang"]), hang.Config())
    assert (f.ranks, f.phase, f.step, f.evidence["source"]) == ((1,), "rollout", 1, "watch")
    assert f.evidence["culprit_code"][1]["in_user_code"] and "rank 1 is in user code: _block_forever" in f.title
    assert f.evidence["culprit_stacks"][1][:2] == ["_block_forever (inject.py:201)", "Injector.at (inject.py:174)"]


def test_old_hang_files_without_stacks_read_the_captures_even_after_the_run_directory_moved(tmp_path):
    import json
    import shutil
    run = shutil.copytree(INJECT / "watch_hang", tmp_path / "moved")
    hang_file = run / "supervisor" / "vm" / "hang-1.json"
    report = json.loads(hang_file.read_text())
    del report["stacks"]
    hang_file.write_text(json.dumps(report))
    [f] = hang.check(load_evidence([run]), hang.Config())
    assert f.evidence["culprit_stacks"][1][0] == "_block_forever (inject.py:201)"


def test_under_watch_a_desync_names_the_rank_in_the_other_collective_not_both():
    [f] = hang.check(load_evidence([INJECT / "watch_desync"]), hang.Config())
    assert f.ranks == (1,) and f.evidence["odd_ranks"] == [1] and f.evidence["culprits"] == []


def test_a_job_stopped_from_outside_while_hung_names_the_rank_the_others_waited_for():
    # No collective timed out (600 s); the job was stopped with SIGTERM after about 80 s of no progress.
    # Rank 0 had completed step 1's rollout and waited in reward; rank 1 was still in rollout.
    [f] = hang.check(load_evidence([INJECT / "stopped"]), hang.Config())
    assert (f.ranks, f.phase, f.step, f.evidence["waiting_ranks"]) == ((1,), "rollout", 1, [0])
    assert f.evidence["max_idle_s"] >= 60 and f.evidence["timeout_ms"] is None
    assert "stopped from outside (SIGTERM)" in f.title and "grpo-doctor watch" in f.hints[0]


def test_a_rank_whose_log_just_stops_is_not_called_hung(tmp_path):
    # The same run with rank 1's end record cut off, as when a rank is SIGKILLed (the OOM killer): it may have
    # died rather than hung, and a dead rank is rank-crash's finding.
    import shutil
    run = shutil.copytree(INJECT / "hang", tmp_path / "run")
    rank1 = run / "ranks" / "rank-00001.jsonl"
    rank1.write_text("".join(line for line in rank1.read_text().splitlines(keepends=True) if '"kind":"end"' not in line))
    assert not list(hang.check(load_evidence([run]), hang.Config()))


# --- remedies chosen from what the culprit's stack shows (analysis/culprit_kind.py), issue 23 -------------

TRL_HANG = INJECT.parent / "trl_reward_hang" / "run"


def test_a_trl_reward_function_that_hangs_leads_with_a_timeout_on_the_reward_call_and_no_advice_that_cannot_help():
    # A real TRL GRPOTrainer job on 2 CPU ranks (gloo), one host; rank 1's reward function never returns; watch
    # took the stacks and ended the job (--on-hang kill), so NCCL never dumped a flight record.
    [f] = hang.check(load_evidence([TRL_HANG]), hang.Config())
    assert f.evidence["culprit_kind"] == {1: {
        "kind": "reward", "frame": "reward (train_grpo.py:33)", "op": None,
        "caller": "GRPOTrainer._calculate_rewards (trl/trainer/grpo_trainer.py:1626)"}}
    assert f.hints[0].startswith("Put a timeout on the reward call: rank 1 hangs in the reward function at "
                                 "`reward (train_grpo.py:33)`, called by `GRPOTrainer._calculate_rewards "
                                 "(trl/trainer/grpo_trainer.py:1626)`")
    assert hang.HINT_STACKS not in f.hints  # the stack is shown and classified already
    assert hang.HINT_FR not in f.hints and not any("TORCH_FR_BUFFER_SIZE" in h for h in f.hints)
    assert hang.HINT_PROBE not in f.hints and not any("grpo-doctor probe" in h for h in f.hints)  # one host
    assert hang.HINT_TIMEOUT in f.hints


def _trl_hang_on(tmp_path, *, gpus: bool, ended_by_watch: bool, fr_files=()):
    """The TRL run as if its ranks had GPUs (NCCL), watch had or had not ended it, NCCL had or had not dumped."""
    import json
    import shutil
    run = shutil.copytree(TRL_HANG, tmp_path / "run")
    for path in (run / "ranks").glob("rank-*.jsonl"):
        lines = path.read_text().splitlines(keepends=True)
        header = json.loads(lines[0])
        if gpus:
            header["gpu_uuid"] = f"GPU-{header['rank']}"
            header["versions"] |= {"cuda": "12.8", "nccl": "2.27.3"}
        lines[0] = json.dumps(header) + "\n"
        path.write_text("".join(lines))
    vm = run / "supervisor" / "vm"
    summary = json.loads((vm / "summary.json").read_text())
    (vm / "summary.json").write_text(json.dumps(summary | {"hang_ended_by_watch": ended_by_watch}))
    report = json.loads((vm / "hang-1.json").read_text())
    (vm / "hang-1.json").write_text(json.dumps(report | {"flight_recorder_files": list(fr_files)}))
    [f] = hang.check(load_evidence([run]), hang.Config())
    return f


def test_the_flight_recorder_is_advised_only_where_nccl_could_still_dump(tmp_path):
    assert hang.HINT_FR in _trl_hang_on(tmp_path / "a", gpus=True, ended_by_watch=False).hints
    # watch ended the job before NCCL's timeout: the variables were set and could never act
    assert hang.HINT_FR not in _trl_hang_on(tmp_path / "b", gpus=True, ended_by_watch=True).hints
    # a dump was written all the same: the advice stands beside it
    assert hang.HINT_FR in _trl_hang_on(tmp_path / "c", gpus=True, ended_by_watch=True,
                                        fr_files=["fr/nccl_trace_rank_1"]).hints
    # gloo on CPU: NCCL's flight recorder has nothing to record
    assert hang.HINT_FR not in _trl_hang_on(tmp_path / "d", gpus=False, ended_by_watch=False).hints


def test_probe_between_nodes_is_advised_only_for_a_run_on_more_than_one_host(tmp_path):
    # _with_headers: world size 4, 2 ranks per node, so the job spans two nodes
    assert hang.HINT_PROBE in _with_headers(tmp_path / "two-nodes", "2").hints


def test_a_rank_in_a_collective_the_others_are_not_in_leads_with_the_code_path_advice():
    [f] = hang.check(load_evidence([INJECT / "watch_desync"]), hang.Config())
    assert f.evidence["culprit_kind"][1]["kind"] == "collective"
    assert f.hints[0].startswith("Rank 1 waits in a collective at `broadcast_object_list "
                                 "(torch/distributed/distributed_c10d.py:")
    assert "`Injector._desync (inject.py:190)`" in f.hints[0] and "if rank == 0:" in f.hints[0]
    assert hang.HINT_STACKS not in f.hints


def test_a_culprit_whose_stack_tells_nothing_known_keeps_the_compare_the_stacks_advice():
    # The reference trainer's injected hang: _block_forever, in no reward, loader, request or collective.
    [f] = hang.check(load_evidence([INJECT / "watch_hang"]), hang.Config())
    assert f.evidence["culprit_kind"][1]["kind"] == "unknown" and f.hints[0] == hang.HINT_STACKS


def test_without_stacks_a_rank_open_in_the_reward_phase_still_gets_the_reward_timeout_advice(tmp_path):
    # The recorded 'stopped' run (no watch) as if rank 1 had hung in reward rather than rollout.
    import shutil
    run = shutil.copytree(INJECT / "stopped", tmp_path / "run")
    for path in (run / "ranks").glob("rank-*.jsonl"):
        path.write_text(path.read_text().replace('"rollout"', '"reward-x"').replace('"reward"', '"rollout"')
                        .replace('"reward-x"', '"reward"'))
    [f] = hang.check(load_evidence([run]), hang.Config())
    assert f.phase == "reward" and f.hints[0] == hang.HINT_NO_STACKS
    assert f.hints[1].startswith("Put a timeout on the reward call: rank 1 hangs in the reward function, and every")
