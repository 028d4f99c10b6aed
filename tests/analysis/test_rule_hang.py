from rundata import write_hang

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import hang


def _report(host="node-0"):
    # The shape grpo_doctor.supervisor.hang.HangReport.to_dict writes.
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
