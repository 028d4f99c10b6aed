"""Prompts, their layout over ranks (checked against TRL's RepeatSampler + accelerate), rewards."""
from __future__ import annotations

import pytest
import torch
from accelerate.data_loader import BatchSamplerShard
from grpo_doctor_trainer.data import make_problems, rank_slice
from grpo_doctor_trainer.model import build_char_tokenizer
from grpo_doctor_trainer.reward import score_completion, score_completions
from grpo_doctor_trainer.rollout import finish_completions
from torch.utils.data import BatchSampler
from trl.trainer.utils import RepeatSampler


def test_problems_are_the_same_for_the_same_seed_and_step_and_have_correct_answers():
    problems = make_problems(seed=3, step=5, num_prompts=50)
    assert problems == make_problems(seed=3, step=5, num_prompts=50)
    assert problems != make_problems(seed=3, step=6, num_prompts=50)
    for p in problems:
        assert p.prompt.endswith("=")
        assert int(p.answer) == eval(p.prompt[:-1])  # noqa: S307 - our own arithmetic strings
        assert p.answer.isdigit()


@pytest.mark.parametrize(("world_size", "per_device_batch", "num_generations"), [(2, 4, 4), (2, 2, 4), (4, 1, 2), (2, 3, 2)])
def test_rank_slices_match_trl_repeat_sampler_sharded_by_accelerate(world_size, per_device_batch, num_generations):
    num_prompts = world_size * per_device_batch // num_generations
    problems = make_problems(seed=0, step=0, num_prompts=num_prompts)
    # TRL: the sampler repeats each prompt G times consecutively; accelerate hands batch r to rank r.
    sampler = RepeatSampler(problems, mini_repeat_count=num_generations, batch_size=num_prompts, shuffle=False)
    batches = BatchSampler(sampler, batch_size=per_device_batch, drop_last=False)
    for rank in range(world_size):
        shard = BatchSamplerShard(batches, num_processes=world_size, process_index=rank)
        trl_indices = next(iter(shard))
        ours = rank_slice(problems, rank, per_device_batch, num_generations)
        assert ours == [problems[i] for i in trl_indices]


def test_copies_of_one_prompt_spread_over_ranks_when_the_group_is_larger_than_the_batch():
    problems = make_problems(seed=0, step=0, num_prompts=1)
    assert rank_slice(problems, 0, 1, 2) == rank_slice(problems, 1, 1, 2) == problems


def test_reward_pays_for_the_right_answer_and_for_digits_ending_with_eos():
    assert score_completion("19", ended_with_eos=True, answer="19") == pytest.approx(1.1)
    assert score_completion("19", ended_with_eos=False, answer="19") == pytest.approx(1.0)
    assert score_completion("18", ended_with_eos=True, answer="19") == pytest.approx(0.1)
    assert score_completion("1+8", ended_with_eos=True, answer="19") == 0.0
    assert score_completion("", ended_with_eos=True, answer="19") == 0.0


def test_constant_reward_replaces_every_reward():
    assert score_completions(["19", "x"], [True, False], ["19", "19"], constant=0.5) == [0.5, 0.5]


def test_completion_mask_ends_at_the_first_eos_and_text_drops_what_follows():
    tok = build_char_tokenizer()
    eos, pad = tok.eos_token_id, tok.pad_token_id
    tid = tok.convert_tokens_to_ids
    ids = torch.tensor([[tid("1"), tid("9"), eos, tid("5")], [tid("3"), tid("+"), tid("4"), tid("4")]])
    prompt = tok(["1+1=", "1+1="], return_tensors="pt")
    out = finish_completions(prompt.input_ids, prompt.attention_mask, ids, tok)
    assert out.completion_mask.tolist() == [[1, 1, 1, 0], [1, 1, 1, 1]]
    assert out.completion_ids[0, 3] == pad
    assert out.texts == ["19", "3+44"]
    assert out.ended_with_eos == [True, False]
    assert score_completions(out.texts, out.ended_with_eos, ["19", "2"]) == pytest.approx([1.1, 0.0])
