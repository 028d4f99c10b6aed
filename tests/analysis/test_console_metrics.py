"""Metric lines printed to the console (TRL, ms-swift, verl, OpenRLHF), read from raw logs by their content.

Fixtures under tests/data/metric_logs/console/ are verbatim lines from public issues (SOURCES.md there);
the longer logs that a rule needs (an entropy collapse, a NaN) are written here in verl's / TRL's shapes.
"""
import math

import pytest
from rolloutdata import METRIC_LOGS

from grpo_doctor.analysis.console_metrics import read_console_metrics
from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.analysis.rules import RULES, run_rules

CONSOLE = METRIC_LOGS / "console"
ROLLOUT_IDS = {"entropy-collapse", "nan-loss", "dead-step", "zero-std-groups", "constant-reward", "zero-kl",
               "length-collapse"}


def _rollout_findings(path):
    findings, _ = run_rules(load_evidence([path]))
    return [f for f in findings if f.id in ROLLOUT_IDS]


def _verl_line(step, entropy, prefix="(TaskRunner pid=1234) "):
    # verl's console logger (verl/utils/logger/aggregate_logger.py): "step:N" and "key:value" joined by " - "
    return (f"{prefix}step:{step} - actor/entropy:{entropy} - actor/pg_loss:0.01 - actor/kl_loss:0.001 - "
            f"actor/grad_norm:0.2 - actor/lr:1e-06 - critic/score/mean:0.4 - critic/score/max:1.0 - "
            f"critic/score/min:0.0 - critic/advantages/mean:0.0 - critic/advantages/max:1.79 - "
            f"critic/advantages/min:-1.79 - response_length/mean:300.5 - response_length/clip_ratio:0.01\n")


def test_trl_console_dicts_are_read_in_order_with_their_canonical_names():
    [log] = read_console_metrics(CONSOLE / "trl_3452_loss_zero_healthy_progress_bar.log")
    assert (log.format, log.source, log.num_rows) == ("trl-console", "trl", 4)
    assert [row["step"] for row in log.steps] == [1, 2, 3, 4]  # no step printed: the n-th logged step
    assert log.steps[0]["reward_std_batch"] == 0.5700982138514519 and log.steps[3]["completion_length_mean"] == 235.6


def test_ms_swift_json_lines_take_their_step_from_global_step_max_steps():
    [log] = read_console_metrics(CONSOLE / "swift_9261_all_truncated_zero_reward.log")
    assert (log.format, log.source) == ("ms-swift-console", "ms-swift")
    assert [row["step"] for row in log.steps] == [1, 2]
    assert log.steps[0]["clipped_frac"] == 1.0 and log.steps[1]["entropy"] == 0.55015859


def test_an_ms_swift_dict_pasted_without_braces_is_still_read():
    [log] = read_console_metrics(CONSOLE / "swift_5571_repr_without_braces.log")
    assert log.format == "ms-swift-console" and log.steps[0]["step"] == 5 and log.steps[0]["grad_norm"] == 0.0


def test_verl_lines_skip_validation_only_steps_and_map_verl_names():
    [log] = read_console_metrics(CONSOLE / "verl_2060_validation_then_step1.log")
    assert (log.format, log.source, [r["step"] for r in log.steps]) == ("verl-console", "verl", [1])
    row = log.steps[0]
    assert (row["entropy"], row["grad_norm"], row["loss"], row["reward"]) == (0.323, 0.02, 0.001, 0.558)
    assert (row["reward_range_batch"], row["advantage_abs_max"], row["clipped_frac"]) == (1.0, 1.789, 0.0)
    assert "kl" not in row  # actor/kl_loss is 0 whenever the KL loss is off: not read as the KL


def test_a_verl_line_broken_by_a_paste_is_joined_again_behind_its_ray_prefix():
    [log] = read_console_metrics(CONSOLE / "verl_7412_ray_prefix_line_broken.log")
    row = log.steps[0]
    assert row["step"] == 34 and row["advantage_abs_max"] == 1.7888524532318115
    assert row["completion_length_mean"] == 1267.024169921875  # from the second half of the line


def test_nan_in_a_python_repr_is_a_nan_loss(tmp_path):
    [log] = read_console_metrics(CONSOLE / "hf_kto_1447_nan_loss.log")
    assert math.isnan(log.steps[1]["loss"]) and log.nonfinite == [{"step": 2, "metric": "loss",
                                                                    "value": log.nonfinite[0]["value"]}]
    [f] = _rollout_findings(CONSOLE / "hf_kto_1447_nan_loss.log")
    assert (f.id, f.severity, f.step) == ("nan-loss", "critical", 2)  # the last thing logged: not a blip


def test_a_raw_log_gives_both_its_failure_messages_and_its_metric_rows(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("\r 10%|█         | 1/10 [00:05<00:45,  5.0s/it]"
                   + (CONSOLE / "trl_3857_all_groups_zero_std.log").read_text()
                   + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                     "capacity of 79.15 GiB of which 1.05 GiB is free.\n")
    ev = load_evidence([log])
    assert "cuda-oom" in {row["kind"] for row in ev.signature_rows}
    [metrics] = ev.metric_logs
    assert (metrics.format, metrics.num_rows) == ("trl-console", 1)


@pytest.mark.parametrize("name, expected", [
    ("trl_3857_all_groups_zero_std.log", "all groups zero-std + zero gradient and loss"),
    ("swift_9261_all_truncated_zero_reward.log", "all groups zero-std + zero gradient and loss"),
    ("verl_awesome_ml_sys_106_advantages_all_zero.log", "every advantage 0"),
])
def test_one_or_two_dead_steps_are_enough_in_a_short_log_but_only_a_warning(name, expected):
    [f] = _rollout_findings(CONSOLE / name)
    assert (f.id, f.severity, f.evidence["reason"], f.evidence["frac_dead_steps"]) == (
        "dead-step", "warning", expected, 1.0)


@pytest.mark.parametrize("name", ["trl_open_r1_239_loss_zero_healthy.log", "trl_3452_loss_zero_healthy_progress_bar.log",
                                  "swift_5890_healthy.log", "verl_2060_validation_then_step1.log",
                                  "verl_7412_ray_prefix_line_broken.log"])
def test_healthy_console_logs_give_no_rollout_finding(name):
    assert _rollout_findings(CONSOLE / name) == []


def test_a_verl_console_log_whose_entropy_falls_to_nothing_is_an_entropy_collapse(tmp_path):
    entropies = [1.5, 1.48, 1.41, 1.1, 0.7, 0.3, 0.05, 0.01, 0.004, 0.002]
    log = tmp_path / "verl_run.out"
    log.write_text("".join(_verl_line(n, e) for n, e in enumerate(entropies, start=1)))
    [f] = _rollout_findings(log)
    assert (f.id, f.evidence["source"], f.evidence["start_entropy"], f.evidence["end_entropy"]) == (
        "entropy-collapse", "verl", 1.48, 0.004)
    healthy = tmp_path / "verl_healthy.out"
    healthy.write_text("".join(_verl_line(n, 1.5 - 0.01 * n) for n in range(1, 11)))
    assert _rollout_findings(healthy) == []


def test_openrlhf_global_step_dicts_are_read_and_its_kl_is_not_taken_for_the_reference_kl(tmp_path):
    # OpenRLHF's trainer logs `✨ Global step N: {status}` (openrlhf/trainer/ppo_trainer.py); kl is 0 without a
    # reference model, so zero-kl must not read it
    lines = [f"2025-08-26 10:00:0{n},000 INFO ✨ Global step {n}: {{'policy_loss': 0.01, 'actor_lr': 1e-06, "
             f"'actor_grad_norm': 0.3, 'kl': 0.0, 'reward': 0.5, 'response_length': 320.0, 'entropy_loss': "
             f"{round(1.2 - 0.1 * n, 3)}, 'rollout/reward_std': 0.4, 'timing/generation': 12.5}}\n" for n in range(1, 8)]
    path = tmp_path / "openrlhf.log"
    path.write_text("".join(lines))
    [log] = read_console_metrics(path)
    assert (log.format, log.source, [r["step"] for r in log.steps]) == ("openrlhf-console", "openrlhf",
                                                                        list(range(1, 8)))
    row = log.steps[0]
    assert (row["loss"], row["grad_norm"], row["reward_std_batch"], row["entropy"]) == (0.01, 0.3, 0.4, 1.1)
    assert "kl" not in row
    assert _rollout_findings(path) == []


def test_a_big_log_without_metric_lines_is_passed_over_cheaply(tmp_path):
    path = tmp_path / "nccl.log"
    path.write_text("NCCL INFO Channel 00/32 :    0   1   2   3   4   5   6   7\n" * 200_000)
    assert read_console_metrics(path) == []


def test_every_rollout_rule_is_still_registered():
    assert ROLLOUT_IDS <= {rule.ID for rule in RULES}
