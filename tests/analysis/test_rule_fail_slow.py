"""`fail-slow` from watch's stack rounds (supervisor/<host>/fail-slow.json), every host's rounds of one moment
merged: the slow rank's host named, a slowdown every rank shares said as such, a damaged file one warning."""
from __future__ import annotations

import json

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import fail_slow
from grpo_doctor.probe.verdict import collective_problems
from grpo_doctor.schema import RunPaths
from grpo_doctor.schema.probe_results import CollectivesReport
from grpo_doctor.schema.slow_rounds import LinkRtts, RankLook, SlowRound, Survey, fail_slow_json

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


def write_links_host(run_dir, host, rank, addr, rtt_ms, why="start", rounds=5, first_slot=1000, pace=None):
    """A host whose rank waits in the collective every round, with its ranks' link round trips."""
    survey = Survey(id=f"{host}-1", host=host, why=why, interval_s=1.0, planned=rounds, started_t=first_slot,
                    pace=pace, rounds=tuple(SlowRound(t=float(first_slot + i), slot=first_slot + i, ranks={rank: BWD},
                                                      links=LinkRtts((addr,), rtt_ms)) for i in range(rounds)))
    path = RunPaths(run_dir).watch_files(host).fail_slow
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(fail_slow_json(host, [survey])))


def test_every_rank_in_one_place_with_one_hosts_links_slow_names_that_host_even_without_a_pace_fall(tmp_path):
    a, b, c = "10.0.0.1", "10.0.0.2", "10.0.0.3"
    write_links_host(tmp_path, "node0", 0, a, {b: 0.05, c: 180.0})
    write_links_host(tmp_path, "node1", 1, b, {a: 0.06, c: 150.0}, why="fleet")
    write_links_host(tmp_path, "node2", 2, c, {a: 90.0, b: 200.0}, why="fleet", rounds=4, first_slot=1001)
    [f] = findings(tmp_path)  # node2 joined a round late: 4 merged rounds, too few for the stacks, enough for the links
    assert (f.ranks, f.hosts, f.evidence["links"]["which_end"]) == ((), ("node2",), True)
    assert f.evidence["links"]["slow"] == ["node0-node2", "node1-node2"]
    assert f.title.startswith("host node2: its links slow the job: 4 stack rounds of every host at once") and \
        "the job's TCP round trips name node2: slow to every other host" in f.title
    assert f.hints[0] == fail_slow.HINT_LINK


def test_two_hosts_with_a_slow_link_say_so_and_still_name_both(tmp_path):
    write_links_host(tmp_path, "node0", 0, "10.0.0.1", {"10.0.0.2": 150.0}, why="pace", rounds=6, pace=PACE)
    write_links_host(tmp_path, "node1", 1, "10.0.0.2", {"10.0.0.1": 170.0}, why="fleet", rounds=6)
    [f] = findings(tmp_path)
    assert (f.hosts, f.evidence["scope"], f.evidence["links"]["which_end"]) == (("node0", "node1"), "shared", False)
    assert "the stacks cannot tell which host; the job's TCP round trip between node0 and node1 is 160 ms" in f.title
    assert "with two hosts which end cannot be told" in f.title


def test_healthy_links_add_nothing(tmp_path):
    write_links_host(tmp_path, "node0", 0, "10.0.0.1", {"10.0.0.2": 0.05, "10.0.0.3": 0.3})
    write_links_host(tmp_path, "node1", 1, "10.0.0.2", {"10.0.0.1": 0.06, "10.0.0.3": 0.2}, why="fleet")
    write_links_host(tmp_path, "node2", 2, "10.0.0.3", {"10.0.0.1": 0.4, "10.0.0.2": 0.1}, why="fleet")
    assert findings(tmp_path) == []  # a start survey, every rank in one place, links fine: nothing to say


def test_a_service_outside_the_job_names_no_slow_host(tmp_path):
    """Two healthy hosts whose ranks both call the same remote API (38-41 ms vs 0.3 ms on the LAN): before, that
    address was the one slow "host" and the report said `host 104.18.6.192: its links slow the job`."""
    api = "104.18.6.192"
    write_links_host(tmp_path, "node0", 0, "10.0.0.1", {"10.0.0.2": 0.3, api: 38.0})
    write_links_host(tmp_path, "node1", 1, "10.0.0.2", {"10.0.0.1": 0.3, api: 41.0}, why="fleet")
    assert [f for f in findings(tmp_path) if api in f.title or api in f.hosts] == []
