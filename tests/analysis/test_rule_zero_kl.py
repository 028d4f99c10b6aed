import json

from rolloutdata import METRIC_LOGS, assert_documented, healthy_metrics, metrics_run, step, write_run
from rundata import common

from grpo_doctor.analysis.grpo_metrics import step_series
from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import zero_kl
from grpo_doctor.schema import Header

CFG = zero_kl.Config()


def test_kl_stuck_at_zero_while_the_policy_is_updated_is_a_warning(tmp_path):
    metrics = [{**m, "kl": 0.0} for m in healthy_metrics(8)]
    [f] = zero_kl.check(load_evidence([metrics_run(tmp_path, metrics)]), CFG)
    assert (f.id, f.severity, f.step) == ("zero-kl", "warning", 1)
    assert f.evidence == {"source": "grpo-doctor", "first_step": 1, "last_step": 7, "num_steps": 7, "beta": None,
                          "moving_since_step": 0, "grad_norm_median": 1.1}
    assert_documented([f])


def test_kl_growing_from_zero_is_healthy_and_a_dead_first_step_delays_the_count(tmp_path):
    assert not list(zero_kl.check(load_evidence([metrics_run(tmp_path / "a", healthy_metrics(10))]), CFG))
    # step 0 had no gradient, so step 1's KL is still exactly 0 (seen in the reference trainer)
    metrics = healthy_metrics(10)
    metrics[0] = {**metrics[0], "grad_norm": 0.0}
    metrics[1] = {**metrics[1], "kl": 0.0}
    assert not list(zero_kl.check(load_evidence([metrics_run(tmp_path / "b", metrics)]), CFG))


def test_no_finding_when_beta_is_zero_on_the_command_line(tmp_path):
    records = {}
    for r in range(2):
        head = Header(**common(r), local_rank=r, world_size=2, node_rank=0, local_world_size=2, gpu_uuid=None,
                      versions={}, launch={}, argv=["-m", "grpo_doctor_trainer.train", "--beta", "0"])
        records[r] = [head] + [step(r, n, **{**m, "kl": 0.0}) for n, m in enumerate(healthy_metrics(8))]
    run_dir = tmp_path / "run"
    for r, recs in records.items():
        (run_dir / "ranks").mkdir(parents=True, exist_ok=True)
        (run_dir / "ranks" / f"rank-{r:05d}.jsonl").write_text("".join(json.dumps(x.to_dict()) + "\n" for x in recs))
    assert not list(zero_kl.check(load_evidence([run_dir]), CFG))


def test_no_finding_when_kl_is_not_logged_or_nothing_moves(tmp_path):
    no_kl = [{k: v for k, v in m.items() if k != "kl"} for m in healthy_metrics(8)]
    assert not list(zero_kl.check(load_evidence([metrics_run(tmp_path / "a", no_kl)]), CFG))
    frozen = [{"loss": 0.0, "grad_norm": 0.0, "kl": 0.0, "frac_reward_zero_std": 1.0} for _ in range(8)]
    assert not list(zero_kl.check(load_evidence([metrics_run(tmp_path / "b", frozen)]), CFG))
    assert not list(zero_kl.check(load_evidence([METRIC_LOGS / "trl_beta0"]), CFG))  # TRL omits kl at beta 0


def test_ms_swift_beta_comes_from_its_args_json(tmp_path):
    run = tmp_path / "swift"
    run.mkdir()
    args = json.loads((METRIC_LOGS / "swift_healthy" / "args.json").read_text())
    lines = [json.loads(x) for x in (METRIC_LOGS / "swift_healthy" / "logging.jsonl").read_text().splitlines()]
    lines = [{**x, "kl": 0.0} if "kl" in x else x for x in lines]
    (run / "logging.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (run / "args.json").write_text(json.dumps(args))
    [f] = zero_kl.check(load_evidence([run]), CFG)
    assert (f.evidence["source"], f.evidence["beta"]) == ("ms-swift", 0.04)
    (run / "args.json").write_text(json.dumps({**args, "beta": 0.0}))
    assert not list(zero_kl.check(load_evidence([run]), CFG))


def test_warm_up_from_a_zero_learning_rate_is_not_an_update(tmp_path):
    metrics = [{**m, "kl": 0.0, "lr": 0.0} for m in healthy_metrics(8)]
    assert not list(zero_kl.check(load_evidence([write_run(tmp_path, {0: [step(0, n, **m) for n, m in
                                                                          enumerate(metrics)]})]), CFG))


def test_verl_kl_loss_logged_as_zero_with_the_kl_loss_off_is_not_a_zero_kl(tmp_path):
    # verl's actor metrics start from {"actor/pg_loss": 0.0, "actor/kl_loss": 0.0} and add actor/kl_coef
    # only with use_kl_loss; a trainer passing them to grpo_doctor.step() records them as they are
    metrics = [{"actor/pg_loss": 0.01 * (n % 3) - 0.01, "actor/kl_loss": 0.0, "actor/grad_norm": 0.8 + 0.1 * n,
                "actor/lr": 1e-6, "actor/entropy": 2.5 - 0.02 * n, "actor/pg_clipfrac": 0.01,
                "critic/score/mean": 0.2 + 0.01 * n, "critic/advantages/mean": 0.0,
                "response_length/mean": 300.0, "response_length/clip_ratio": 0.02} for n in range(10)]
    ev = load_evidence([metrics_run(tmp_path, metrics)])
    assert not list(zero_kl.check(ev, CFG))
    assert "kl" not in step_series(ev)["grpo-doctor"]  # actor/kl_loss is not read as the KL
