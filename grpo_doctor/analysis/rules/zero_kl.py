"""`zero-kl`: the KL to the reference stays exactly 0 although the policy is being updated.

Beta-aware: no finding when beta is 0 (stated in ms-swift's args.json, on the command line as
`--beta`, or as a logged `beta`), nor when `kl` is not logged at all (TRL and ms-swift omit it when
beta = 0; verl's `actor/kl_loss`, 0.0 whenever the KL loss is off, is not read). The KL of the
first update's step is 0 by construction (the policy still equals the reference), so counting
starts after the first logged step where the policy moved: gradient norm above
`grad_norm_moving` with a learning rate above 0 where logged, or, without a gradient norm, a
step whose groups were not all zero-std. Steps where nothing moves are `dead-step`'s business.
Fires when `kl` is within `kl_zero` of 0 for `min_consecutive_steps` logged steps in a row after that.

Evidence keys: `source`, `first_step`, `last_step`, `num_steps`, `beta` (None when the run does
not state it), `moving_since_step` (the first step whose update should have moved the policy),
`grad_norm_median` (over the zero-KL steps; None where not logged).
"""
from __future__ import annotations

from collections.abc import Iterator

import pandas as pd

from grpo_doctor.analysis.findings import Finding
from grpo_doctor.analysis.grpo_metrics import beta_of, column, finite, longest_run, step_series
from grpo_doctor.analysis.views import RunView, View
from grpo_doctor.checks.rollout_rules import ZeroKlConfig as Config  # watch's live rules read it too
from grpo_doctor.checks.rollout_rules import groups_disagree, kl_is_zero, policy_moving

ID = "zero-kl"
READS = {View.FRAMEWORK_METRICS, View.RANK_TABLES, View.RANKS, View.ROLLOUT_TABLES}

HINTS = (
    "The reference model may be the policy itself: with LoRA / PEFT the reference must be the base with the "
    "adapter disabled, with ZeRO-3 a separate reference copy must be loaded; check the trainer does not compute "
    "both log-probs with one model.",
    "Updates may be lost to precision: pure bf16 weights with a small learning rate (1e-6) round every update "
    "away; keep fp32 master weights (mixed precision, DeepSpeed bf16 with fp32 optimizer states) or raise the "
    "learning rate.",
    "If the identical completions or zero-std groups findings are also present, fix those first: with no "
    "advantage signal the policy has no reason to leave the reference.",
)


def check(run: RunView, cfg: Config) -> Iterator[Finding]:
    for source, steps in step_series(run).items():
        kl = column(steps, "kl")
        beta = beta_of(run, source)
        if kl is None or beta == 0:
            continue
        moving = _moving_steps(steps, cfg)
        if moving is None or not moving.any():
            continue
        since = int(moving.idxmax())
        after = kl.loc[kl.index > since]
        longest = longest_run(kl_is_zero(after, cfg), cfg.min_consecutive_steps)
        if longest is None:
            continue
        first, last, num = longest
        grad = column(steps, "grad_norm")
        yield Finding(
            id=ID, severity="warning",
            title=f"KL to the reference is exactly 0 for {num} steps ({first}-{last}) although the policy is updated",
            step=first,
            evidence={"source": source, "first_step": first, "last_step": last, "num_steps": num, "beta": beta,
                      "moving_since_step": since,
                      "grad_norm_median": finite(grad.loc[first:last].median()) if grad is not None else None},
            hints=HINTS,
        )


def _moving_steps(steps: pd.DataFrame, cfg: Config) -> pd.Series | None:
    grad = column(steps, "grad_norm")
    if grad is not None:
        # warm-up from 0: no update yet (a learning rate not logged at a step: allowed)
        lr = steps["learning_rate"] if column(steps, "learning_rate") is not None else None
        return policy_moving(steps["grad_norm"], lr, cfg).fillna(False)
    share = column(steps, "frac_reward_zero_std")
    return groups_disagree(steps["frac_reward_zero_std"]).fillna(False) if share is not None else None
