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
from dataclasses import dataclass

from grpo_doctor.analysis.findings import Finding
from grpo_doctor.analysis.grpo_metrics import column, step_series
from grpo_doctor.analysis.load import Evidence

ID = "entropy-collapse"

HINTS = (
    "Slow the policy down: lower the learning rate, keep or raise the KL penalty (beta > 0), fewer updates per "
    "rollout (num_iterations / ppo epochs 1).",
    "Let low-probability tokens grow: DAPO clip-higher (TRL epsilon_high=0.28, ms-swift --epsilon_high 0.28) "
    "instead of a symmetric clip range; sample at temperature near 1.0.",
    "Check for reward hacking: read the sample completions; one string repeated everywhere means the reward "
    "pays for something the policy found a shortcut to.",
)


@dataclass(frozen=True)
class Config:
    window_steps: int = 3  # logged steps whose median is the start / the end value
    fraction: float = 0.1  # end below this fraction of the start fires
    min_start: float = 1e-3  # a start below this is already collapsed (or not entropy): not judged


def check(run: Evidence, cfg: Config) -> Iterator[Finding]:
    for source, steps in step_series(run).items():
        entropy = column(steps, "entropy")
        if entropy is None or len(entropy) < 2 * cfg.window_steps:
            continue
        start = float(entropy.iloc[:cfg.window_steps].median())
        end = float(entropy.iloc[-cfg.window_steps:].median())
        if start <= cfg.min_start or end >= cfg.fraction * start:
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
