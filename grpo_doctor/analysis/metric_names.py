"""One vocabulary for GRPO step metrics, whichever framework logged them.

TRL, ms-swift, verl and the reference trainer log the same quantities under different names,
and sometimes the same name for different quantities: TRL's `reward_std` is the std over the
whole batch, ms-swift's the mean of the per-group stds (unless `scale_rewards=batch`). The rules
read only the canonical names below, so each is read with one meaning.

Canonical name           read from (first present wins)
  loss                   loss
  grad_norm              grad_norm
  learning_rate          learning_rate, lr
  reward                 reward
  reward_std_batch       reward_std (TRL, reference trainer; ms-swift with scale_rewards=batch)
  reward_std_group_mean  reward_std (ms-swift, scale_rewards group / none / gdpo, the default)
  reward_func_std_max    the largest of rewards/<func>/std (TRL >= 0.17, ms-swift): batch std per function
  frac_reward_zero_std   frac_reward_zero_std
  kl                     kl (absent when beta = 0 in TRL and ms-swift). verl's actor/kl_loss is not
                         read: it is 0.0 whenever the KL loss is off, so it says nothing about beta.
  entropy                entropy (TRL), entropy/mean (ms-swift --log_entropy), actor/entropy (verl)
  completion_length_mean completions/mean_length, completion_length (TRL < 0.17, reference trainer),
                         response_length/mean (verl)
  completion_length_min  completions/min_length, response_length/min
  completion_length_max  completions/max_length, response_length/max
  clipped_frac           completions/clipped_ratio, response_length/clip_ratio (verl): truncated at the max
  rollout_logprob_diff   sampling/sampling_logp_difference/mean (TRL with vLLM), logprob_diff:
                         mean |log p_rollout - log p_trainer| per token, nats
  rollout_kl             rollout_correction/kl (ms-swift): KL(rollout policy || trainer policy)
  rollout_prob_diff      training/rollout_probs_diff_mean (verl): mean |p_rollout - p_trainer|
  frac_identical_groups  frac_identical_groups (reference trainer)
  duplicate_rate         duplicate_rate: mean over groups of completions equal to an earlier one in the
                         group / group size (computed from TRL / ms-swift completion files)
  cross_rank_duplicate_frac  the same (grpo_doctor.rollouts(compare_across_ranks=True)): this rank's
                         completions identical to one of the same prompt on another rank
  epoch                  epoch
Every canonical name is also read as itself, so tables already in this vocabulary pass unchanged.

Typical use:
    canonical = canonical_frame(raw_steps, reward_std_is="batch")   # columns: step, loss, reward_std_batch, ...
"""
from __future__ import annotations

import re

import pandas as pd

ALIASES: dict[str, tuple[str, ...]] = {
    "loss": ("loss",),
    "grad_norm": ("grad_norm",),
    "learning_rate": ("learning_rate", "lr"),
    "reward": ("reward",),
    "reward_std_batch": ("reward_std_batch",),
    "reward_std_group_mean": ("reward_std_group_mean",),
    "frac_reward_zero_std": ("frac_reward_zero_std",),
    "kl": ("kl",),
    "entropy": ("entropy", "entropy/mean", "actor/entropy"),
    "completion_length_mean": ("completion_length_mean", "completions/mean_length", "completion_length",
                               "response_length/mean"),
    "completion_length_min": ("completion_length_min", "completions/min_length", "response_length/min"),
    "completion_length_max": ("completion_length_max", "completions/max_length", "response_length/max"),
    "clipped_frac": ("clipped_frac", "completions/clipped_ratio", "response_length/clip_ratio"),
    "rollout_logprob_diff": ("rollout_logprob_diff", "sampling/sampling_logp_difference/mean", "logprob_diff"),
    "rollout_kl": ("rollout_kl", "rollout_correction/kl"),
    "rollout_prob_diff": ("rollout_prob_diff", "training/rollout_probs_diff_mean"),
    "frac_identical_groups": ("frac_identical_groups",),
    "duplicate_rate": ("duplicate_rate",),
    "cross_rank_duplicate_frac": ("cross_rank_duplicate_frac",),
    "epoch": ("epoch",),
}
CANONICAL = (*ALIASES, "reward_func_std_max")
REWARD_STD_MEANINGS = ("batch", "group_mean")
_FUNC_STD = re.compile(r"^rewards?/.+/std$")  # ms-swift's docs say reward/<f>/std, its code writes rewards/


def canonical_frame(raw: pd.DataFrame, reward_std_is: str) -> pd.DataFrame:
    """`raw`'s identifying columns (step, rank, host, t, source where present) plus the canonical
    metrics found in it, numeric (strings become NaN). `reward_std_is`: what a plain `reward_std` means."""
    if reward_std_is not in REWARD_STD_MEANINGS:
        raise ValueError(f"reward_std_is {reward_std_is!r} is not one of {', '.join(REWARD_STD_MEANINGS)}")
    out = raw[[c for c in ("source", "rank", "host", "step", "t") if c in raw.columns]].copy()
    aliases = dict(ALIASES)
    plain = "reward_std_batch" if reward_std_is == "batch" else "reward_std_group_mean"
    aliases[plain] = (*aliases[plain], "reward_std")
    for name, keys in aliases.items():
        column = None
        for key in keys:
            if key in raw.columns:
                values = pd.to_numeric(raw[key], errors="coerce")
                column = values if column is None else column.combine_first(values)
        if column is not None:
            out[name] = column.astype(float)
    func_stds = [c for c in raw.columns if _FUNC_STD.match(str(c))]
    if "reward_func_std_max" in raw.columns:
        func_stds.append("reward_func_std_max")
    if func_stds:
        out["reward_func_std_max"] = raw[func_stds].apply(pd.to_numeric, errors="coerce").max(axis=1, skipna=True)
    return out
