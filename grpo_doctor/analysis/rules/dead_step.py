"""`dead-step`: for several logged steps in a row the policy got no learning signal at all (CASES.md case 2).

A step is dead when every group's rewards were equal (a zero-std share of 1, or verl's
critic/advantages max and min both 0: every advantage is 0), or when the gradient norm is 0 and
the loss is 0 too. A loss near 0 alone is normal in GRPO (the advantages of a group sum to zero)
and is never enough. Read per source (the event log, TRL's trainer_state.json, ms-swift's
logging.jsonl, console metric lines, W&B / TensorBoard exports); the longest run of consecutive
logged dead steps of at least `min_consecutive_steps` is reported (critical). A log shorter than
that (a pasted excerpt of one or two steps) is judged on what it holds: dead at every step it
logged is a warning (`frac_dead_steps` 1.0), since a tiny batch can be all zero-std for a step. The share is zero-std-groups'
(grpo_metrics.zero_std_shares): the logged `frac_reward_zero_std`, else the ranks' rollout records
where ranks hold whole groups (a trainer that only calls grpo_doctor.rollouts() is judged too), and
the records first under TRL's `--scale_rewards batch`, whose logged flag misses groups each constant
but different from one another (its 1 still means every group was).

Evidence keys: `source`, `first_step`, `last_step`, `num_steps` (the run's length), `reason`
("all groups zero-std", "every advantage 0", "zero gradient and loss", joined by " + "), `frac_dead_steps`
(dead steps / logged steps in the whole run), `grad_norm_max` and `loss_max_abs` (over the run;
None where not logged).
"""
from __future__ import annotations

from collections.abc import Iterator

import pandas as pd

from grpo_doctor.analysis import remedies
from grpo_doctor.analysis.findings import Finding
from grpo_doctor.analysis.grpo_metrics import column, finite, longest_run, step_series, zero_std_shares
from grpo_doctor.analysis.views import RunView, View
from grpo_doctor.checks.rollout_rules import DeadStepConfig as Config  # watch's live rules read it too
from grpo_doctor.checks.rollout_rules import all_groups_zero_std, no_gradient
from grpo_doctor.checks.rollout_rules import no_advantage as no_advantage_at

ID = "dead-step"
READS = {View.FRAMEWORK_METRICS, View.RANK_TABLES, View.RANKS, View.ROLLOUT_TABLES}

HINTS = (
    "If completions are identical across ranks, the ranks share a sampling seed (see seed-collision): give every "
    "sampling process its own seed (TRL: set_seed(seed, device_specific=True); vLLM: seed = base + data-parallel rank).",
    "If the reward is the same for every completion, the reward function is broken or the task is out of reach: "
    "test the reward function on a few known-good and known-bad completions before training.",
    "Make groups disagree: more num_generations, temperature near 1.0, a reward with partial credit; "
    + remedies.DYNAMIC_SAMPLING + ".",
)


def check(run: RunView, cfg: Config) -> Iterator[Finding]:
    series, shares = step_series(run), zero_std_shares(run)
    for source in dict.fromkeys([*series, *shares]):  # a trainer may record rollouts and no Step metrics
        share = shares[source].share if source in shares else pd.Series(dtype=float)
        steps = series.get(source, pd.DataFrame())
        steps = steps.reindex(steps.index.union(share.index))
        zero_std = all_groups_zero_std(share.reindex(steps.index), cfg).fillna(False).astype(bool)
        grad, loss = column(steps, "grad_norm"), column(steps, "loss")
        no_grad = pd.Series(False, index=steps.index)
        if grad is not None and loss is not None:
            no_grad = no_gradient(steps["grad_norm"], steps["loss"], cfg).fillna(False)
        no_advantage = pd.Series(False, index=steps.index)
        if column(steps, "advantage_abs_max") is not None:
            no_advantage = no_advantage_at(steps["advantage_abs_max"], cfg).fillna(False)
        dead = zero_std | no_advantage | no_grad
        longest, severity = longest_run(dead, cfg.min_consecutive_steps), "critical"
        if longest is None and 0 < len(dead) < cfg.min_consecutive_steps and dead.all():
            longest, severity = (int(dead.index[0]), int(dead.index[-1]), len(dead)), "warning"
        if longest is None:
            continue
        first, last, num = longest
        window = steps.loc[first:last]
        reasons = [name for name, flags in (("all groups zero-std", zero_std), ("every advantage 0", no_advantage),
                                            ("zero gradient and loss", no_grad)) if flags.loc[first:last].any()]
        if severity == "critical":
            title = f"no learning signal for {num} steps in a row ({first}-{last})"
        elif num == 1:
            title = f"no learning signal at step {first}, the only step logged"
        else:
            title = f"no learning signal at any of the {num} steps logged ({first}-{last})"
        yield Finding(
            id=ID, severity=severity, title=f"{title}: {' + '.join(reasons)}",
            step=first,
            evidence={"source": source, "first_step": first, "last_step": last, "num_steps": num,
                      "reason": " + ".join(reasons), "frac_dead_steps": round(float(dead.mean()), 4),
                      "grad_norm_max": finite(window["grad_norm"].max()) if grad is not None else None,
                      "loss_max_abs": finite(window["loss"].abs().max()) if loss is not None else None},
            hints=HINTS,
        )
