"""The general metric reader (logs/metric_text.py) and the name rules (schema/metric_name_rules.py) on real
lines of formats no framework reader knows (tests/data/metric_formats/, sources in its SOURCES.md), and
each syntax of name/number pairs the issue names."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from grpo_doctor.logs.metric_text import MetricTextReader
from grpo_doctor.schema.metric_name_rules import metric_name, rollout_names_allowed, step_name

DATA = Path(__file__).resolve().parents[1] / "data" / "metric_formats"


def _records(text: str | bytes):
    reader = MetricTextReader()
    reader.feed_chunk(text.encode() if isinstance(text, str) else text)
    return reader.records


def _file(name: str):
    return _records((DATA / name).read_bytes())


@pytest.mark.parametrize(("name", "canonical"), [
    ("Total rewards mean", "reward"), ("Total rewards std", "reward_std_batch"),
    ("Grouped rewards std", "reward_std_group_mean"), ("rewards/accuracy_reward/std", "rewards/accuracy_reward/std"),
    ("r1_accuracy_reward_func std", "rewards/r_1_accuracy_func/std"), ("actor/entropy", "actor/entropy"),
    ("Train loss", "loss"), ("Avg Reward", "reward"), ("Mean Generation Length", "completion_length_mean"),
    ("KL", "kl"), ("Learning Rate", "learning_rate"), ("Grad Norm", "grad_norm"), ("policy_loss", "policy_loss"),
    # other quantities that share a word: left out
    ("value_loss", None), ("reward_loss", None), ("actor/kl_loss", None), ("actor/ppo_kl", None),
    ("entropy_coeff", None), ("max_grad_norm", None), ("Val loss", None), ("eval/reward", None),
    ("prompt_length/mean", None), ("critic/rewards/mean", None),
])
def test_names_are_mapped_by_their_words(name, canonical):
    assert metric_name(name) == canonical


def test_counters_and_episode_signs():
    assert [step_name(n) for n in ("training/global_step", "Iteration", "_step", "epoch", "Timing/iter")] == [
        "global_step", "iteration", "step", "epoch", None]
    assert rollout_names_allowed(["Total rewards mean", "KL"])
    assert not rollout_names_allowed(["ep_rew_mean", "approx_kl", "loss"])  # classic PPO: KL but episodes
    assert rollout_names_allowed(["critic/vf_loss", "response_length/mean"])  # LLM PPO: generated text


def test_mlx_lm_iter_lines_give_one_step_each_and_validation_is_left_out():
    records = _file("mlx_lm_iter_lines.log")
    assert [r.step for r in records] == [1, 14]
    first = records[0].metrics
    assert first["loss"] == 0.0 and first["reward"] == 0.0 and first["reward_std_batch"] == 0.0
    assert first["reward_std_group_mean"] == 0.0 and first["kl"] == 0.0 and first["learning_rate"] == 1e-05
    assert records[1].metrics["reward"] == 0.125


def test_nemo_rl_bulleted_summary_is_one_record_and_its_timing_block_none():
    [record] = _file("nemo_rl_training_results.log")
    assert record.syntax == "block" and record.metrics == {"loss": 0.1032}  # no sign of rollouts: loss only


def test_nemo_rl_summary_takes_its_step_from_the_header_above():
    text = ("========================= Step 3/10 =========================\n"
            + (DATA / "nemo_rl_training_results.log").read_text(encoding="utf-8").replace(
                "  • Buffer Size: 64\n", "  • Mean Generation Length: 613.4531\n"))
    [record] = _records(text)
    assert record.step == 3 and record.metrics == {"loss": 0.1032, "reward": 0.3486, "completion_length_mean": 613.4531}


def test_key_value_line_with_its_step_in_the_text():
    [record] = _file("cosmos_rl_key_value.log")
    assert record.step == 826
    assert record.metrics == {"loss": -0.01001, "learning_rate": 2e-06, "completion_length_mean": 426.0, "reward": 1.5}


def test_indented_blocks_under_section_headers_are_one_record_per_step():
    records = _file("trl_custom_metric_blocks.log")
    assert len(records) == 3 and all(r.step is None for r in records)  # numbered in order later
    assert records[1].metrics == {"rewards/mc_idx_reward/std": 0.0, "completions/mean_length": 2.6,
                                  "completions/min_length": 2.4}


def test_classic_rl_tables_and_blocks_keep_only_loss_and_learning_rate():
    assert [r.metrics for r in _file("sb3_ppo_tables.log")] == [{"loss": -0.00948, "learning_rate": 0.0003},
                                                                 {"loss": -0.00677, "learning_rate": 0.0003}]
    assert [(r.step, r.metrics) for r in _file("deeprm_pg_blocks.log")] == [
        (25, {"loss": 0.2555212676525116}), (26, {"loss": 0.2262439876794815})]
    assert _file("grounding_a3c_lines.log") == []  # rewards of episodes, no loss: nothing to judge


def test_wandb_sparklines_are_no_record():
    assert _file("wandb_run_history_trl.log") == []


@pytest.mark.parametrize("text", [
    "step=5 loss=nan reward=0.3 completion_length=200\n",
    "Step: 5, Loss: nan, Reward: 0.3, Completion length: 200\n",
    '{"step": 5, "pg_loss": NaN, "score": 0.3, "response_length": 200}\n',  # JSON a framework reader does not know
    "| step | loss | reward | completion_length |\n|---|---|---|---|\n| 5 | nan | 0.3 | 200 |\n",
    "┃ step ┃ loss ┃ reward ┃ completion_length ┃\n┡━━━━━━╇━━━━━━╇━━━━━━━━╇━━━━━━━━━━━━━━━━━━━┩\n│ 5 │ nan │ 0.3 │ 200 │\n",
    "step\tloss\treward\tcompletion_length\n5\tnan\t0.3\t200\n",
    "   step  loss  reward  completion_length\n0     5   nan     0.3                200\n",
    "Iter 5: Train loss nan, Total rewards mean 0.300, Total rewards std 0.100, KL 0.001\n",
])
def test_every_syntax_gives_the_step_and_a_nan_loss(text):
    [record] = _records(text)
    assert record.step == 5 and math.isnan(record.metrics["loss"])


def test_wandb_run_summary_block_behind_a_ray_prefix():
    text = ("(TaskRunner pid=1) wandb: Run summary:\n"
            "(TaskRunner pid=1) wandb:                       actor/entropy 0.06955\n"
            "(TaskRunner pid=1) wandb:                   critic/score/mean 0.9793\n"
            "(TaskRunner pid=1) wandb:                response_length/mean 232.04102\n"
            "(TaskRunner pid=1) wandb:                training/global_step 105\n"
            "(TaskRunner pid=1) wandb: \n")
    [record] = _records(text)
    assert record.syntax == "wandb-summary" and record.step == 105
    assert record.metrics == {"actor/entropy": 0.06955, "critic/score/mean": 0.9793, "response_length/mean": 232.04102}


def test_a_config_dump_and_the_trainers_end_summary_are_no_step():
    assert _records("learning_rate: 1e-06\nmax_completion_length: 1024\nmax_grad_norm: 1.0\n") == []
    assert _records("{'train_runtime': 120.5, 'train_samples_per_second': 1.2, 'train_loss': 0.01}\n") == []


def test_a_tsv_table_whose_column_prints_one_element_arrays_is_read_row_by_row():
    records = _file("chainerrl_tsv_scores.log")
    assert [r.syntax for r in records] == ["table"] * 6
    assert records[0].metrics == {"loss": pytest.approx(-0.0195257508921)}  # average_loss_policy; episodes: no reward


def test_json_lines_of_episode_rewards_are_read_and_not_judged():
    reader = MetricTextReader()
    reader.feed_chunk((DATA / "rad_json_eval_lines.log").read_bytes())
    assert (reader.records, reader.unjudged) == ([], 7)


@pytest.mark.parametrize("line", ['{"eval_time": 33.5, "reward_scale": 2}',  # no sign of episodes
                                  '{"episode": 3, "eval_time": 33.5, "grad_clip": 1}'])  # episodes, nothing measured
def test_a_record_with_no_measure_of_episodes_is_not_counted_as_read(line):
    reader = MetricTextReader()
    reader.feed_chunk(line.encode() + b"\n")
    assert (reader.records, reader.unjudged) == ([], 0)


def test_blocks_of_policy_entropy_and_kl_alone_are_read_and_not_judged():
    """Spinning Up's epoch tables cut by an excerpt down to their `Entropy` / `KL` / `Time` rows (the real rows of a
    corpus case, every other row dropped): classic RL logs policy entropy and KL as GRPO does, so these alone are no
    LLM rollout; judged, 60 such blocks with a falling entropy read as an entropy collapse."""
    case = Path(__file__).resolve().parents[1] / "data" / "corpus" / "other"
    rows = [line for line in (case / "spinningup-vpg-epoch-table-value-loss-rising-healthy.log").read_text().splitlines()
            if line.startswith("---") or line.split("|")[1:2] and line.split("|")[1].strip() in ("Entropy", "KL", "Time")]
    reader = MetricTextReader()
    reader.feed_chunk(("\n".join(rows) + "\n").encode())
    assert (reader.records, reader.unjudged) == ([], 2)
    [llm] = _records("Iter 5: Entropy 0.65, KL 0.001, Total rewards mean 0.300\n")  # a reward beside them: judged
    assert llm.metrics == {"entropy": 0.65, "kl": 0.001, "reward": 0.3}


def test_entropy_and_kl_on_their_own_lines_are_judged_once_the_log_shows_a_grpo_run():
    """Found in review: a GRPO script printing its reward and its entropy on separate lines lost its
    entropy-collapse warning when records of entropy and KL alone were never judged. Held until the log
    shows what trained, they are judged once a reward line says it was an LLM rollout."""
    lines = "".join(f"step={n} reward={0.3 + n / 1000:.4f} reward_std=0.200 completion_length=120\n"
                    f"step={n} entropy={1.0 / n:.4f} kl=0.0000\n" for n in range(1, 61))
    reader = MetricTextReader()
    reader.feed_chunk(lines.encode())
    entropy = [r.metrics["entropy"] for r in reader.records if "entropy" in r.metrics]
    assert len(entropy) == 60 and entropy[-1] < 0.02 and reader.unjudged == 0
    alone = MetricTextReader()  # the same entropy lines without the reward's: no sign of what trained
    alone.feed_chunk("".join(line + "\n" for line in lines.splitlines()[1::2]).encode())
    assert alone.records == [] and alone.unjudged == 60
