"""The weight-sync check in real runs of the reference trainer (torchrun, 2 ranks, gloo, CPU).

`--inject stale-weights:step=N` stops the rollout copy from taking the pushed weights from step N;
the check after each push must find it at step N, `grpo-doctor report` must lead with it, and a
healthy run must get no such finding. A longer stale run also shows the log-prob drift.
"""
from __future__ import annotations

import json

import pytest
import torch
from grpo_doctor_trainer.config import parse_args
from grpo_doctor_trainer.model import build_char_tokenizer, build_tiny_model
from grpo_doctor_trainer.rollout import HFRollout

from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import run_rules
from grpo_doctor.cli.main import main
from grpo_doctor.schema import Step, WeightSync

STEPS = 6
STALE_FROM = 3
NUM_TENSORS = 21  # the tiny Llama: embeddings, 2 layers x 9, final norm, lm_head

pytestmark = pytest.mark.distributed


@pytest.fixture(scope="module")
def healthy(launch_trainer, tmp_path_factory):
    return launch_trainer(tmp_path_factory.mktemp("healthy"), "--model", "tiny", "--steps", str(STEPS))


@pytest.fixture(scope="module")
def stale(launch_trainer, tmp_path_factory):
    return launch_trainer(tmp_path_factory.mktemp("stale"), "--model", "tiny", "--steps", str(STEPS),
                          "--inject", f"stale-weights:step={STALE_FROM}")


def checks(run) -> dict[int, list[WeightSync]]:
    return {rank: log.of_kind(WeightSync) for rank, log in run.ranks.items()}


def test_a_healthy_run_checks_every_push_and_every_tensor_matches(healthy):
    assert healthy.returncode == 0, healthy.explain()
    for rank, records in checks(healthy.run).items():
        assert [r.step for r in records] == list(range(STEPS)), rank
        for r in records:
            assert (r.checked, r.engine, r.num_tensors, r.num_mismatched) == (True, "hf-copy", NUM_TENSORS, 0)
            assert (r.num_trainer_only, r.num_engine_only, r.num_unchecked) == (0, 0, 0)
            assert r.duration_s < 1.0
    findings, _ = run_rules(load_evidence([healthy.run_dir]))
    assert not [f for f in findings if f.id == "stale-rollout-weights"]
    # the rollout copy samples with the trainer's weights: its log-probs are the training forward's
    diffs = [s.metrics["logprob_diff"] for s in healthy.run.ranks[0].of_kind(Step)]
    assert len(diffs) == STEPS and max(diffs) < 1e-4


def test_stale_weights_are_found_by_the_check_at_the_step_they_start(stale):
    assert stale.returncode == 0, stale.explain()
    for rank, records in checks(stale.run).items():
        assert [r.num_mismatched for r in records[:STALE_FROM]] == [0] * STALE_FROM, rank
        assert all(r.num_mismatched == NUM_TENSORS for r in records[STALE_FROM:]), rank
    assert "weight sync: 21 of 21 tensors differ" in stale.output and "at step 3" in stale.output


def test_the_report_leads_with_the_critical_finding_naming_the_tensors_and_the_step(stale, tmp_path, capsys):
    status = main(["report", str(stale.run_dir), "--out", str(tmp_path), "--json"])
    assert status == 1  # a critical finding
    first = json.loads(capsys.readouterr().out)["findings"][0]
    assert (first["id"], first["severity"], first["step"], first["ranks"]) == (
        "stale-rollout-weights", "critical", STALE_FROM, [0, 1])
    assert first["evidence"]["tensors"][0] == "model.embed_tokens.weight"
    assert (first["evidence"]["last_matching_step"], first["evidence"]["num_mismatched"]) == (STALE_FROM - 1,
                                                                                               NUM_TENSORS)
    assert "model.embed_tokens.weight" in first["title"] and f"step {STALE_FROM}" in first["title"]


def test_a_longer_stale_run_shows_the_log_prob_drift_too(launch_trainer, tmp_path):
    run = launch_trainer(tmp_path, "--model", "tiny", "--steps", "10", "--inject", f"stale-weights:step={STALE_FROM}")
    assert run.returncode == 0, run.explain()
    findings, _ = run_rules(load_evidence([run.run_dir]))
    by_source = {f.evidence["source"]: f for f in findings if f.id == "stale-rollout-weights"}
    assert by_source["weight_sync"].severity == "critical" and by_source["weight_sync"].step == STALE_FROM
    [drift] = [f for source, f in by_source.items() if source != "weight_sync"]
    assert drift.severity == "warning" and drift.evidence["metric"] == "rollout_logprob_diff"
    assert drift.evidence["early_value"] < 1e-4 < 0.1 <= drift.evidence["late_value"]


def test_the_check_can_be_turned_off(launch_trainer, tmp_path):
    run = launch_trainer(tmp_path, "--model", "tiny", "--steps", "2", "--weight-sync-check-every", "0",
                         "--inject", "stale-weights:step=0")
    assert run.returncode == 0, run.explain()
    assert all(records == [] for records in checks(run.run).values())


def test_the_rollout_copy_takes_the_push_and_keeps_its_weights_when_skipped():
    cfg = parse_args(["--model", "tiny"])
    tokenizer = build_char_tokenizer()
    policy = build_tiny_model(tokenizer, seed=0)
    copy = HFRollout(policy, tokenizer, cfg, torch.device("cpu"))
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.01)
    copy.sync_weights(policy.named_parameters(), skip=True)
    assert not torch.equal(copy.model.lm_head.weight, policy.lm_head.weight)
    copy.sync_weights(policy.named_parameters())
    assert all(torch.equal(a, b) for a, b in zip(copy.model.parameters(), policy.parameters(), strict=True))
