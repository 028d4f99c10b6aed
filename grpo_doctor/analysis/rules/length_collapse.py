"""`length-collapse`: completions all run into the length limit, or shrink to nothing.

Two kinds, each for at least `min_consecutive_steps` logged steps in a row:
- "truncated": the share of completions cut at the maximum length is at least `truncated_share`
  (`clipped_frac`: TRL / ms-swift `completions/clipped_ratio`; else the ranks' rollout records'
  `truncated_frac`, pooled over ranks). The reward then judges unfinished answers.
- "empty": the mean completion length is at most `max_empty_length` tokens (`completion_length_mean`,
  else the rollout records' `length_mean`; characters where the rank gave no token ids): the policy
  learned to stop at once.

Evidence keys: `source`, `kind`, `first_step`, `last_step`, `num_steps`, `clipped_frac` and
`length_mean` (medians over the run's steps; None where not logged), `max_length` (the limit
where known: rollout records' `max_length` or the largest logged length).
"""
from __future__ import annotations

from collections.abc import Iterator

import pandas as pd

from grpo_doctor.analysis import remedies
from grpo_doctor.analysis.findings import Finding
from grpo_doctor.analysis.grpo_metrics import column, finite, longest_run, step_series
from grpo_doctor.analysis.rollout_tables import EVENT_LOG_SOURCE
from grpo_doctor.analysis.views import RunView, View
from grpo_doctor.checks.rollout_rules import LengthCollapseConfig as Config  # watch's live rules read it too
from grpo_doctor.checks.rollout_rules import empty, truncated

ID = "length-collapse"
READS = {View.FRAMEWORK_METRICS, View.RANK_TABLES, View.RANKS, View.ROLLOUT_TABLES}

HINT_TRUNCATED = ("Completions hit the limit: raise the completion length ("
                  + remedies.flags(remedies.TRL, "max_completion_length") + ", "
                  + remedies.flags(remedies.SWIFT, "max_completion_length") + ", "
                  + remedies.flags(remedies.VERL, "data.max_response_length") + ") and vLLM's context with it ("
                  + remedies.flags(remedies.TRL, "vllm_max_model_length") + ", "
                  + remedies.flags(remedies.SWIFT, "vllm_max_model_len") + "); check generation stops at the chat "
                  "template's end token (vLLM stop_token_ids, generation_config.eos_token_id).")
HINT_OVERLONG = ("Keep truncated completions from teaching: "
                 + remedies.flags(remedies.TRL, "mask_truncated_completions") + ", "
                 + remedies.flags(remedies.SWIFT, "overlong_filter")
                 + ", or DAPO's soft overlong penalty (a length-aware reward).")
HINT_EMPTY = ("Completions shrank to nothing: check the reward does not pay for empty or one-token answers (a format "
              "reward that an empty string satisfies, a penalty only for wrong content), and that the prompt does "
              "not already end with the end-of-turn token; lower the learning rate if it collapsed suddenly.")
HINTS = (HINT_TRUNCATED, HINT_OVERLONG, HINT_EMPTY)


def check(run: RunView, cfg: Config) -> Iterator[Finding]:
    series = step_series(run)
    if not run.rollouts.empty:
        series.setdefault(EVENT_LOG_SOURCE, pd.DataFrame())
    for source, steps in series.items():
        clipped, length = _series(run, source, steps)
        for kind, flags in (("truncated", truncated(clipped, cfg) if clipped is not None else None),
                            ("empty", empty(length, cfg) if length is not None else None)):
            if flags is None:
                continue
            longest = longest_run(flags, cfg.min_consecutive_steps)
            if longest is None:
                continue
            first, last, num = longest
            what = "were cut at the length limit" if kind == "truncated" else "were empty (at most one token)"
            yield Finding(
                id=ID, severity="warning", title=f"completions {what} for {num} steps in a row ({first}-{last})",
                step=first,
                evidence={"source": source, "kind": kind, "first_step": first, "last_step": last, "num_steps": num,
                          "clipped_frac": finite(clipped.median()) if clipped is not None else None,
                          "length_mean": finite(length.median()) if length is not None else None,
                          "max_length": _max_length(run, source, steps)},
                hints=(HINT_TRUNCATED, HINT_OVERLONG) if kind == "truncated" else (HINT_EMPTY,),
            )


def _series(run: RunView, source: str, steps: pd.DataFrame) -> tuple[pd.Series | None, pd.Series | None]:
    clipped, length = column(steps, "clipped_frac"), column(steps, "completion_length_mean")
    if source == EVENT_LOG_SOURCE:
        clipped = clipped if clipped is not None else _pooled(run.rollouts, "truncated_frac")
        length = length if length is not None else _pooled(run.rollouts, "length_mean")
    return clipped, length


def _pooled(rollouts: pd.DataFrame, name: str) -> pd.Series | None:
    """Per step, the ranks' values weighted by their numbers of completions."""
    known = rollouts.dropna(subset=[name, "num_completions", "step"])
    if known.empty:
        return None
    weights = known["num_completions"].astype(float)
    weighted = (known[name].astype(float) * weights).groupby(known["step"]).sum()
    return (weighted / weights.groupby(known["step"]).sum()).sort_index()


def _max_length(run: RunView, source: str, steps: pd.DataFrame) -> int | None:
    if source == EVENT_LOG_SOURCE and "max_length" in run.rollouts and run.rollouts["max_length"].notna().any():
        return int(run.rollouts["max_length"].max())
    longest = column(steps, "completion_length_max")
    return int(longest.max()) if longest is not None else None
