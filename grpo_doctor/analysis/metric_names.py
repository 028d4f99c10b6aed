"""One vocabulary for GRPO step metrics, whichever framework logged them.

TRL, ms-swift, verl and the reference trainer log the same quantities under different names,
and sometimes the same name for different quantities: TRL's `reward_std` is the std over the
whole batch, ms-swift's the mean of the per-group stds (unless `scale_rewards=batch`). The rules
read only the canonical names below, so each is read with one meaning.

Canonical name           read from (first present wins)
  loss                   loss, actor/pg_loss (verl), policy_loss (OpenRLHF)
  grad_norm              grad_norm, actor/grad_norm (verl), actor_grad_norm (OpenRLHF)
  learning_rate          learning_rate, lr, actor/lr (verl), actor_lr (OpenRLHF)
  reward                 reward, critic/score/mean (verl: the reward functions' score, before any KL
                         penalty), rollout/reward_mean (OpenRLHF)
  reward_std_batch       reward_std (TRL, reference trainer; ms-swift with scale_rewards=batch),
                         rollout/reward_std (OpenRLHF: std over every sample of the batch)
  reward_std_group_mean  reward_std (ms-swift, scale_rewards group / none / gdpo, the default)
  reward_func_std_max    the largest of rewards/<func>/std (TRL >= 0.17, ms-swift): batch std per function
  reward_range_batch     critic/score/max - critic/score/min (verl, which logs no reward std): 0 when
                         every sample of the batch scored the same
  advantage_abs_max      the larger of |critic/advantages/max| and |critic/advantages/min| (verl): 0 when
                         every advantage is 0, i.e. every group's rewards were equal (GRPO, RLOO, ...)
  frac_reward_zero_std   frac_reward_zero_std
  kl                     kl (absent when beta = 0 in TRL and ms-swift). verl's actor/kl_loss is not
                         read: it is 0.0 whenever the KL loss is off, so it says nothing about beta;
                         nor is OpenRLHF's kl (0 whenever there is no reference model), which its
                         readers rename to openrlhf/kl.
  entropy                entropy (TRL), entropy/mean (ms-swift --log_entropy), actor/entropy (verl),
                         actor/entropy_loss (verl < 0.4: the mean entropy despite its name),
                         entropy_loss (OpenRLHF with --entropy_coef: likewise the mean entropy)
  completion_length_mean completions/mean_length, completion_length (TRL < 0.17, reference trainer),
                         response_length/mean (verl), response_length, rollout/response_length_mean (OpenRLHF)
  completion_length_min  completions/min_length, response_length/min
  completion_length_max  completions/max_length, response_length/max
  clipped_frac           completions/clipped_ratio, response_length/clip_ratio (verl), rollout/truncated_rate
                         (OpenRLHF): truncated at the max
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

Whose names a row holds (`framework_of`): verl's are prefixed (actor/, critic/, response_length/),
OpenRLHF's are policy_loss / actor_lr / actor_grad_norm, ms-swift adds global_step/max_steps; the
rest is the Hugging Face Trainer's (TRL). W&B and TensorBoard keep HF's and OpenRLHF's names under
train/ (eval/ for evaluation): `logged_name` takes that off.

Typical use:
    canonical = canonical_frame(raw_steps, reward_std_is="batch")   # columns: step, loss, reward_std_batch, ...
    framework_of(["actor/entropy", "critic/score/mean"])              # "verl"
"""
from __future__ import annotations

import re

import pandas as pd

ALIASES: dict[str, tuple[str, ...]] = {
    "loss": ("loss", "actor/pg_loss", "policy_loss"),
    "grad_norm": ("grad_norm", "actor/grad_norm", "actor_grad_norm"),
    "learning_rate": ("learning_rate", "lr", "actor/lr", "actor_lr"),
    "reward": ("reward", "critic/score/mean", "rollout/reward_mean"),
    "reward_std_batch": ("reward_std_batch", "rollout/reward_std"),
    "reward_std_group_mean": ("reward_std_group_mean",),
    "frac_reward_zero_std": ("frac_reward_zero_std",),
    "kl": ("kl",),
    "entropy": ("entropy", "entropy/mean", "actor/entropy", "actor/entropy_loss", "entropy_loss"),
    "completion_length_mean": ("completion_length_mean", "completions/mean_length", "completion_length",
                               "response_length/mean", "response_length", "rollout/response_length_mean"),
    "completion_length_min": ("completion_length_min", "completions/min_length", "response_length/min"),
    "completion_length_max": ("completion_length_max", "completions/max_length", "response_length/max"),
    "clipped_frac": ("clipped_frac", "completions/clipped_ratio", "response_length/clip_ratio",
                     "rollout/truncated_rate"),
    "rollout_logprob_diff": ("rollout_logprob_diff", "sampling/sampling_logp_difference/mean", "logprob_diff"),
    "rollout_kl": ("rollout_kl", "rollout_correction/kl"),
    "rollout_prob_diff": ("rollout_prob_diff", "training/rollout_probs_diff_mean"),
    "frac_identical_groups": ("frac_identical_groups",),
    "duplicate_rate": ("duplicate_rate",),
    "cross_rank_duplicate_frac": ("cross_rank_duplicate_frac",),
    "epoch": ("epoch",),
}
# Read from two logged columns each (canonical_frame): (canonical name, first column, second column)
_SPANS = (("reward_range_batch", "critic/score/max", "critic/score/min"),
          ("advantage_abs_max", "critic/advantages/max", "critic/advantages/min"))
CANONICAL = (*ALIASES, "reward_func_std_max", *(name for name, _, _ in _SPANS))
REWARD_STD_MEANINGS = ("batch", "group_mean")
TRL, SWIFT, VERL, OPENRLHF = "trl", "ms-swift", "verl", "openrlhf"
_VERL_PREFIXES = ("actor/", "critic/", "response_length/")
_OPENRLHF_NAMES = ("policy_loss", "actor_lr", "actor_grad_norm")
_SWIFT_NAMES = ("global_step/max_steps", "train_speed(iter/s)", "train_speed(s/it)")
# The Hugging Face Trainer's end-of-training summary, logged at the last step beside its metrics
_SUMMARY_NAMES = frozenset({"train_runtime", "train_samples_per_second", "train_steps_per_second", "total_flos",
                            "train_loss"})
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
    for name, high, low in _SPANS:
        if name in raw.columns:
            out[name] = pd.to_numeric(raw[name], errors="coerce").astype(float)
        elif high in raw.columns and low in raw.columns:
            high_values, low_values = (pd.to_numeric(raw[c], errors="coerce").astype(float) for c in (high, low))
            out[name] = (high_values - low_values) if name == "reward_range_batch" else \
                pd.concat([high_values.abs(), low_values.abs()], axis=1).max(axis=1, skipna=False)
    return out


def framework_of(names) -> str:
    """VERL, OPENRLHF, SWIFT or TRL (the Hugging Face Trainer's names, and anything not told apart)."""
    names = list(names)
    if any(str(n).startswith(_VERL_PREFIXES) for n in names):
        return VERL
    if any(n in _OPENRLHF_NAMES for n in names):
        return OPENRLHF
    return SWIFT if any(n in _SWIFT_NAMES for n in names) else TRL


def logged_name(key: str) -> str | None:
    """A W&B / TensorBoard key as the framework logged it: HF's and OpenRLHF's loggers put train/ in front.
    None for what is no training step's metric: evaluation (eval/, verl's val-*), W&B's own (_runtime),
    the HF Trainer's end-of-training summary."""
    if key.startswith(("eval/", "val/", "val-core/", "val-aux/", "_")):
        return None
    name = key[len("train/"):] if key.startswith("train/") else key
    return None if name in _SUMMARY_NAMES else name


def framework_entry(entry: dict, framework: str) -> dict:
    """`entry` with the names that mean something else in `framework` moved aside: OpenRLHF's `kl` is 0
    whenever the run has no reference model (init_kl_coef 0), so zero-kl must not read it as TRL's."""
    if framework == OPENRLHF and "kl" in entry:
        entry = {("openrlhf/kl" if k == "kl" else k): v for k, v in entry.items()}
    return entry
