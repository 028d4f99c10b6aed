"""The framework-independent parts of the integrations: batch layout, texts, metrics, reward slices."""
import math
from types import SimpleNamespace

import torch
from helpers import run_program

from grpo_doctor.rank.integrations.callback import numeric_metrics, sampling_place
from grpo_doctor.rank.integrations.layout import as_text, layout_group_ids, rank_rewards
from grpo_doctor.runlog.eventlog import load_run
from grpo_doctor.schema import Memory, PhaseBegin, Rng, Step


def test_group_ids_follow_the_repeat_sampler_layout_and_agree_across_ranks():
    # 2 ranks x 2 rows, num_generations 4: one prompt, its copies split over both ranks.
    assert layout_group_ids(["2+2="] * 2, process_index=0, num_generations=4) == [0, 0]
    assert layout_group_ids(["2+2="] * 2, process_index=1, num_generations=4) == [0, 0]
    rows = ["a"] * 4 + ["b"] * 4
    assert layout_group_ids(rows, process_index=1, num_generations=4) == [2, 2, 2, 2, 3, 3, 3, 3]
    # Adjacent groups with the same prompt stay two groups.
    assert layout_group_ids(["a"] * 4, process_index=0, num_generations=2) == [0, 0, 1, 1]


def test_rows_that_break_the_layout_give_no_group_ids():
    assert layout_group_ids(["a", "b", "b", "b"], process_index=0, num_generations=2) is None


def test_chat_prompts_and_completions_become_role_content_lines():
    assert as_text("2+2=") == "2+2="
    chat = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2="}]
    assert as_text(chat) == "system: be brief\nuser: 2+2="
    parts = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "what is it?"}]}]
    assert as_text(parts) == "user: <image>what is it?"
    assert as_text({"role": "assistant", "content": "4"}) == "assistant: 4"


def test_step_metrics_keep_numbers_and_nan():
    logs = {"loss": float("nan"), "reward": 0.5, "num_tokens": 12, "flag": True, "note": "x",
            "rewards/accuracy/mean": 0.5}
    kept = numeric_metrics(logs)
    assert set(kept) == {"loss", "reward", "num_tokens", "rewards/accuracy/mean"}
    assert math.isnan(kept["loss"])


def test_colocated_vllm_ranks_are_placed_as_trl_and_ms_swift_seed_them():
    args = SimpleNamespace(use_vllm=True, vllm_mode="colocate", vllm_tensor_parallel_size=2, process_index=3)
    assert sampling_place(args) == {"sampling_seed": 1, "tp_rank": 1, "tp_group": 1}
    assert sampling_place(SimpleNamespace(use_vllm=True, vllm_mode="server", process_index=3)) == {}
    assert sampling_place(SimpleNamespace(use_vllm=False)) == {}
    # A request seed in generation_kwargs: every rank samples every copy alike, whatever its engine seed.
    fixed = SimpleNamespace(use_vllm=True, vllm_mode="colocate", process_index=3, generation_kwargs={"seed": 7})
    assert sampling_place(fixed) == {"sampling_seed": 7}


def test_a_ranks_rewards_are_its_rows_weighted_as_trl_logs_them():
    nan = math.nan
    # Gathered from 2 ranks x 2 rows; columns: two reward functions, one of them unweighted.
    gathered = torch.tensor([[1.0, 0.0, 9.0], [0.0, 1.0, 9.0], [1.0, nan, nan], [nan, nan, nan]])
    weights = torch.tensor([1.0, 0.5, 0.0])
    assert rank_rewards(gathered, weights, process_index=0, n=2) == [1.0, 0.5]
    rank1 = rank_rewards(gathered, weights, process_index=1, n=2)
    assert rank1[0] == 1.0 and math.isnan(rank1[1])  # no function scored the last row
    assert all(math.isnan(r) for r in rank_rewards(None, weights, process_index=0, n=2))
    # ms-swift 4.0-4.3 hands back this rank's rows alone, whatever its index.
    assert rank_rewards(gathered[2:], weights, process_index=1, n=2)[0] == 1.0


def test_the_callback_writes_one_step_record_per_step_with_that_steps_train_log_only(tmp_path):
    out = run_program(tmp_path, """
        from transformers import TrainerControl, TrainerState, TrainingArguments
        import grpo_doctor as gd
        from grpo_doctor.rank.integrations.callback import GrpoDoctorCallback

        gd.init("run")  # recording started by the script: the callback must not end it
        cb, state, control = GrpoDoctorCallback(seed_audit_every=2), TrainerState(), TrainerControl()
        args = TrainingArguments(output_dir="out", use_cpu=True, report_to="none")
        cb.on_train_begin(args, state, control)
        for n in (1, 2, 3):
            cb.on_step_begin(args, state, control)
            state.global_step = n
            cb.on_step_end(args, state, control)
            if n != 2:  # logging_steps skips step 2
                cb.on_log(args, state, control, logs={"loss": n / 10, "epoch": 0.5})
            if n == 3:  # evaluation, then the end-of-training summary, at the same global_step
                cb.on_log(args, state, control, logs={"eval_loss": 9.0})
                cb.on_log(args, state, control, logs={"train_runtime": 1.0})
        cb.on_train_end(args, state, control)
        gd.step(99, after=1)
    """)
    assert out.returncode == 0, out.stderr
    log = load_run([tmp_path / "run"]).ranks[0]
    assert [(s.step, s.metrics) for s in log.of_kind(Step)] == [
        (1, {"loss": 0.1, "epoch": 0.5}), (2, {}), (3, {"loss": 0.3, "epoch": 0.5}), (99, {"after": 1})]
    assert [(p.path, p.step) for p in log.of_kind(PhaseBegin)] == [("train-step", n) for n in (1, 2, 3)]
    assert [(r.tag, r.step) for r in log.of_kind(Rng)] == [("init", 1), ("step", 2)]
    assert len(log.of_kind(Memory)) == 3 and log.open_path is None and log.end.reason == "exit"
