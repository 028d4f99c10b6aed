"""One hang of a job of several nodes is one incident in the report: the rank the others wait for is the
root cause even when it ran on another host than they did, and each host's waiting ranks are its
consequences; from one shared run directory and from per-node directories passed together alike.

The hang reports are those of issue 24: node0's watch saw ranks 0-1 in all_gather and named no culprit,
node1's watch saw rank 2 in all_gather and rank 3 in the reward function (analysis/hang_reports.py)."""
from __future__ import annotations

import json

from rundata import write_hang

from grpo_doctor.analysis.hang_reports import combine_hangs
from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import run_rules
from grpo_doctor.schema.stacks import Frame, ThreadStack
from grpo_doctor.schema.watch_files import HangFleet, HangRank, HangReport

ALL_GATHER = (Frame("all_gather", "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", 4287),
              Frame("all_gather_floats", "/work/trainer/dist.py", 75), Frame("run_step", "/work/trainer/train.py", 81))
REWARD = (Frame("_block_forever", "/work/trainer/inject.py", 201), Frame("at", "/work/trainer/inject.py", 174),
          Frame("run_step", "/work/trainer/train.py", 70))


def look(host: str, ranks: dict[int, tuple], t: float = 1700000000.0, **extra) -> HangReport:
    """One node's watch's look: rank -> frames."""
    return HangReport(
        host=host, detected_t=t,
        ranks={r: HangRank(pid=100 + r, verdict="stuck", open_phase="reward", step=3, idle_s=12.0, timeout_s=10.0)
               for r in ranks},
        stacks={r: ThreadStack(1, "MainThread", False, frames) for r, frames in ranks.items()}, **extra)


NODE0 = look("node0", {0: ALL_GATHER, 1: ALL_GATHER})
NODE1 = look("node1", {2: ALL_GATHER, 3: REWARD}, t=1700000001.5, culprits=(3,))


def hang_findings(*run_dirs):
    findings, _ = run_rules(load_evidence(list(run_dirs)))
    return [f for f in findings if f.id == "hang"]


def check_one_incident(findings):
    root, *rest = findings
    assert (root.role, root.ranks, root.hosts, root.phase, root.step) == ("root-cause", (3,), ("node1",), "reward", 3)
    assert "the other ranks (on node0, node1) wait for rank(s) 3 on node1 in reward at step 3" in root.title
    assert root.evidence["rank_hosts"] == {0: "node0", 1: "node0", 2: "node1", 3: "node1"}
    assert [(f.role, f.caused_by, f.hosts, f.ranks) for f in rest] == [
        ("consequence", "hang@3", ("node0",), (0, 1)), ("consequence", "hang@3", ("node1",), (2,))]
    assert rest[0].title.startswith("rank(s) 0-1 on node0 wait in all_gather (dist.py:75) at step 3 for rank(s) 3 "
                                    "on node1 (because rank(s) 3 hung in reward)")


def test_two_hosts_looks_in_one_shared_directory_are_one_incident_led_by_the_rank_on_the_other_host(tmp_path):
    write_hang(tmp_path, "node0", 1, NODE0.to_dict())
    write_hang(tmp_path, "node1", 1, NODE1.to_dict())
    check_one_incident(hang_findings(tmp_path))


def test_per_node_directories_passed_together_give_the_same_incident(tmp_path):
    write_hang(tmp_path / "node0", "node0", 1, NODE0.to_dict())
    write_hang(tmp_path / "node1", "node1", 1, NODE1.to_dict())
    check_one_incident(hang_findings(tmp_path / "node0", tmp_path / "node1"))


def test_the_fleet_verdict_every_watch_kept_is_one_hang(tmp_path):
    from grpo_doctor.checks.hang_merge import merge_hang_reports

    verdict = merge_hang_reports([NODE0, NODE1], fleet=HangFleet(id="node0-1", decider="node0", decider_node=0,
                                                                 nodes={0: "node0", 1: "node1"}, nnodes=2))
    for node in (0, 1):
        write_hang(tmp_path / f"node{node}", f"node{node}", 1, json.loads(json.dumps(verdict.to_dict())))
    check_one_incident(hang_findings(tmp_path / "node0", tmp_path / "node1"))
    (combined,) = combine_hangs([verdict, verdict, NODE0])  # a node's own look beside the verdict adds nothing
    assert combined.fleet.id == "node0-1"


def test_looks_far_apart_or_sharing_a_rank_stay_apart():
    later = look("node1", {2: ALL_GATHER, 3: REWARD}, t=1700000000.0 + 3600, culprits=(3,))
    assert [h.host for h in combine_hangs([NODE0, later])] == ["node0", "node1"]
    same_ranks = look("node1", {0: ALL_GATHER, 1: REWARD}, culprits=(1,))
    assert len(combine_hangs([NODE0, same_ranks])) == 2
    assert combine_hangs([NODE0, NODE0]) == [NODE0, NODE0]  # one host's several looks: as they were
