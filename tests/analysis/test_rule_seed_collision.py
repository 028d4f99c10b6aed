from rolloutdata import assert_documented, rng, rollout, write_run

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import seed_collision

CFG = seed_collision.Config()


def _copies(step: int, rank: int, seed: int, prompts=("3+4=", "9*2=")) -> tuple[list[str], list[str]]:
    """Two copies of each prompt on this rank, sampled with `seed`: the same seed gives the same texts."""
    ps = [p for p in prompts for _ in range(2)]
    return ps, [f"{p} answer {seed}-{step}-{i}" for i, p in enumerate(ps)]


def _run(tmp_path, seed_of, num_ranks=4, steps=3, temperature=1.0, extra=None):
    per_rank = {}
    for rank in range(num_ranks):
        per_rank[rank] = [rollout(rank, n, *_copies(n, rank, seed_of(rank)), temperature=temperature)
                          for n in range(steps)] + (extra or {}).get(rank, [])
    return load_evidence([write_run(tmp_path, per_rank)])


def test_a_seed_per_node_names_each_nodes_ranks_and_says_it_lines_up_with_hosts(tmp_path):
    # rundata puts ranks 0-1 on node-0 and 2-3 on node-1; the seed is the node rank (case 2)
    [f] = seed_collision.check(_run(tmp_path, seed_of=lambda r: r // 2), CFG)
    assert (f.id, f.severity, f.ranks, f.hosts) == ("seed-collision", "critical", (0, 1, 2, 3), ("node-0", "node-1"))
    ev = f.evidence
    assert ev["rank_sets"] == [[0, 1], [2, 3]] and ev["set_hosts"] == [["node-0"], ["node-1"]]
    assert ev["lines_up_with_hosts"] is True and ev["lines_up_with_tp_groups"] is None
    assert (ev["first_step"], ev["identical_frac"], ev["num_steps_colliding"], ev["temperature"]) == (0, 1.0, 3, 1.0)
    assert ev["sources"] == ["completion hashes"]
    assert "{0-1} and {2-3}" in f.title and "one seed per node" in f.title
    assert any("device_specific=True" in h for h in f.hints)
    assert_documented([f])


def test_distinct_seeds_give_no_finding(tmp_path):
    assert not list(seed_collision.check(_run(tmp_path, seed_of=lambda r: r), CFG))


def test_greedy_sampling_is_not_judged(tmp_path):
    assert not list(seed_collision.check(_run(tmp_path, seed_of=lambda r: 0, temperature=0.0), CFG))


def test_a_policy_that_writes_one_answer_everywhere_is_no_seed_collision(tmp_path):
    # identical inside each rank's own groups too: the policy collapsed, the seeds are fine
    per_rank = {r: [rollout(r, n, ["3+4="] * 4, ["7"] * 4) for n in range(3)] for r in range(4)}
    assert not list(seed_collision.check(load_evidence([write_run(tmp_path, per_rank)]), CFG))


def test_ranks_sharing_the_cuda_generator_are_a_warning_without_completion_evidence(tmp_path):
    extra = {r: [rng(r, 0, torch_cpu=f"c{r}", torch_cuda="same" if r < 2 else f"g{r}")] for r in range(4)}
    ev = _run(tmp_path, seed_of=lambda r: r, extra=extra)
    [f] = seed_collision.check(ev, CFG)
    assert (f.severity, f.ranks) == ("warning", (0, 1))
    assert f.evidence["generator"] == "torch_cuda" and f.evidence["rng_rank_sets"] == [[0, 1]]
    assert f.evidence["sources"] == ["rng fingerprints"] and f.evidence["lines_up_with_hosts"] is True
    assert_documented([f])


def test_a_shared_state_before_seeding_that_diverges_later_is_no_collision(tmp_path):
    # torch's default seed is the same in every process: an "init" snapshot before seeding agrees
    extra = {r: [rng(r, None, tag="init", torch_cpu="default"), rng(r, 0, torch_cpu=f"seeded{r}")] for r in range(4)}
    assert not list(seed_collision.check(_run(tmp_path, seed_of=lambda r: r, extra=extra), CFG))


def test_ranks_of_one_tensor_parallel_group_may_share_but_groups_must_differ(tmp_path):
    legit = {r: [rng(r, 0, sampling_seed=10 + r // 2, tp_rank=r % 2, tp_group=r // 2)] for r in range(4)}
    assert not list(seed_collision.check(_run(tmp_path / "a", seed_of=lambda r: r, extra=legit), CFG))
    shared = {r: [rng(r, 0, sampling_seed=10, tp_rank=r % 2, tp_group=r // 2)] for r in range(4)}
    [f] = seed_collision.check(_run(tmp_path / "b", seed_of=lambda r: r, extra=shared), CFG)
    assert f.evidence["rng_rank_sets"] == [[0, 1, 2, 3]] and f.evidence["generator"] == "sampling_seed"
    assert f.severity == "critical"  # the trainer says it samples with one seed: no coincidence
    assert f.evidence["lines_up_with_tp_groups"] is True


def test_hash_and_rng_evidence_together_list_both_sources(tmp_path):
    extra = {r: [rng(r, 0, torch_cpu=f"n{r // 2}")] for r in range(4)}
    [f] = seed_collision.check(_run(tmp_path, seed_of=lambda r: r // 2, extra=extra), CFG)
    assert f.evidence["sources"] == ["completion hashes", "rng fingerprints"]
    assert f.evidence["shared_generators"] == ["torch_cpu"]
