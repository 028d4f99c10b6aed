"""`entropy-collapse`: the policy's token entropy fell to a small fraction of where it started.

Once entropy is near 0 the policy samples the same completion for every copy of a prompt: groups
stop disagreeing and learning stalls. `entropy` (TRL `entropy`, ms-swift `entropy/mean` with
--log_entropy, verl `actor/entropy`) at the start is the median of the first `window_steps`
logged steps, at the end the median of the last `window_steps`; fires when the end is below
`fraction` x the start. Needs at least 2 x `window_steps` logged steps and a start above `min_start`.

Evidence keys: `source`, `start_entropy`, `end_entropy` (nats per token as logged), `ratio`
(end / start), `first_step_below` (the first step under `fraction` x start), `last_step`, `num_steps`
(logged steps with entropy).
"""
from __future__ import annotations

from collections.abc import Iterator

from grpo_doctor.analysis.findings import Finding
from grpo_doctor.analysis.grpo_metrics import column, step_series
from grpo_doctor.analysis.remedies import CHECKED_AGAINST, SWIFT, TRL, VERL, default, flag, flags
from grpo_doctor.analysis.views import RunView, View
from grpo_doctor.checks.rollout_rules import EntropyCollapseConfig as Config  # watch's live rules read it too
from grpo_doctor.checks.rollout_rules import entropy_collapsed

ID = "entropy-collapse"
READS = {View.FRAMEWORK_METRICS, View.RANK_TABLES, View.RANKS, View.ROLLOUT_TABLES}

HINT_SLOW = ("Slow the policy down: lower the learning rate; set a KL penalty (" + flags(TRL, "beta")
             + f" defaults to {default(TRL, 'beta')} (TRL {CHECKED_AGAINST[TRL]}): set it, "
             "e.g. 0.001-0.04; " + flags(SWIFT, "beta") + " defaults to 0.04 for GRPO; "
             + flags(VERL, "actor_rollout_ref.actor.use_kl_loss", "actor_rollout_ref.actor.kl_loss_coef")
             + "); fewer updates per rollout.")
HINT_ENTROPY = ("Reward exploration directly: an entropy bonus, " + flags(TRL, "entropy_coef") + " > 0 (with "
                + flag(TRL, "use_adaptive_entropy") + " to hold entropy near entropy_target) or "
                + flags(VERL, "actor_rollout_ref.actor.entropy_coeff") + " > 0; or learn from the high-entropy "
                "tokens only: " + flags(TRL, "top_entropy_quantile") + ", " + flags(SWIFT, "top_entropy_quantile")
                + ". Sample at temperature near 1.0.")
HINT_CLIP_HIGHER = ("DAPO clip-higher (" + flags(TRL, "epsilon_high") + ", " + flags(SWIFT, "epsilon_high") + ", "
                    + flags(VERL, "actor_rollout_ref.actor.clip_ratio_high") + ") acts only off-policy: with one "
                    "update per rollout (TRL/ms-swift num_iterations 1 and steps_per_generation equal to "
                    "gradient_accumulation_steps; verl ppo_epochs 1 and ppo_mini_batch_size equal to "
                    "data.train_batch_size) the probability ratio is 1 and the clip never binds, so it changes "
                    "nothing there.")
HINT_HACKING = ("Check for reward hacking: read the sample completions; one string repeated everywhere means the reward "
                "pays for something the policy found a shortcut to.")
HINTS = (HINT_SLOW, HINT_ENTROPY, HINT_CLIP_HIGHER, HINT_HACKING)


def check(run: RunView, cfg: Config) -> Iterator[Finding]:
    for source, steps in step_series(run).items():
        entropy = column(steps, "entropy")
        if entropy is None or len(entropy) < 2 * cfg.window_steps:
            continue
        start = float(entropy.iloc[:cfg.window_steps].median())
        end = float(entropy.iloc[-cfg.window_steps:].median())
        if not entropy_collapsed(start, end, cfg):
            continue
        below = entropy[entropy < cfg.fraction * start]
        first_below = int(below.index[0])
        yield Finding(
            id=ID, severity="warning",
            title=f"token entropy collapsed from {start:.3g} to {end:.3g} ({end / start:.0%} of its start)",
            step=first_below,
            evidence={"source": source, "start_entropy": round(start, 6), "end_entropy": round(end, 6),
                      "ratio": round(end / start, 4), "first_step_below": first_below,
                      "last_step": int(entropy.index[-1]), "num_steps": int(len(entropy))},
            hints=HINTS,
        )
