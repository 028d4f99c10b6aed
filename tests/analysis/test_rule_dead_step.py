import dataclasses
import json

from rolloutdata import METRIC_LOGS, assert_documented, healthy_metrics, metrics_run, rollout, step
from rundata import header, write_rank

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import dead_step

CFG = dead_step.Config()


def _dead(n):
    return {"loss": 0.0, "reward": 1.0, "reward_std": 0.0, "frac_reward_zero_std": 1.0, "grad_norm": 0.0, "kl": 0.0}


def test_all_groups_zero_std_with_no_gradient_for_several_steps_is_critical(tmp_path):
    metrics = healthy_metrics(3) + [_dead(n) for n in range(6)] + healthy_metrics(3)
    [f] = dead_step.check(load_evidence([metrics_run(tmp_path, metrics)]), CFG)
    assert (f.id, f.severity, f.step) == ("dead-step", "critical", 3)
    assert f.evidence == {"source": "grpo-doctor", "first_step": 3, "last_step": 8, "num_steps": 6,
                          "reason": "all groups zero-std + zero gradient and loss", "frac_dead_steps": 0.5,
                          "grad_norm_max": 0.0, "loss_max_abs": 0.0}
    assert_documented([f])


def test_zero_gradient_and_loss_alone_counts_when_the_share_is_not_logged(tmp_path):
    metrics = [{"loss": 0.0, "grad_norm": 0.0, "reward": 0.3} for _ in range(5)]
    [f] = dead_step.check(load_evidence([metrics_run(tmp_path, metrics)]), CFG)
    assert f.evidence["reason"] == "zero gradient and loss"


def test_a_loss_near_zero_with_a_gradient_is_normal_grpo_and_never_fires(tmp_path):
    metrics = [{"loss": 0.0, "grad_norm": 0.8, "reward": 0.3, "frac_reward_zero_std": 0.25} for _ in range(10)]
    assert not list(dead_step.check(load_evidence([metrics_run(tmp_path, metrics)]), CFG))


def test_a_few_dead_steps_in_a_small_batch_do_not_fire(tmp_path):
    metrics = healthy_metrics(3) + [_dead(n) for n in range(CFG.min_consecutive_steps - 1)] + healthy_metrics(3)
    assert not list(dead_step.check(load_evidence([metrics_run(tmp_path, metrics)]), CFG))


def test_ms_swift_case_2_log_is_dead_from_the_first_step():
    [f] = dead_step.check(load_evidence([METRIC_LOGS / "swift_case2"]), CFG)
    assert (f.evidence["source"], f.evidence["first_step"], f.evidence["num_steps"]) == ("ms-swift", 1, 12)


def test_trl_healthy_log_with_a_zero_std_step_now_and_then_does_not_fire(tmp_path):
    state = json.loads((METRIC_LOGS / "trl_healthy" / "checkpoint-12" / "trainer_state.json").read_text())
    assert any(e["frac_reward_zero_std"] == 1.0 for e in state["log_history"])
    assert not list(dead_step.check(load_evidence([METRIC_LOGS / "trl_healthy"]), CFG))


def _rollout_run(run_dir, zero_std_frac, prompts_of, argv=("train.py",), metrics=None):
    """Two ranks, 8 steps of rollout records only (a custom trainer calling grpo_doctor.rollouts()), or
    with Step records of `metrics`. prompts_of(rank, n): the prompts the rank holds, two copies each."""
    for r in range(2):
        records = [dataclasses.replace(header(r, world_size=2), argv=list(argv))]
        for n in range(8):
            copies = [p for p in prompts_of(r, n) for _ in range(2)]
            records.append(rollout(r, n, copies, [f"c{i}" for i in range(len(copies))],
                                   zero_std_frac=zero_std_frac(n)))
            if metrics is not None:
                records.append(step(r, n, **metrics))
        write_rank(run_dir, r, records)
    return load_evidence([run_dir])


def test_rollout_records_alone_show_steps_where_every_group_was_zero_std(tmp_path):
    ev = _rollout_run(tmp_path, lambda n: 1.0 if n >= 2 else 0.5, lambda r, n: [f"q{r}-{n}-{g}" for g in range(3)])
    [f] = dead_step.check(ev, CFG)
    assert f.evidence == {"source": "grpo-doctor", "first_step": 2, "last_step": 7, "num_steps": 6,
                          "reason": "all groups zero-std", "frac_dead_steps": 0.75, "grad_norm_max": None,
                          "loss_max_abs": None}


def test_rollout_records_say_nothing_when_the_copies_of_a_prompt_are_spread_over_ranks(tmp_path):
    ev = _rollout_run(tmp_path, lambda n: 1.0, lambda r, n: [f"q{n}-{g}" for g in range(3)])
    assert not list(dead_step.check(ev, CFG))


def test_with_batch_scaled_rewards_the_rank_shares_find_groups_each_constant_but_different(tmp_path):
    # every group constant (one all 1.0, one all 0.0): the batch std is not 0, so TRL's batch-level
    # frac_reward_zero_std reads 0.0 while no group gives an advantage (the KL term alone moves the policy)
    ev = _rollout_run(tmp_path, lambda n: 1.0, lambda r, n: [f"q{r}-{n}-{g}" for g in range(3)],
                      argv=("train.py", "--scale_rewards", "batch"),
                      metrics={"frac_reward_zero_std": 0.0, "loss": 0.002, "grad_norm": 0.05})
    [f] = dead_step.check(ev, CFG)
    assert (f.evidence["num_steps"], f.evidence["reason"], f.evidence["grad_norm_max"]) == (
        8, "all groups zero-std", 0.05)
