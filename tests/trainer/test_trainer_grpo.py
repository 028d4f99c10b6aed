"""The GRPO mathematics of the reference trainer, against hand-computed values."""
from __future__ import annotations

import math

import pytest
import torch
from grpo_doctor_trainer.grpo import (
    group_advantages,
    grpo_loss,
    k3_kl,
    masked_mean,
    reward_stats,
    token_logprobs,
)
from grpo_doctor_trainer.model import build_char_tokenizer, build_tiny_model


def test_advantages_are_normalised_within_each_group_of_consecutive_completions():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.1, 0.1, 1.1, 0.1])
    adv = group_advantages(rewards, num_generations=4)
    first, second = rewards[:4], rewards[4:]
    expected_first = (first - first.mean()) / (first.std() + 1e-4)
    expected_second = (second - second.mean()) / (second.std() + 1e-4)
    torch.testing.assert_close(adv, torch.cat([expected_first, expected_second]))
    assert adv[0] == pytest.approx(1.5, abs=1e-3)  # (1 - 0.25) / 0.5


def test_a_group_with_equal_rewards_has_zero_advantage_and_counts_as_zero_std():
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0])
    adv = group_advantages(rewards, num_generations=2)
    assert adv[:2].abs().max() == 0
    stats = reward_stats(rewards, num_generations=2)
    assert stats.frac_zero_std == 0.5
    assert stats.mean == pytest.approx(0.75)
    assert stats.std == pytest.approx(rewards.std().item())  # batch std, as TRL's reward_std


def test_k3_kl_is_zero_where_policy_and_reference_agree_and_positive_elsewhere():
    logp = torch.tensor([-1.0, -2.0, -0.5])
    ref = torch.tensor([-1.0, -1.0, -1.5])
    kl = k3_kl(logp, ref)
    assert kl[0] == 0
    assert kl[1] == pytest.approx(math.exp(1.0) - 1.0 - 1.0)
    assert kl[2] == pytest.approx(math.exp(-1.0) + 1.0 - 1.0)
    assert (kl >= 0).all()


def test_loss_value_is_minus_the_token_mean_advantage_plus_beta_kl_and_ignores_masked_tokens():
    logp = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, -9.0]], requires_grad=True)
    ref = torch.tensor([[-1.0, -1.0, -3.0], [-0.5, -1.5, 5.0]])
    adv = torch.tensor([2.0, -1.0])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])  # the last token of row 2 is after EOS
    loss, kl = grpo_loss(logp, ref, adv, mask, beta=0.5, epsilon=0.2)
    per_token_kl = k3_kl(logp.detach(), ref)
    expected_kl = masked_mean(per_token_kl, mask.float())
    # ratio == 1 in value: the surrogate is the advantage itself.
    expected = (-(2.0 * 3 - 1.0 * 2) / 5) + 0.5 * expected_kl
    assert kl.item() == pytest.approx(expected_kl.item())
    assert loss.item() == pytest.approx(expected.item())
    loss.backward()
    assert logp.grad[1, 2] == 0  # masked: no gradient
    assert logp.grad[0, 0] == pytest.approx(-2.0 / 5)  # d(-A * ratio)/dlogp = -A, token mean over 5


def test_beta_zero_gives_no_kl_and_needs_no_reference():
    logp = torch.zeros(1, 2, requires_grad=True)
    loss, kl = grpo_loss(logp, None, torch.tensor([1.0]), torch.ones(1, 2), beta=0.0, epsilon=0.2)
    assert kl is None
    assert loss.item() == pytest.approx(-1.0)


def test_training_logprobs_match_the_sampler_on_left_padded_prompts():
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer, seed=0).eval()
    enc = tokenizer(["12+7=", "3*4=", "10-10="], padding=True, return_tensors="pt")
    torch.manual_seed(0)
    out = model.generate(**enc, do_sample=True, top_k=0, max_new_tokens=5, min_new_tokens=5,
                         output_logits=True, return_dict_in_generate=True)
    num_prompt = enc.input_ids.shape[1]
    completion = out.sequences[:, num_prompt:]
    sampler = torch.stack(out.logits, 1).log_softmax(-1).gather(-1, completion.unsqueeze(-1)).squeeze(-1)
    mask = torch.cat([enc.attention_mask, torch.ones_like(completion)], dim=1)
    with torch.no_grad():
        ours = token_logprobs(model, out.sequences, mask, num_prompt, temperature=1.0)
    torch.testing.assert_close(ours, sampler, atol=1e-5, rtol=1e-5)
