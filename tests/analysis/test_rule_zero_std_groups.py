import dataclasses
import json

from rolloutdata import METRIC_LOGS, assert_documented, healthy_metrics, metrics_run, rollout, step
from rundata import header, write_rank

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import zero_std_groups

CFG = zero_std_groups.Config()


def test_most_groups_without_reward_variance_over_a_window_is_a_warning(tmp_path):
    metrics = healthy_metrics(5) + [{**m, "frac_reward_zero_std": 0.875} for m in healthy_metrics(12)]
    [f] = zero_std_groups.check(load_evidence([metrics_run(tmp_path, metrics)]), CFG)
    assert (f.id, f.severity) == ("zero-std-groups", "warning")
    assert f.evidence["zero_std_share"] == 0.875 and f.evidence["num_steps"] == CFG.window_steps
    assert f.evidence["first_step"] >= 5 and f.evidence["share_overall"] < 0.875
    assert any("dynamic_sample" in h for h in f.hints) and any("filter_groups" in h for h in f.hints)
    assert_documented([f])


def test_a_usual_share_of_zero_std_groups_does_not_fire(tmp_path):
    assert not list(zero_std_groups.check(load_evidence([metrics_run(tmp_path, healthy_metrics(30))]), CFG))


def test_runs_shorter_than_the_window_are_not_judged(tmp_path):
    metrics = [{"frac_reward_zero_std": 1.0}] * (CFG.window_steps - 1)
    assert not list(zero_std_groups.check(load_evidence([metrics_run(tmp_path, metrics)]), CFG))


def test_framework_logs_of_a_degenerate_run_fire_and_healthy_ones_do_not():
    [f] = zero_std_groups.check(load_evidence([METRIC_LOGS / "swift_case2"]), CFG)
    assert f.evidence["zero_std_share"] == 1.0 and f.evidence["zero_std_from"] == "frac_reward_zero_std"
    for healthy in ("swift_healthy", "trl_healthy"):
        assert not list(zero_std_groups.check(load_evidence([METRIC_LOGS / healthy]), CFG))


def _rollouts(rank: int, n: int, prompts: list[str], zero_std_frac: float):
    """A rank's rollout record: two copies of each prompt, the given share of its groups zero-std."""
    copies = [p for p in prompts for _ in range(2)]
    return rollout(rank, n, copies, [f"{p}-{i}" for i, p in enumerate(copies)], zero_std_frac=zero_std_frac)


def _run(run_dir, per_step, argv=("train.py",), metrics=None):
    """per_step(rank, n) -> the rank's rollout record of step n; `metrics`: Step records' metrics, if any."""
    per_rank = {}
    for r in range(2):
        records = [dataclasses.replace(header(r, world_size=2), argv=list(argv))]
        for n in range(12):
            records.append(per_step(r, n))
            if metrics is not None:
                records.append(step(r, n, **metrics))
        per_rank[r] = records
    for r, records in per_rank.items():
        write_rank(run_dir, r, records)
    return load_evidence([run_dir])


def test_a_trainer_that_records_only_rollouts_is_judged_from_its_ranks_shares_weighted_by_groups(tmp_path):
    # rank 0 holds four whole groups, all zero-std; rank 1 one group with a spread: 4 of 5 groups (0.8),
    # where an unweighted mean of the ranks would say 0.5
    ev = _run(tmp_path, lambda r, n: _rollouts(r, n, [f"q{r}-{n}-{g}" for g in range(4 if r == 0 else 1)],
                                             1.0 if r == 0 else 0.0))
    assert ev.steps.empty
    [f] = zero_std_groups.check(ev, CFG)
    assert f.evidence["source"] == "grpo-doctor" and f.evidence["zero_std_from"] == "rollout records"
    assert f.evidence["zero_std_share"] == 0.8
    assert_documented([f])


def test_rank_shares_are_not_used_when_the_copies_of_a_prompt_are_spread_over_ranks(tmp_path):
    # TRL's layout with a per-device batch smaller than the group: a rank's part of a group may be
    # constant while the whole group is not, so these shares say nothing about the real groups
    ev = _run(tmp_path, lambda r, n: _rollouts(r, n, [f"q{n}-{g}" for g in range(4)], 1.0))
    assert not list(zero_std_groups.check(ev, CFG))


def test_with_batch_scaled_rewards_trl_logs_a_batch_flag_and_the_rank_shares_are_read_instead(tmp_path):
    # TRL with scale_rewards="batch": frac_reward_zero_std is 1 only when the whole batch has one reward,
    # so its 0.0 says nothing about the groups, which here are 90% zero-std
    def per_step(r, n):
        return _rollouts(r, n, [f"q{r}-{n}-{g}" for g in range(10)], 0.9)

    batch = _run(tmp_path / "batch", per_step, argv=("train.py", "--scale_rewards", "batch"),
                 metrics={"frac_reward_zero_std": 0.0, "reward_std": 0.4})
    [f] = zero_std_groups.check(batch, CFG)
    assert (f.evidence["zero_std_from"], f.evidence["zero_std_share"]) == ("rollout records", 0.9)
    # scaled per group, the logged share is TRL's own count over whole groups and is read
    group = _run(tmp_path / "group", per_step, metrics={"frac_reward_zero_std": 0.0, "reward_std": 0.4})
    assert not list(zero_std_groups.check(group, CFG))


def test_a_batch_flag_alone_is_read_as_a_lower_bound_and_says_so(tmp_path):
    metrics = [{"frac_reward_zero_std": 0.0 if n == 3 else 1.0} for n in range(12)]
    run_dir = metrics_run(tmp_path, metrics)
    for r in range(2):  # the same ranks, started with --scale_rewards batch
        path = run_dir / "ranks" / f"rank-{r:05d}.jsonl"
        lines = path.read_text().splitlines()
        head = json.loads(lines[0])
        lines[0] = json.dumps({**head, "argv": ["train.py", "--scale_rewards=batch"]})
        path.write_text("\n".join(lines) + "\n")
    [f] = zero_std_groups.check(load_evidence([run_dir]), CFG)
    assert f.evidence["zero_std_from"] == "frac_reward_zero_std, batch-level (a lower bound)"
    assert f.title.startswith("at least 90% of groups")
