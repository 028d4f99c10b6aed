"""`fail-slow` from watch's stack rounds (supervisor/<host>/fail-slow.json), every host's rounds of one moment
merged: the slow rank's host named, a slowdown every rank shares said as such, a damaged file one warning."""
from __future__ import annotations

import json

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import fail_slow
from grpo_doctor.probe.verdict import collective_problems
from grpo_doctor.schema import RunPaths
from grpo_doctor.schema.probe_results import CollectivesReport
from grpo_doctor.schema.slow_rounds import RankLook, SlowRound, Survey, fail_slow_json

WAIT = RankLook("w", waiting=True, where="all_gather (torch/distributed/distributed_c10d.py:4287) <- gather (dist.py:75)")
SLEEP = RankLook("s", where="Injector.at (inject.py:179) <- Trainer.run_step (train.py:70)")
BWD = RankLook("b", where="Tensor.backward (torch/_tensor.py:623) <- DDPEngine.backward (engine.py:53)")
PACE = {"unit": "step lines", "per_min": 30.0, "baseline_per_min": 180.0}


def write_host(run_dir, host, why, rank, looks, first_slot=1000, pace=None):
    rounds = tuple(SlowRound(t=float(first_slot + i), slot=first_slot + i, ranks={rank: look})
                   for i, look in enumerate(looks))
    survey = Survey(id=f"{host}-1", host=host, why=why, interval_s=1.0, planned=len(looks), started_t=first_slot,
                    pace=pace, rounds=rounds)
    path = RunPaths(run_dir).watch_files(host).fail_slow
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(fail_slow_json(host, [survey])))


def findings(run_dir):
    return list(fail_slow.check(load_evidence([run_dir]), fail_slow.Config()))


def test_the_host_whose_rank_the_others_wait_for_in_most_merged_rounds_is_named(tmp_path):
    # One rank per node: each watch alone sees one rank; only their rounds merged show who waits for whom.
    write_host(tmp_path, "node0", "start", 0, [WAIT] * 9 + [BWD])
    write_host(tmp_path, "node1", "fleet", 1, [SLEEP] * 10)
    [f] = findings(tmp_path)
    assert (f.id, f.ranks, f.hosts, f.evidence["scope"]) == ("fail-slow", (1,), ("node1",), "host")
    assert f.title.startswith("host node1: rank 1 outside the others' stack in 9 of 10 rounds: Injector.at")
    assert f.evidence["outside"] == {1: 9} and f.evidence["whys"] == ["fleet", "start"]


def test_every_rank_in_one_place_while_the_pace_fell_is_a_shared_slowdown_naming_no_host(tmp_path):
    write_host(tmp_path, "node0", "pace", 0, [BWD] * 8, pace=PACE)
    write_host(tmp_path, "node1", "fleet", 1, [BWD] * 7 + [SLEEP])
    [f] = findings(tmp_path)
    assert (f.ranks, f.hosts, f.evidence["scope"], f.evidence["shared_rounds"]) == ((), ("node0", "node1"), "shared", 7)
    assert "the job slowed to 30 step lines/min (from 180)" in f.title and "cannot tell which host" in f.title
    # grpo-doctor probe across three nodes measured node1's links slow: that host is named.
    per_rank = {r: {"checks": [], "links": [{"src": (r - 1) % 3, "dst": r, "seconds": 0.1,
                                             "gbps": 10.0 if r == 0 else 0.2}]} for r in range(3)}
    host_of = {r: f"node{r}" for r in range(3)}
    problems, _ = collective_problems(per_rank, host_of, slow_ratio=0.5)
    RunPaths(tmp_path).probe.mkdir()
    RunPaths(tmp_path).probe_collectives.write_text(json.dumps(CollectivesReport(
        backend="gloo", world_size=3, hosts={str(r): h for r, h in host_of.items()}, settings={}, versions={},
        problems=problems).to_dict()))
    [g] = findings(tmp_path)
    assert g.evidence["probe_slow_hosts"] == ["node1"] and "probe measured node1 slow to the others" in g.title
    # The same rounds of the survey every job gets at its start, its pace never falling: nothing to say.
    other = tmp_path / "start"
    write_host(other, "node0", "start", 0, [BWD] * 8)
    write_host(other, "node1", "fleet", 1, [BWD] * 8)
    assert findings(other) == []


def test_a_damaged_rounds_file_is_one_warning_not_a_failed_report(tmp_path):
    path = RunPaths(tmp_path).watch_files("node0").fail_slow
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"surveys": [{"id": "x", "interval_s": "soon", "rounds": []}]}))
    evidence = load_evidence([tmp_path])
    assert evidence.slow_surveys == [] and any("fail-slow.json" in w for w in evidence.warnings)
