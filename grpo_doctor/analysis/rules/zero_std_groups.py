"""`zero-std-groups`: most groups' completions all get the same reward, so most of each batch teaches nothing.

A group whose rewards are all equal has advantage 0 for every member: its completions cost a
rollout and give no gradient. The share of such groups per step is averaged over every
`window_steps` consecutive logged steps; the worst window at or above `min_share` is reported.
Runs shorter than the window are not judged (a few steps of a small batch say little). The whole
batch at 100% for several steps in a row is `dead-step`.

The share (grpo_metrics.zero_std_shares): the logged `frac_reward_zero_std` (TRL, ms-swift, the
reference trainer); for a trainer that only calls grpo_doctor.rollouts(), the ranks' rollout
records where each rank holds whole groups. Under TRL's `--scale_rewards batch` the logged value
is 1 only when the whole batch had one reward (0 otherwise, whatever the groups): the rollout
records are read instead, and without them the flags are read as a lower bound ("at least").

Evidence keys: `source`, `first_step`, `last_step` (the worst window), `zero_std_share` (its mean
share, 0-1), `share_overall` (mean over every logged step), `num_steps` (logged steps in the window),
`worst_step_share` (the highest share in the window), `zero_std_from` (where the share was read:
"frac_reward_zero_std", "frac_reward_zero_std, batch-level (a lower bound)" or "rollout records").
"""
from __future__ import annotations

from collections.abc import Iterator

from grpo_doctor.analysis import remedies
from grpo_doctor.analysis.findings import Finding
from grpo_doctor.analysis.grpo_metrics import BATCH_FLAG, zero_std_shares
from grpo_doctor.analysis.views import RunView, View
from grpo_doctor.checks.rollout_rules import ZeroStdGroupsConfig as Config  # watch's live rules read it too
from grpo_doctor.checks.rollout_rules import zero_std_window_fires

ID = "zero-std-groups"
READS = {View.FRAMEWORK_METRICS, View.RANK_TABLES, View.RANKS, View.ROLLOUT_TABLES}

HINTS = (
    remedies.DYNAMIC_SAMPLING[0].upper() + remedies.DYNAMIC_SAMPLING[1:] + ".",
    "Make groups disagree more often: raise num_generations (8-16), keep temperature near 1.0.",
    "Give the reward finer gradations: partial credit, a format term, a length-aware or graded score instead of "
    "0/1, so near-misses and exact answers differ.",
    "Match difficulty to the model: drop prompts it always or never solves (the offline pass-rate filter above), "
    "or use a curriculum.",
)


def check(run: RunView, cfg: Config) -> Iterator[Finding]:
    for source, zero_std in zero_std_shares(run).items():
        share = zero_std.share
        if len(share) < cfg.window_steps:
            continue
        rolling = share.rolling(cfg.window_steps).mean()
        end = rolling.idxmax()
        worst = float(rolling.loc[end])
        if not zero_std_window_fires(worst, cfg):
            continue
        window = share.loc[:end].iloc[-cfg.window_steps:]
        first, last = int(window.index[0]), int(window.index[-1])
        bound = "at least " if zero_std.origin == BATCH_FLAG else ""  # a batch flag's 0 hides zero-std groups
        yield Finding(
            id=ID, severity="warning",
            title=f"{bound}{worst:.0%} of groups had identical rewards (no gradient) over steps {first}-{last}",
            step=first,
            evidence={"source": source, "first_step": first, "last_step": last, "zero_std_share": round(worst, 4),
                      "share_overall": round(float(share.mean()), 4), "num_steps": int(len(window)),
                      "worst_step_share": round(float(window.max()), 4), "zero_std_from": zero_std.origin},
            hints=HINTS,
        )
