import json
from pathlib import Path

import pytest
from rundata import common, header, write_rank

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import straggler
from grpo_doctor.schema import PhaseBegin, PhaseEnd


def _phases(rank, durations, phase="rollout"):
    out, t = [], 0.0
    for step, d in enumerate(durations):
        out.append(PhaseBegin(**common(rank, step=step, t=t), phase=phase, path=phase))
        out.append(PhaseEnd(**common(rank, step=step, t=t + d), phase=phase, path=phase, duration_s=d, synced=False))
        t += d + 1
    return out


def test_the_rank_slow_in_a_phase_is_named_with_its_medians(tmp_path):
    for rank in range(4):
        durations = [3.1, 2.9, 3.0] if rank == 2 else [1.0, 1.1, 0.9]
        write_rank(tmp_path, rank, [header(rank)] + _phases(rank, durations) + _phases(rank, [0.2, 0.2], "forward"))
    [f] = straggler.check(load_evidence([tmp_path]), straggler.Config())
    assert (f.id, f.severity, f.ranks, f.phase, f.hosts) == ("straggler", "warning", (2,), "rollout", ("node-1",))
    assert f.evidence["phases"]["rollout"]["rank_median_s"] == 3.0
    assert f.evidence["phases"]["rollout"]["all_median_s"] == 1.0
    assert straggler.HINT_NODES not in f.hints  # every node launched alike: no "same GPUs per node" advice
    assert "num_infer_workers" not in " ".join(f.hints) and "--vllm_data_parallel_size" in f.hints[-1]


def test_a_phase_slower_by_a_small_share_of_the_step_is_no_straggler(tmp_path):
    # rank 0 takes 0.3 s longer in `reward`, four times the others, but in a 10 s step nobody waits for that.
    for rank in range(4):
        records = [header(rank)]
        for step in range(3):
            t = step * 10.0
            reward_s = 0.4 if rank == 0 else 0.1
            records += [PhaseBegin(**common(rank, step=step, t=t), phase="rollout", path="rollout"),
                        PhaseEnd(**common(rank, step=step, t=t + 9.0), phase="rollout", path="rollout", duration_s=9.0,
                                 synced=False),
                        PhaseBegin(**common(rank, step=step, t=t + 9.0), phase="reward", path="reward"),
                        PhaseEnd(**common(rank, step=step, t=t + 9.0 + reward_s), phase="reward", path="reward",
                                 duration_s=reward_s, synced=False)]
        write_rank(tmp_path, rank, records)
    assert not list(straggler.check(load_evidence([tmp_path]), straggler.Config()))


def test_the_ranks_waiting_in_a_collective_for_the_straggler_are_not_named(tmp_path):
    # Two ranks: rank 1 is 0.5 s slower in rollout; rank 0 then waits 0.5 s in reward's all_gather, and both
    # leave reward together. Only rank 1 ends its slow phase late.
    for rank in range(2):
        records = [header(rank, world_size=2)]
        for step in range(4):
            t = step * 1.0
            rollout_s = 0.55 if rank == 1 else 0.05
            records += [PhaseBegin(**common(rank, step=step, t=t), phase="rollout", path="rollout"),
                        PhaseEnd(**common(rank, step=step, t=t + rollout_s), phase="rollout", path="rollout",
                                 duration_s=rollout_s, synced=False),
                        PhaseBegin(**common(rank, step=step, t=t + rollout_s), phase="reward", path="reward"),
                        PhaseEnd(**common(rank, step=step, t=t + 0.56), phase="reward", path="reward",
                                 duration_s=0.56 - rollout_s, synced=False)]
        write_rank(tmp_path, rank, records)
    findings = list(straggler.check(load_evidence([tmp_path]), straggler.Config()))
    assert [(f.ranks, f.phase) for f in findings] == [((1,), "rollout")]
    assert findings[0].evidence["phases"]["rollout"]["others_median_s"] == 0.05


@pytest.mark.distributed
def test_the_reference_trainer_with_a_slow_rank_gets_that_rank_named_in_rollout(launch_trainer, tmp_path):
    result = launch_trainer(tmp_path / "run", "--steps", "4", "--inject", "slow:rank=1,delay_s=0.8", nproc=3)
    assert result.returncode == 0, result.explain()
    findings = list(straggler.check(load_evidence([tmp_path / "run"]), straggler.Config()))
    assert [(f.id, f.ranks, f.phase) for f in findings] == [("straggler", (1,), "rollout")]
    assert findings[0].evidence["phases"]["rollout"]["rank_median_s"] >= 0.8


def test_unequal_gpus_per_node_in_the_headers_add_the_same_gpus_everywhere_remedy(tmp_path):
    for rank in range(3):  # node-0 runs ranks 0 and 1, node-1 only rank 2 (CASES.md case 3: 7 vs 8 GPUs)
        durations = [3.1, 2.9, 3.0] if rank == 2 else [1.0, 1.1, 0.9]
        launch = {"NPROC_PER_NODE": "1" if rank == 2 else "2"}
        write_rank(tmp_path, rank, [header(rank, 3, launch=launch, local_world_size=1 if rank == 2 else 2)]
                   + _phases(rank, durations))
    [f] = straggler.check(load_evidence([tmp_path]), straggler.Config())
    assert f.ranks == (2,) and f.hints[0] == straggler.HINT_NODES


def test_the_reference_trainers_slow_rank_is_named_and_the_rank_waiting_for_it_is_not():
    # demo --inject slow:rank=1,delay_s=0.5: rank 1 takes 0.5 s longer in rollout; rank 0 waits that long in
    # reward's all_gather. Two ranks: "the others" of each is the other one.
    run = Path(__file__).resolve().parents[1] / "data" / "inject" / "slow"
    [f] = straggler.check(load_evidence([run]), straggler.Config())
    assert (f.ranks, f.phase) == ((1,), "rollout")
    rollout = f.evidence["phases"]["rollout"]
    assert rollout["rank_median_s"] > 0.5 and rollout["others_median_s"] < 0.1 and rollout["late_s"] > 0.45


# Where the slow ranks run: 2 hosts x 4 ranks (or 4 x 2), rank files from the schema's records, every step
# starting together on every rank (they meet in a collective at its end).
def _run(tmp_path, slow, hosts=2, per_host=4, fast_s=1.0, slow_s=2.1, steps=4):
    world = hosts * per_host
    for rank in range(world):
        host = f"node-{rank // per_host}"
        records = [header(rank, world_size=world, host=host, local_world_size=per_host)]
        for step in range(steps):
            t = 100.0 + step * 10.0
            d = slow_s if rank in slow else fast_s
            records += [PhaseBegin(**common(rank, step=step, t=t, host=host), phase="rollout", path="rollout"),
                        PhaseEnd(**common(rank, step=step, t=t + d, host=host), phase="rollout", path="rollout",
                                 duration_s=d, synced=False),
                        PhaseBegin(**common(rank, step=step, t=t + 3.0, host=host), phase="train", path="train"),
                        PhaseEnd(**common(rank, step=step, t=t + 3.5, host=host), phase="train", path="train",
                                 duration_s=0.5, synced=False)]
        write_rank(tmp_path, rank, records)
    return load_evidence([tmp_path])


def test_every_rank_of_one_host_slow_is_one_finding_naming_the_host(tmp_path):
    [f] = straggler.check(_run(tmp_path, slow={4, 5, 6, 7}), straggler.Config())
    assert f.title == "host node-1: all 4 ranks 2.1x slower in rollout: drain or check that machine"
    assert (f.ranks, f.hosts, f.phase) == ((4, 5, 6, 7), ("node-1",), "rollout")
    assert (f.evidence["scope"], f.evidence["host"], f.evidence["ratio"]) == ("host", "node-1", 2.1)
    assert sorted(f.evidence["ranks"]) == [4, 5, 6, 7]  # the per-rank evidence is kept
    assert f.evidence["ranks"][5]["rollout"]["rank_median_s"] == 2.1
    assert f.evidence["phases"]["rollout"]["num_ranks"] == 4
    assert f.hints[0] == straggler.HINT_HOST
    # two of node-1's four ranks slow: that host also runs fast ranks, so each slow rank is its own finding
    partial = list(straggler.check(_run(tmp_path / "partial", slow={4, 5}), straggler.Config()))
    assert [(g.ranks, g.hosts, "scope" in g.evidence) for g in partial] == [((4,), ("node-1",), False),
                                                                          ((5,), ("node-1",), False)]


def test_slow_ranks_spread_over_hosts_beside_fast_ones_are_a_code_path_not_a_machine(tmp_path):
    [f] = straggler.check(_run(tmp_path, slow={1, 6}), straggler.Config())
    assert (f.ranks, f.hosts, f.evidence["scope"]) == ((1, 6), ("node-0", "node-1"), "scattered")
    assert f.evidence["ranks_per_host"] == {"node-0": [1], "node-1": [6]}
    assert "not the hardware" in f.title and "2 hosts" in f.title and f.hints[0] == straggler.HINT_SCATTERED


def test_two_whole_hosts_say_links_only_where_the_probe_measured_slow_links(tmp_path):
    from grpo_doctor.probe.verdict import collective_problems
    from grpo_doctor.schema import RunPaths
    from grpo_doctor.schema.probe_results import CollectivesReport

    run = _run(tmp_path, slow={4, 5, 6, 7}, hosts=4, per_host=2)
    [f] = straggler.check(run, straggler.Config())
    assert (f.evidence["scope"], f.hosts, f.evidence["links"]) == ("hosts", ("node-2", "node-3"), [])
    assert "links" not in f.title and f.title.endswith("drain or check those machines")
    host_of = {r: f"node-{r // 2}" for r in range(8)}
    per_rank = {r: {"checks": [], "links": [{"src": r, "dst": (r + 2) % 8, "seconds": 0.1,
                                             "gbps": 0.2 if r in (4, 5) else 10.0}]} for r in range(8)}
    problems, _ = collective_problems(per_rank, host_of, slow_ratio=0.5)  # the probe's own verdict
    report = CollectivesReport(backend="nccl", world_size=8, hosts={str(r): h for r, h in host_of.items()},
                               settings={}, versions={}, problems=problems)
    RunPaths(tmp_path).probe.mkdir()
    RunPaths(tmp_path).probe_collectives.write_text(json.dumps(report.to_dict()))
    [g] = [g for g in straggler.check(load_evidence([tmp_path]), straggler.Config()) if "scope" in g.evidence]
    assert "links between node-2, node-3" in g.title and g.evidence["links"] == [problems[0].message]
    assert g.hints[0] == straggler.HINT_LINKS


@pytest.mark.distributed
@pytest.mark.slow
def test_the_reference_trainer_on_two_fake_hosts_one_slow_names_that_host(launch_trainer, tmp_path):
    # torchrun --nproc-per-node 4 ... --inject slow:rank=2,delay_s=0.5 and slow:rank=3: then ranks 2, 3 are
    # told apart from 0, 1 only by their header's host, which the rank files carry.
    result = launch_trainer(tmp_path / "run", "--steps", "5", "--inject", "slow:rank=2,delay_s=0.6",
                            "--inject", "slow:rank=3,delay_s=0.6", nproc=4)
    assert result.returncode == 0, result.explain()
    ranks = tmp_path / "run" / "ranks"
    for path in ranks.glob("rank-*.jsonl"):  # ranks 0, 1 on node-a, 2, 3 on node-b
        rank = int(path.stem.split("-")[1])
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        for record in lines:
            record["host"] = "node-a" if rank < 2 else "node-b"
        path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    findings = list(straggler.check(load_evidence([tmp_path / "run"]), straggler.Config()))
    assert [(f.evidence.get("scope"), f.hosts, f.ranks) for f in findings] == [("host", ("node-b",), (2, 3))]
