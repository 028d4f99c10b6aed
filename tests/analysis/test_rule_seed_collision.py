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


def _pair_layout(run_dir, seed_of, hosts, steps=3, copies=2, extra=None):
    """TRL's RepeatSampler layout: ranks 2k and 2k+1 hold the copies of prompt k (`copies` each), on hosts[rank]."""
    per_rank = {}
    for rank, host in enumerate(hosts):
        prompt = f"prompt-{rank // 2}"
        per_rank[rank] = [rollout(rank, n, [prompt] * copies,
                                  [f"{prompt} answer {seed_of(rank)}-{n}-{i}" for i in range(copies)], host=host)
                          for n in range(steps)] + (extra or {}).get(rank, [])
    return load_evidence([write_run(run_dir, per_rank)])


def test_one_seed_per_node_is_one_set_per_node_when_the_fingerprints_join_the_pairs(tmp_path):
    # 2 nodes x 4 ranks, the seed is the node rank; the copies of a prompt sit on pairs of ranks,
    # so hashes alone see {0-1} {2-3} {4-5} {6-7}: the shared sampling seed says which pairs are one node
    hosts = ["node-a"] * 4 + ["node-b"] * 4
    extra = {r: [rng(r, 0, host=hosts[r], sampling_seed=r // 4)] for r in range(8)}
    [f] = seed_collision.check(_pair_layout(tmp_path, lambda r: r // 4, hosts, extra=extra), CFG)
    ev = f.evidence
    assert ev["rank_sets"] == [[0, 1, 2, 3], [4, 5, 6, 7]] and ev["set_hosts"] == [["node-a"], ["node-b"]]
    assert ev["hash_rank_sets"] == [[0, 1], [2, 3], [4, 5], [6, 7]] and ev["rng_rank_sets"] == ev["rank_sets"]
    assert ev["lines_up_with_hosts"] is True and f.severity == "critical"
    assert "{0-3} and {4-7}" in f.title and "one seed per node" in f.title
    assert_documented([f])


def test_a_fingerprint_set_is_not_joined_where_the_hashes_show_its_ranks_differ(tmp_path):
    # all four share the torch CPU state, but only 0-1 sample alike (2-3 got distinct vLLM seeds, unrecorded)
    hosts = ["node-a"] * 4
    extra = {r: [rng(r, 0, host="node-a", torch_cpu="same")] for r in range(4)}
    [f] = seed_collision.check(_pair_layout(tmp_path, lambda r: 0 if r < 2 else r, hosts, extra=extra), CFG)
    assert f.ranks == (0, 1) and f.evidence["rank_sets"] == [[0, 1]]
    assert f.evidence["lines_up_with_hosts"] is False


def _one_copy_each(run_dir, answer_of, steps=3, extra=None):
    """Per-device batch 1: every rank holds one copy of the step's prompt, so no rank's own duplicate rate exists."""
    per_rank = {r: [rollout(r, n, ["3+4="], [answer_of(r, n)], duplicate_rate=None) for n in range(steps)]
                + (extra or {}).get(r, []) for r in range(4)}
    return load_evidence([write_run(run_dir, per_rank)])


def test_a_collapsed_policy_with_one_copy_per_rank_is_no_critical_seed_collision(tmp_path):
    # every rank answers "7" at temperature 1: a collapsed policy looks like one shared seed, and nothing tells them apart
    findings = list(seed_collision.check(_one_copy_each(tmp_path, lambda r, n: "7"), CFG))
    assert [f.severity for f in findings] == ["info"]
    [f] = findings
    assert f.evidence["cannot_tell_from_collapse"] is True and f.ranks == (0, 1, 2, 3)
    assert "collapsed policy" in f.title and any("seed_audit" in h for h in f.hints)
    assert not any("device_specific" in h for h in f.hints)  # the seed remedy would be a guess
    assert_documented([f])


def test_a_collapsed_policy_with_distinct_sampling_seeds_gives_no_finding(tmp_path):
    extra = {r: [rng(r, 0, sampling_seed=r)] for r in range(4)}
    assert not list(seed_collision.check(_one_copy_each(tmp_path, lambda r, n: "7", extra=extra), CFG))


def test_identical_single_copies_with_a_shared_sampling_seed_are_a_critical_collision(tmp_path):
    extra = {r: [rng(r, 0, sampling_seed=5)] for r in range(4)}
    [f] = seed_collision.check(_one_copy_each(tmp_path, lambda r, n: f"answer {n}", extra=extra), CFG)
    assert (f.severity, f.ranks) == ("critical", (0, 1, 2, 3))
    assert f.evidence["sources"] == ["completion hashes", "rng fingerprints"]
    assert f.evidence["cannot_tell_from_collapse"] is False and f.evidence["within_duplicate_rate"] is None
    assert any("device_specific" in h for h in f.hints)


def test_single_copies_identical_on_some_ranks_only_are_a_collision_of_those_ranks(tmp_path):
    # ranks 2 and 3 wrote other answers to the same prompt: the policy still samples, 0-1 share a seed
    [f] = seed_collision.check(_one_copy_each(tmp_path, lambda r, n: f"answer {n}" if r < 2 else f"{r}-{n}"), CFG)
    assert (f.severity, f.ranks) == ("critical", (0, 1))
    assert f.evidence["cannot_tell_from_collapse"] is False


def test_the_ms_swift_hint_names_the_release_with_the_colocate_seed_fix(tmp_path):
    [f] = seed_collision.check(_run(tmp_path, seed_of=lambda r: r // 2), CFG)
    [hint] = [h for h in f.hints if "ms-swift" in h]
    assert "3.5.3" in hint and "#4712" in hint


def test_a_stated_shared_seed_the_hashes_never_compared_is_kept_beside_a_hash_collision(tmp_path):
    # Ranks 0-1 share seed 7 and hold copies of the same prompts; ranks 2 and 3 each hold their own
    # prompts, so only their audits (seed 5 on both) show that they sample alike too.
    prompts = {0: ("a", "b"), 1: ("a", "b"), 2: ("c",), 3: ("d",)}
    seed = {0: 7, 1: 7, 2: 5, 3: 5}
    per_rank = {}
    for r in range(4):
        copies = [p for p in prompts[r] for _ in range(2)]
        per_rank[r] = [rollout(r, n, copies, [f"{p} answer {seed[r]}-{n}-{i}" for i, p in enumerate(copies)])
                       for n in range(3)] + [rng(r, 0, sampling_seed=seed[r])]
    [finding] = seed_collision.check(load_evidence([write_run(tmp_path, per_rank)]), seed_collision.Config())
    assert finding.severity == "critical" and finding.ranks == (0, 1, 2, 3)
    assert finding.evidence["rank_sets"] == [[0, 1], [2, 3]] and finding.evidence["hash_rank_sets"] == [[0, 1]]
