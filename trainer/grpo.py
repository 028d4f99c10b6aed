"""The GRPO mathematics: group-normalised advantages, per-token log-probabilities, the loss.

The loss is TRL's with one optimisation pass per batch: the "old" log-probabilities are the
current ones detached, so the clipped ratio is 1 in value but carries the policy gradient;
the KL to the reference is the k3 estimator exp(r - p) - (r - p) - 1, and both are averaged
over completion tokens only.

Typical use:
    adv = group_advantages(torch.tensor(rewards), num_generations=4)
    logp = token_logprobs(model, input_ids, attention_mask, num_prompt_tokens, temperature=1.0)
    loss, kl = grpo_loss(logp, ref_logp, adv[mine], completion_mask, beta=0.04, epsilon=0.2)
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

ADVANTAGE_EPS = 1e-4
ZERO_STD = 1e-6  # a group whose rewards spread less than this gives no gradient


def group_advantages(rewards: torch.Tensor, num_generations: int) -> torch.Tensor:
    """(reward - group mean) / (group std + 1e-4) over consecutive groups of G completions."""
    grouped = rewards.view(-1, num_generations)
    mean = grouped.mean(dim=1, keepdim=True)
    std = grouped.std(dim=1, keepdim=True)  # unbiased, as TRL
    return ((grouped - mean) / (std + ADVANTAGE_EPS)).view(-1)


@dataclass(frozen=True)
class RewardStats:
    mean: float
    std: float  # over the whole global batch, as TRL's reward_std (not the mean of group stds)
    frac_zero_std: float  # fraction of groups whose members all got the same reward


def reward_stats(rewards: torch.Tensor, num_generations: int) -> RewardStats:
    group_std = rewards.view(-1, num_generations).std(dim=1)
    return RewardStats(
        mean=rewards.mean().item(),
        std=rewards.std().item() if rewards.numel() > 1 else 0.0,
        frac_zero_std=(group_std < ZERO_STD).float().mean().item(),
    )


def position_ids_for(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions that skip left padding, as `generate` computes them."""
    positions = attention_mask.long().cumsum(-1) - 1
    return positions.clamp(min=0)


def token_logprobs(forward, input_ids: torch.Tensor, attention_mask: torch.Tensor, num_prompt_tokens: int,
                   temperature: float) -> torch.Tensor:
    """Log-probability of each completion token, [batch, completion length].

    forward: the model, or an engine's forward (which keeps DDP / ZeRO hooks in the loop).
    """
    logits = forward(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids_for(attention_mask)
    ).logits
    # logits at position t predict token t + 1; scaled like the sampler so the ratio is consistent.
    logits = logits[:, num_prompt_tokens - 1 : -1, :] / temperature
    targets = input_ids[:, num_prompt_tokens:]
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(policy || reference); >= 0, exact 0 where they agree."""
    delta = ref_logp - logp
    return torch.exp(delta) - delta - 1


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (values * mask).sum() / mask.sum().clamp(min=1)


def grpo_loss(logp: torch.Tensor, ref_logp: torch.Tensor | None, advantages: torch.Tensor,
              mask: torch.Tensor, beta: float, epsilon: float) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(loss, mean token KL or None when beta == 0). mask: 1 on completion tokens up to EOS."""
    mask = mask.to(logp.dtype)
    ratio = torch.exp(logp - logp.detach())
    adv = advantages.unsqueeze(1)
    surrogate = torch.min(ratio * adv, torch.clamp(ratio, 1 - epsilon, 1 + epsilon) * adv)
    per_token = -surrogate
    kl = None
    if beta != 0:
        per_token_kl = k3_kl(logp, ref_logp)
        per_token = per_token + beta * per_token_kl
        kl = masked_mean(per_token_kl.detach(), mask)
    return masked_mean(per_token, mask), kl
