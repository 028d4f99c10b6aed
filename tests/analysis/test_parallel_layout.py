"""The hang, straggler and rank-crash findings name where their ranks are and judge what those ranks
share (analysis/parallel_layout.py over checks/layout.py): the rank files' headers and `parallel_group`
records read back by the report's own loader.

The 1,024-rank fleet (128 hosts x 8, tp=8, pp=4, dp=32; benchmarks/bench_fleet_layout.py) hung four ways,
as the fleet's merged hang report and the rank files watch --instrument writes."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from rundata import common, header, write_rank

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.parallel_layout import HINT_CODE_PATH, HINT_DRAIN, HINT_GROUP_LINKS
from grpo_doctor.analysis.rules import hang, rank_crash, straggler
from grpo_doctor.checks.hang_merge import merge_hang_reports
from grpo_doctor.runlog.decoder import record_from_dict
from grpo_doctor.schema import End, EndReason, Header, ParallelGroup, PhaseBegin, PhaseEnd

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_fleet_layout.py"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    spec = importlib.util.spec_from_file_location("bench_fleet_layout", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    root = tmp_path_factory.mktemp("fleet")
    bench.write_run(root / "run", [bench.rank_records(r) for r in range(bench.WORLD)])
    return bench, root


def hang_finding(fleet, scenario):
    bench, root = fleet
    hang_dir = root / scenario
    bench.write_hang(hang_dir, merge_hang_reports(bench.host_looks(bench.SCENARIOS[scenario])))
    first, *_ = hang.check(load_evidence([root / "run", hang_dir]), hang.Config())
    return first


def test_one_hung_rank_of_1024_is_named_with_its_host_gpu_tp_group_and_pp_stage(fleet):
    f = hang_finding(fleet, "one-rank")
    assert f.ranks == (537,)
    assert f.title.endswith("; rank 537: host gpu-a67, GPU 1, tp group 67 (ranks 536-543), pp stage 2, "
                            "dp group 17 (32 ranks)")
    where = f.evidence["coordinates"][537]
    assert (where["host"], where["gpu_index"], where["gpu_pci_bus_id"]) == ("gpu-a67", 1, "00000000:28:00.0")
    assert where["groups"]["tp"]["index"] == 67 and where["groups"]["tp"]["ranks"] == "536-543"
    assert (where["groups"]["pp"]["position"], where["groups"]["pp"]["ranks"]) == (2, "25,281,537,793")
    assert f.evidence["fault_domain"] == "rank" and "fault_group" not in f.evidence


def test_all_8_ranks_of_one_host_hung_say_drain_that_host(fleet):
    f = hang_finding(fleet, "host")
    assert f.ranks == tuple(range(536, 544))
    assert f.title.endswith("; all 8 ranks of host gpu-a67: drain host gpu-a67")
    assert (f.evidence["fault_domain"], f.evidence["fault_hosts"]) == ("host", ["gpu-a67"])
    assert f.hints[0] == HINT_DRAIN  # the stack tells nothing specific (generate): where they are leads


def test_hung_ranks_sharing_a_pp_or_dp_group_across_hosts_point_at_that_groups_links(fleet):
    f = hang_finding(fleet, "pp-group")
    assert f.title.endswith("; they share pp group 25 (ranks 25,281,537,793) across hosts gpu-a3, gpu-a35, "
                            "gpu-a67, gpu-a99: check that group's links")
    assert f.evidence["fault_group"] == {"label": "pp", "dim": "pp", "name": "pp", "index": 25,
                                         "ranks": "25,281,537,793", "size": 4,
                                         "hosts": ["gpu-a3", "gpu-a35", "gpu-a67", "gpu-a99"]}
    assert f.hints[0] == HINT_GROUP_LINKS
    dp = hang_finding(fleet, "dp-group")
    assert (dp.evidence["fault_domain"], dp.evidence["fault_group"]["label"]) == ("group", "dp")
    assert len(dp.evidence["coordinates"]) == 16  # the first 16 ranks' places, not all 32


def test_scattered_hung_ranks_are_a_code_path_not_the_hardware(fleet):
    f = hang_finding(fleet, "scattered")
    assert f.title.endswith("; scattered over 4 hosts with no group in common: a code path, not the hardware")
    assert f.evidence["fault_domain"] == "scattered" and f.hints[0] == HINT_CODE_PATH


def pipeline_run(tmp_path, slow):
    """8 ranks on 4 hosts (2 each, tp=2 within a host); pp=4 across the hosts: pp groups [0,2,4,6], [1,3,5,7]."""
    for rank in range(8):
        host = f"node-{rank // 2}"
        tp = [rank - rank % 2, rank - rank % 2 + 1]
        records = [header(rank, world_size=8, host=host, local_world_size=2),
                   ParallelGroup(**common(rank, host=host), ranks=tp, name="TENSOR_MODEL_PARALLEL_GROUP", dim="tp"),
                   ParallelGroup(**common(rank, host=host), ranks=[rank % 2 + 2 * s for s in range(4)],
                                 name="PIPELINE_MODEL_PARALLEL_GROUP", dim="pp")]
        for step in range(4):
            t = 100.0 + step * 10.0
            d = 2.1 if rank in slow else 1.0
            records += [PhaseBegin(**common(rank, step=step, t=t, host=host), phase="rollout", path="rollout"),
                        PhaseEnd(**common(rank, step=step, t=t + d, host=host), phase="rollout", path="rollout",
                                 duration_s=d, synced=False)]
        write_rank(tmp_path, rank, records)
    return load_evidence([tmp_path])


def test_slow_ranks_of_one_pipeline_group_across_hosts_are_that_groups_links_not_scattered(tmp_path):
    [f] = straggler.check(pipeline_run(tmp_path, slow={1, 3, 5, 7}), straggler.Config())
    assert (f.ranks, f.evidence["scope"], f.evidence["fault_domain"]) == ((1, 3, 5, 7), "group", "group")
    assert f.title == ("ranks 1,3,5,7 on 4 hosts are 2.1x slower in rollout; rank 1: host node-0, local rank 1, "
                       "tp group 0 (ranks 0-1), pp stage 0; they share pp group 1 (ranks 1,3,5,7) across hosts "
                       "node-0, node-1, node-2, node-3: check that group's links")
    assert f.hints[0] == HINT_GROUP_LINKS
    # Part of the group is still the group; ranks in no common group are scattered, as before.
    [g] = straggler.check(pipeline_run(tmp_path / "two", slow={1, 3, 7}), straggler.Config())
    assert (g.evidence["scope"], g.evidence["fault_domain"]) == ("group", "group")
    [s] = straggler.check(pipeline_run(tmp_path / "three", slow={1, 2}), straggler.Config())
    assert (s.evidence["scope"], s.evidence["fault_domain"]) == ("scattered", "scattered")


def test_a_single_straggler_carries_its_coordinates(tmp_path):
    [f] = straggler.check(pipeline_run(tmp_path, slow={5}), straggler.Config())
    assert f.title.endswith("; rank 5: host node-2, local rank 1, tp group 2 (ranks 4-5), pp stage 2")
    assert f.evidence["coordinates"][5]["groups"]["pp"]["position"] == 2 and "fault_domain" not in f.evidence


def test_a_host_lost_with_all_its_ranks_is_one_crash_saying_drain_that_host(tmp_path):
    for rank in range(8):
        host = f"node-{rank // 4}"
        records = [header(rank, world_size=8, host=host, local_world_size=4),
                   ParallelGroup(**common(rank, host=host), ranks=[rank % 4, rank % 4 + 4], name="dp", dim="dp")]
        if rank < 4:  # node-0's ranks saw their peers go and were stopped by the launcher
            records.append(End(**common(rank, t=130.0, host=host), reason=EndReason.SIGNAL, signal="SIGTERM"))
        write_rank(tmp_path, rank, records)
    findings = list(rank_crash.check(load_evidence([tmp_path]), rank_crash.Config()))
    [lost] = [f for f in findings if f.severity == "critical"]
    assert lost.ranks == (4, 5, 6, 7)
    assert lost.title.endswith("; rank 4: host node-1, local rank 0, dp group 0 (ranks 0,4); "
                               "all 4 ranks of host node-1: drain host node-1")
    assert (lost.evidence["fault_domain"], lost.hints[-1]) == ("host", HINT_DRAIN)
    [stopped] = [f for f in findings if f.severity == "warning"]
    assert "fault_domain" not in stopped.evidence and "coordinates" not in stopped.evidence  # collateral


def test_older_headers_and_readers_of_the_new_record(tmp_path):
    old = header(0).to_dict()
    for key in ("gpu_index", "gpu_pci_bus_id"):
        old.pop(key)
    assert record_from_dict(old) == header(0)  # a header of an earlier version: the new fields None
    line = ParallelGroup(**common(1), ranks=[0, 1], name="tp", dim="tp").to_dict()
    assert record_from_dict({**line, "a_later_field": 1}).ranks == [0, 1]
    assert isinstance(record_from_dict(header(1).to_dict()), Header)
