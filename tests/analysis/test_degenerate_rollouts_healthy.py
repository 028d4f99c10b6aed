"""No false alarms: healthy runs, instrumented or read from framework logs, give none of the degenerate-rollout findings."""
import pytest
from rolloutdata import METRIC_LOGS, ROLLOUT_IDS, healthy_metrics, rng, rollout, step, write_run

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import run_rules


def _ids(paths):
    findings, warnings = run_rules(load_evidence(paths))
    assert not [w for w in warnings if w.startswith("rule ")], warnings
    return [f.id for f in findings if f.id in ROLLOUT_IDS]


def test_a_healthy_instrumented_run_gives_none_of_them(tmp_path):
    # rewards vary, some groups zero-std, KL grows from 0, the loss near 0 at times; each rank its own seed
    per_rank = {}
    for r in range(4):
        records = [rng(r, None, tag="init", torch_cpu="torch-default"), rng(r, 0, torch_cpu=f"seeded-{r}")]
        for n, m in enumerate(healthy_metrics(30)):
            prompts = ["3+4=", "3+4=", "9*2=", "9*2="]
            records += [rollout(r, n, prompts, [f"{p}{r}-{n}-{i}" for i, p in enumerate(prompts)]), step(r, n, **m)]
        per_rank[r] = records
    assert _ids([write_run(tmp_path, per_rank)]) == []


@pytest.mark.parametrize("name", ["trl_healthy", "trl_beta0", "swift_healthy", "swift46_probe"])
def test_healthy_framework_logs_give_none_of_them(name):
    assert _ids([METRIC_LOGS / name]) == []


@pytest.mark.distributed
def test_the_reference_trainer_healthy_over_three_seeds_gives_none_of_them(launch_trainer, tmp_path):
    # Batch 2 < 4 generations: the copies of each prompt are spread over both ranks, so the
    # cross-rank hash comparison of seed-collision is exercised too, not only the per-rank rules.
    for seed in (0, 1, 2):
        result = launch_trainer(tmp_path / f"seed{seed}", "--steps", "10", "--seed", str(seed),
                                "--per-device-batch", "2", nproc=2)
        assert result.returncode == 0, result.explain()
        assert _ids([tmp_path / f"seed{seed}"]) == [], f"seed {seed}"


@pytest.mark.distributed
def test_the_reference_trainer_with_a_constant_reward_is_dead_from_the_start(launch_trainer, tmp_path):
    result = launch_trainer(tmp_path / "run", "--steps", "6", "--inject", "constant-reward", nproc=2)
    assert result.returncode == 0, result.explain()
    findings, _ = run_rules(load_evidence([tmp_path / "run"]))
    by_id = {f.id: f for f in findings}
    assert {"constant-reward", "dead-step"} <= set(by_id)
    assert by_id["constant-reward"].evidence["reward_value"] == 1.0 and by_id["dead-step"].evidence["first_step"] == 0



@pytest.mark.distributed
def test_the_reference_trainer_with_one_seed_per_node_gets_seed_collision_on_exactly_that_nodes_ranks(
        launch_trainer, tmp_path):
    # 4 ranks; the copies of a prompt are spread over two ranks (batch 2 < 4 generations), so they can collide.
    result = launch_trainer(tmp_path / "run", "--steps", "3", "--per-device-batch", "2", "--inject",
                            "same-seed-per-node", nproc=4)
    assert result.returncode == 0, result.explain()
    findings, _ = run_rules(load_evidence([tmp_path / "run"]))
    [collision] = [f for f in findings if f.id == "seed-collision"]
    assert collision.severity == "critical" and collision.ranks == (0, 1, 2, 3)
    # The hashes show the pairs that held copies of the same prompts; the seed audits join them into the node.
    assert collision.evidence["hash_rank_sets"] == [[0, 1], [2, 3]]
    assert collision.evidence["rank_sets"] == [[0, 1, 2, 3]] and collision.evidence["lines_up_with_hosts"] is True
    assert collision.evidence["identical_frac"] == 1.0 and "device_specific=True" in collision.hints[0]
