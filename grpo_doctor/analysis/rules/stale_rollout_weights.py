"""`stale-rollout-weights`: the rollout engine's log-probabilities drift away from the trainer's over steps.

When the new weights never reach vLLM, the engine keeps sampling from an old policy while the
trainer moves on: the gap between the engine's and the trainer's log-probabilities of the same
tokens grows step after step. A constant small gap is normal (bf16 kernels differ). Read, first
present wins (metric_names.py), each with its own floor `min_late_*`:
- rollout_logprob_diff: TRL `sampling/sampling_logp_difference/mean` (vLLM with importance-sampling
  correction), or a logged `logprob_diff`: mean |log p_vllm - log p_trainer| per token, nats;
- rollout_kl: ms-swift `rollout_correction/kl` (log_rollout_offpolicy_metrics true);
- rollout_prob_diff: verl `training/rollout_probs_diff_mean`.

The start is the median of the first `window_steps` logged values, the end the median of the
last `window_steps`; fires when the end is at least `growth_ratio` x the start and above the floor.

Evidence keys: `source`, `metric` (canonical name read), `early_value`, `late_value`, `ratio`
(late / early; None when early is 0), `first_step`, `last_step`, `num_steps` (logged values).
"""
from __future__ import annotations

from collections.abc import Iterator

from grpo_doctor.analysis import remedies
from grpo_doctor.analysis.findings import Finding
from grpo_doctor.analysis.grpo_metrics import column, step_series
from grpo_doctor.analysis.load import Evidence
from grpo_doctor.checks.rollout_rules import DRIFT_METRICS, drifted
from grpo_doctor.checks.rollout_rules import StaleRolloutWeightsConfig as Config  # watch reads it too

ID = "stale-rollout-weights"

HINT_SYNC = ("Check the weight sync into the rollout engine runs every step and succeeds: TRL server mode needs "
             "`trl vllm-serve` reachable with its NCCL weight-update group up; colocate mode syncs inside the trainer "
             "(look for errors around the sync).")
HINT_PREFIX_CACHE = ("After new weights are loaded, vLLM's prefix cache must be reset (llm.reset_prefix_cache(); the "
                     "server's /reset_prefix_cache/ endpoint), or prompts keep the KV cache computed with the old "
                     "weights: TRL and ms-swift do it after their own sync, a custom sync must do it too.")
HINT_LORA = ("LoRA: send the adapter merged into the weights, or let vLLM load it as an adapter ("
             + remedies.flags(remedies.SWIFT, "vllm_enable_lora")
             + "; TRL has no such flag: it merges the adapter for the sync). With DeepSpeed ZeRO-3 the parameters "
             "must be gathered for the sync; a custom sync that skips the gather sends shards or stale copies.")
HINT_OFF_POLICY = ("Deliberately off-policy rollouts (async generation, steps_per_generation > gradient accumulation) "
                   "drift by design: correct for it with importance sampling ("
                   + remedies.flags(remedies.TRL, "vllm_importance_sampling_correction") + f", on by default in TRL "
                   f"{remedies.CHECKED_AGAINST[remedies.TRL]}; "
                   + remedies.flags(remedies.SWIFT, "rollout_importance_sampling_mode") + ") and keep the lag small.")
HINTS = (HINT_SYNC, HINT_PREFIX_CACHE, HINT_LORA, HINT_OFF_POLICY)


def check(run: Evidence, cfg: Config) -> Iterator[Finding]:
    for source, steps in step_series(run).items():
        for metric in DRIFT_METRICS:
            values = column(steps, metric)
            if values is None:
                continue
            if len(values) >= cfg.min_steps:
                early = float(values.iloc[:cfg.window_steps].median())
                late = float(values.iloc[-cfg.window_steps:].median())
                if drifted(early, late, metric, cfg):
                    yield Finding(
                        id=ID, severity="warning",
                        title=f"rollout and trainer log-probabilities drift apart: {metric} grew from {early:.3g} "
                              f"to {late:.3g}",
                        step=int(values.index[0]),
                        evidence={"source": source, "metric": metric, "early_value": round(early, 6),
                                  "late_value": round(late, 6), "ratio": round(late / early, 2) if early else None,
                                  "first_step": int(values.index[0]), "last_step": int(values.index[-1]),
                                  "num_steps": int(len(values))},
                        hints=HINTS,
                    )
            break  # the first metric this source logs is the one judged
