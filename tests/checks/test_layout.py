"""Where ranks sit and what the ranks that stand out share (checks/layout.py): a synthetic fleet of 1,024
ranks (128 hosts x 8, tp=8 within a host, pp=4 across hosts, dp=32) hung four ways, its stacks built from
the real py-spy capture tests/data/pyspy/torchrun_8_ranks.txt and merged as the fleet merges 128 hosts'
looks (benchmarks/bench_fleet_layout.py builds it; that benchmark times it)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from grpo_doctor.checks.hang_merge import merge_hang_reports
from grpo_doctor.checks.layout import Membership, Place, build_layout, fault_domain

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_fleet_layout.py"


@pytest.fixture(scope="module")
def fleet():
    spec = importlib.util.spec_from_file_location("bench_fleet_layout", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, [module.rank_records(r) for r in range(module.WORLD)]


def judged(fleet, scenario):
    bench, records = fleet
    merged = merge_hang_reports(bench.host_looks(bench.SCENARIOS[scenario]))
    return bench.mapping_and_verdict(merged, records)


def test_one_hung_rank_is_named_with_its_host_gpu_tp_group_and_pp_stage(fleet):
    culprits, where, domain = judged(fleet, "one-rank")
    assert culprits == [537]
    assert where == "rank 537: host gpu-a67, GPU 1, tp group 67 (ranks 536-543), pp stage 2, dp group 17 (32 ranks)"
    assert (domain.kind, domain.hosts, domain.verdict()) == ("rank", ("gpu-a67",), "")


def test_every_rank_of_one_host_standing_out_drains_that_host(fleet):
    culprits, where, domain = judged(fleet, "host")
    assert culprits == list(range(536, 544))
    assert (domain.kind, domain.hosts, domain.whole_hosts) == ("host", ("gpu-a67",), ("gpu-a67",))
    assert domain.verdict() == "all 8 ranks of host gpu-a67: drain host gpu-a67"
    assert domain.to_evidence() == {"fault_domain": "host", "fault_hosts": ["gpu-a67"]}


def test_a_pipeline_group_across_hosts_points_at_that_groups_links(fleet):
    culprits, where, domain = judged(fleet, "pp-group")
    assert culprits == [25, 281, 537, 793]
    assert (domain.kind, domain.group.label, domain.group.index) == ("group", "pp", 25)
    assert domain.group_hosts == ("gpu-a3", "gpu-a35", "gpu-a67", "gpu-a99")
    assert domain.verdict() == ("they share pp group 25 (ranks 25,281,537,793) across hosts gpu-a3, gpu-a35, "
                                "gpu-a67, gpu-a99: check that group's links")
    assert domain.to_evidence()["fault_group"]["hosts"] == ["gpu-a3", "gpu-a35", "gpu-a67", "gpu-a99"]


def test_a_data_parallel_group_across_32_hosts_points_at_that_groups_links(fleet):
    culprits, _, domain = judged(fleet, "dp-group")
    assert len(culprits) == 32
    assert (domain.kind, domain.group.label, domain.group.index, len(domain.group_hosts)) == ("group", "dp", 17, 32)
    assert domain.verdict().startswith("they share dp group 17 (32 ranks) across hosts gpu-a64, gpu-a65, gpu-a66, "
                                       "gpu-a67 and 28 more: check that group's links")


def test_scattered_ranks_sharing_no_group_are_a_code_path(fleet):
    culprits, _, domain = judged(fleet, "scattered")
    assert culprits == [5, 300, 611, 1000]
    assert (domain.kind, domain.group, len(domain.hosts)) == ("scattered", None, 4)
    assert domain.verdict() == "scattered over 4 hosts with no group in common: a code path, not the hardware"


def small(hosts=2, per_host=2):
    places = {r: Place(host=f"node-{r // per_host}", local_rank=r % per_host) for r in range(hosts * per_host)}
    return places


def test_each_group_once_the_world_and_unnamed_copies_left_out_numbered_by_lowest_rank():
    places = small()
    memberships = [Membership((2, 3), "tp", "tp"), Membership((0, 1), "tp", "tp"), Membership((0, 1), "tp", "tp"),
                   Membership((0, 1, 2, 3), None, None, "0"),  # the world
                   Membership((2, 3), None, None, "7"),  # new_subgroups making the tp groups again, unnamed
                   Membership((0, 3), None, None, "9"), Membership((1, 3), None, "reward_workers"),
                   Membership((3,), "ep", "ep")]  # one rank: says nothing
    layout = build_layout(places, memberships)
    assert sorted((g.label, g.index, g.ranks) for g in layout.groups) == [
        ("group 9", 9, (0, 3)), ("reward_workers", 0, (1, 3)), ("tp", 0, (0, 1)), ("tp", 1, (2, 3))]
    assert layout.describe(3) == ("rank 3: host node-1, local rank 1, tp group 1 (ranks 2-3), reward_workers "
                                  "group 0 (ranks 1,3), group 9 (ranks 0,3)")
    assert layout.coordinates(3)["groups"]["tp"] == {"label": "tp", "dim": "tp", "name": "tp", "index": 1,
                                                     "ranks": "2-3", "size": 2, "position": 1}
    assert build_layout(places, []).describe(1) == "rank 1: host node-0"  # no groups, no GPU: the host alone


def test_no_verdict_where_nothing_stands_out_against_anything():
    layout = build_layout(small(), [Membership((0, 2), "pp", "pp"), Membership((1, 3), "pp", "pp")])
    assert fault_domain(layout, [0, 1, 2, 3]) is None  # every rank: the same code failed everywhere
    assert fault_domain(layout, []) is None
    one_host = build_layout({r: Place(host="solo") for r in range(4)}, [])
    assert fault_domain(one_host, [0, 1]) is None  # the job's only machine cannot stand out
    assert fault_domain(build_layout({}, []), [0, 1]) is None  # no host known
    # Hosts from elsewhere (a hang report's) where the rank files say nothing.
    found = fault_domain(build_layout({}, []), [2, 3], {0: "a", 1: "a", 2: "b", 3: "b"})
    assert (found.kind, found.hosts, found.whole_hosts) == ("host", ("b",), ("b",))


def test_several_whole_hosts_are_drained_together_and_hosts_sort_as_numbered():
    places = {r: Place(host=f"gpu-a{r // 2}") for r in range(40)}
    found = fault_domain(build_layout(places, []), [6, 7, 22, 23])
    assert (found.kind, found.hosts) == ("host", ("gpu-a3", "gpu-a11"))
    assert found.verdict() == "every rank of hosts gpu-a3, gpu-a11: drain hosts gpu-a3, gpu-a11"
    partly = fault_domain(build_layout(places, []), [6, 22, 23])  # gpu-a3 also runs rank 7, which is fine
    assert partly.kind == "scattered"
