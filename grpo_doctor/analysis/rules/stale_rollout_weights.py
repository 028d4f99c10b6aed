"""`stale-rollout-weights`: the rollout engine's weights are not the trainer's, by fingerprint or by log-prob drift.

**By fingerprint** (critical): where the engine runs in the training process (the reference trainer,
TRL colocate through `instrument`, any caller of `grpo_doctor.check_weight_sync`), each weight push is
followed by a comparison of per-tensor fingerprints (`weight_sync` records, docs/recording.md). The
first check at which a tensor differs gives a critical finding at its step, naming the tensors.
Evidence keys: `source` ("weight_sync"), `engine`, `first_step` (the first check that found a
difference), `last_matching_step` (the check before it that found none; None when there was none),
`num_checks` (checks recorded), `num_tensors` (compared at `first_step`), `num_mismatched`,
`tensors` (the first trainer tensors that differ), `engine_tensors` (their engine counterparts),
`num_trainer_only`, `trainer_only` (trainer tensors with no engine counterpart), `num_engine_only`,
`engine_only` (engine tensors no trainer tensor fed: nothing updates them), `num_unchecked`,
`unchecked` (pairs whose shape or dtype cannot be compared). With no difference but unpaired
tensors, the same keys make a warning (engine tensors nothing fed) or an info finding (trainer
tensors or shapes left out only): the check did not cover those tensors. Where the engine is
another process (a vLLM server), an info finding says the weights were not compared and why
(`reason`); the drift below still judges such runs.

**By log-prob drift** (warning): when the new weights never reach vLLM, the engine keeps
sampling from an old policy while the trainer moves on: the gap between the engine's and the
trainer's log-probabilities of the same tokens grows step after step. A constant small gap is
normal (bf16 kernels differ). Read, first present wins (metric_names.py), each with its own floor
`min_late_*`:
- rollout_logprob_diff: TRL `sampling/sampling_logp_difference/mean` (vLLM with importance-sampling
  correction), or a logged `logprob_diff`: mean |log p_vllm - log p_trainer| per token, nats (the
  reference trainer logs it: its HF rollout copy's log-probs against the training forward's);
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
from grpo_doctor.analysis.views import RunView, View
from grpo_doctor.checks.rollout_rules import DRIFT_METRICS, drifted
from grpo_doctor.checks.rollout_rules import StaleRolloutWeightsConfig as Config  # watch reads it too
from grpo_doctor.schema import WeightSync

ID = "stale-rollout-weights"
READS = {View.FRAMEWORK_METRICS, View.RANK_LOGS, View.RANK_TABLES, View.RANKS, View.ROLLOUT_TABLES}

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
HINT_FINGERPRINT = ("The tensors named differ between the trainer and the rollout engine right after a push: the push "
                    "skipped them or the engine loads them elsewhere. Check that every parameter is pushed (ZeRO-3 "
                    "gathered, PEFT merged), that a sleeping vLLM is woken before load_weights (sleep level 2 drops "
                    "the weights), and that the engine's loader maps each name (fused qkv_proj / gate_up_proj, MoE "
                    "expert layouts differ between vLLM versions). A loader that transforms a tensor on purpose: map "
                    "that name to None in name_map.")
HINT_UNPAIRED = ("Tensors the check could not pair are listed: give check_weight_sync a name_map (trainer name -> "
                 "engine name or WeightTarget; rank/weight_sync.py holds a ready map for vLLM's fused names). An engine "
                 "tensor that no trainer tensor feeds is never updated by the push.")
HINT_SERVER = ("A vLLM server's weights live in another process and are not compared: watch the log-prob drift "
               "(TRL: vllm_importance_sampling_correction logs sampling/sampling_logp_difference/mean).")
HINTS = (HINT_SYNC, HINT_PREFIX_CACHE, HINT_LORA, HINT_OFF_POLICY, HINT_FINGERPRINT, HINT_UNPAIRED, HINT_SERVER)


def check(run: RunView, cfg: Config) -> Iterator[Finding]:
    yield from _fingerprints(run)
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


def _fingerprints(run: RunView) -> Iterator[Finding]:
    """The weight-sync records' half of the rule (see the module doc)."""
    records = [(rank, r) for rank, log in sorted(run.rank_logs.items())
               for r in log.of_kind(WeightSync)]
    checked = sorted(((r.step if r.step is not None else -1, rank, r) for rank, r in records if r.checked),
                     key=lambda item: item[:2])
    if not checked:
        unchecked = [r for _, r in records if not r.checked]
        if unchecked:
            first = unchecked[0]
            yield Finding(
                id=ID, severity="info",
                title=f"rollout weights not compared with the trainer's ({_text(first.engine)}): {_text(first.reason)}",
                step=first.step, evidence={"source": "weight_sync", "engine": first.engine, "reason": first.reason},
                hints=(HINT_SERVER,),
            )
        return
    bad = [item for item in checked if item[2].num_mismatched > 0]
    if bad:
        step, _, first = bad[0]
        ranks = tuple(sorted({rank for s, rank, _ in bad if s == step}))
        before = [s for s, _, r in checked if s < step and not r.num_mismatched]
        names = [_text(m.get("name")) for m in first.mismatched]
        more = ", ..." if first.num_mismatched > 3 else ""
        yield Finding(
            id=ID, severity="critical",
            title=f"the rollout engine's weights differ from the trainer's after the weight push at step {step}: "
                  f"{first.num_mismatched} of {first.num_tensors} tensors ({', '.join(names[:3])}{more})",
            ranks=ranks, hosts=tuple(sorted({h for r in ranks if (h := run.host_of(r)) is not None})), step=step, phase="weight-sync",
            evidence=_evidence(first, step, before[-1] if before else None, len(checked), names),
            hints=(HINT_FINGERPRINT, HINT_SYNC, HINT_LORA),
        )
        return
    partial = ([item for item in checked if item[2].num_engine_only]
               or [item for item in checked if item[2].num_trainer_only or item[2].num_unchecked])
    if partial:
        step, _, first = partial[0]
        ranks = tuple(sorted({rank for s, rank, _ in partial if s == step}))
        unpaired = first.num_trainer_only + first.num_engine_only + first.num_unchecked
        yield Finding(
            id=ID, severity="warning" if first.num_engine_only else "info",
            title=f"the weight-sync check compared {first.num_tensors} tensors and could not pair or compare {unpaired} "
                  f"({first.num_engine_only} engine tensors that no trainer tensor feeds)",
            ranks=ranks, step=step, phase="weight-sync", evidence=_evidence(first, step, None, len(checked), []),
            hints=(HINT_UNPAIRED,),
        )


def _evidence(record: WeightSync, step: int, last_matching: int | None, num_checks: int, names: list[str]) -> dict:
    return {
        "source": "weight_sync", "engine": record.engine, "first_step": step, "last_matching_step": last_matching,
        "num_checks": num_checks, "num_tensors": record.num_tensors, "num_mismatched": record.num_mismatched,
        "tensors": names, "engine_tensors": [_text(m.get("engine_name")) for m in record.mismatched],
        "num_trainer_only": record.num_trainer_only, "trainer_only": [_text(n) for n in record.trainer_only],
        "num_engine_only": record.num_engine_only, "engine_only": [_text(n) for n in record.engine_only],
        "num_unchecked": record.num_unchecked,
        "unchecked": [f"{_text(u.get('name'))}: {_text(u.get('why'))}" for u in record.unchecked],
    }


def _text(value) -> str:
    return value if isinstance(value, str) else str(value)
