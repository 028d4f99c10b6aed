from rolloutdata import assert_documented, healthy_metrics, metrics_run, rollout, write_run

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import length_collapse

CFG = length_collapse.Config()


def test_every_completion_cut_at_the_limit_for_several_steps(tmp_path):
    metrics = [{**m, "completions/clipped_ratio": 1.0, "completions/max_length": 1024.0} for m in healthy_metrics(6)]
    [f] = length_collapse.check(load_evidence([metrics_run(tmp_path, metrics)]), CFG)
    assert (f.id, f.severity, f.evidence["kind"], f.evidence["num_steps"]) == ("length-collapse", "warning",
                                                                                "truncated", 6)
    assert f.evidence["max_length"] == 1024 and f.evidence["clipped_frac"] == 1.0
    assert any("max_completion_length" in h for h in f.hints)
    assert_documented([f])


def test_completions_shrinking_to_one_token(tmp_path):
    metrics = healthy_metrics(4) + [{**m, "completion_length": 1.0} for m in healthy_metrics(5)]
    [f] = length_collapse.check(load_evidence([metrics_run(tmp_path, metrics)]), CFG)
    assert (f.evidence["kind"], f.evidence["first_step"], f.evidence["last_step"]) == ("empty", 4, 8)


def test_rollout_records_give_the_truncated_share_when_no_metric_has_it(tmp_path):
    per_rank = {r: [rollout(r, n, ["q"] * 4, [f"x{r}{n}{i}" for i in range(4)], truncated_frac=1.0)
                    for n in range(5)] for r in range(2)}
    [f] = length_collapse.check(load_evidence([write_run(tmp_path, per_rank)]), CFG)
    assert (f.evidence["kind"], f.evidence["clipped_frac"], f.evidence["max_length"]) == ("truncated", 1.0, 64)


def test_lengths_that_only_touch_the_limits_now_and_then_do_not_fire(tmp_path):
    metrics = healthy_metrics(12)
    for n in (2, 3, 7):
        metrics[n] = {**metrics[n], "completion_length": 1.0, "completions/clipped_ratio": 1.0}
    assert not list(length_collapse.check(load_evidence([metrics_run(tmp_path, metrics)]), CFG))
