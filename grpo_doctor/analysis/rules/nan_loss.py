"""`nan-loss`: the loss or the gradient norm became NaN or infinite.

Reported once per source at the first step where any rank logged a non-finite `loss` or
`grad_norm` (read from the step records and framework logs themselves: in the tables NaN also
means "not logged"), naming the ranks that did at that step; a framework log names no rank.
Critical when it lasts (two or more logged steps) or is the last thing logged (a short excerpt
ending in NaN counts); a warning for one step followed by finite values (fp16 loss scaling skips
such an overflow step and goes on).
Note: the Hugging Face Trainer (TRL, ms-swift) replaces a NaN / inf loss by the running mean in
its logs (`logging_nan_inf_filter`, on by default), so there the gradient norm is what shows it.

Evidence keys: `source`, `first_step`, `metrics` (which of loss / grad_norm were non-finite at
that step), `values` ({metric: "nan" | "inf" | "-inf"}), `num_steps_affected` (logged steps with a
non-finite value from then on), `last_finite_loss` and `last_finite_grad_norm` (the step before;
None where never finite).
"""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator

import numpy as np
import pandas as pd

from grpo_doctor.analysis.findings import Finding
from grpo_doctor.analysis.grpo_metrics import finite, rank_metrics
from grpo_doctor.analysis.rollout_tables import EVENT_LOG_SOURCE
from grpo_doctor.analysis.views import RunView, View
from grpo_doctor.checks.rollout_rules import NanLossConfig as Config  # watch's live rules read it too
from grpo_doctor.schema import Step
from grpo_doctor.schema.ranks import format_ranks

ID = "nan-loss"
READS = {View.FRAMEWORK_METRICS, View.RANK_LOGS, View.RANK_TABLES, View.RANKS, View.ROLLOUT_TABLES}

HINTS = (
    "Find the first bad value: a reward function returning NaN / inf, an advantage divided by a group std of 0 "
    "without an epsilon, or log-probabilities of -inf (padding or EOS tokens not masked; vLLM logprobs of "
    "tokens outside top-k).",
    "Numerics: train in bf16 rather than fp16 (or keep loss scaling on), lower the learning rate, clip gradients "
    "(max_grad_norm 1.0).",
    "To see NaN losses in Hugging Face Trainer logs set logging_nan_inf_filter=False; resume from the last "
    "checkpoint before the first bad step once the cause is fixed.",
)


def check(run: RunView, cfg: Config) -> Iterator[Finding]:
    by_source: dict[str, list[tuple[int, int | None, str, float]]] = defaultdict(list)
    for rank, log in sorted(run.rank_logs.items()):
        for rec in log.records:
            if type(rec) is Step and rec.step is not None:
                for name in cfg.metrics:
                    value = rec.metrics.get(name)
                    if isinstance(value, float) and not math.isfinite(value):
                        by_source[EVENT_LOG_SOURCE].append((rec.step, rank, name, value))
    for metric_log in run.metric_logs:
        by_source[metric_log.source] += [(b["step"], None, b["metric"], b["value"]) for b in metric_log.nonfinite
                                  if b["metric"] in cfg.metrics]
    table = rank_metrics(run)
    for source, bad in by_source.items():
        if not bad:
            continue
        first = min(step for step, *_ in bad)
        at_first = [b for b in bad if b[0] == first]
        ranks = tuple(sorted({rank for _, rank, _, _ in at_first if rank is not None}))
        flagged = sorted({name for _, _, name, _ in at_first}, key=cfg.metrics.index)
        before = table[(table["source"] == source) & (table["step"] < first)].sort_values("step")
        hosts = tuple(sorted({h for r in ranks if (h := run.host_of(r)) is not None}))
        where = f"on rank(s) {format_ranks(ranks)}" if ranks else f"({source} log)"
        affected = {step for step, *_ in bad}
        last_logged = table.loc[table["source"] == source, "step"].max()
        recovered = len(affected) == 1 and pd.notna(last_logged) and last_logged > first
        yield Finding(
            id=ID, severity="warning" if recovered else "critical", title=f"{' and '.join(flagged)} became non-finite at step {first} {where}",
            ranks=ranks, hosts=hosts, step=first,
            evidence={"source": source, "first_step": first, "metrics": flagged,
                      "values": {name: _describe([v for _, _, n, v in at_first if n == name]) for name in flagged},
                      "num_steps_affected": len(affected),
                      "last_finite_loss": _last(before, "loss"), "last_finite_grad_norm": _last(before, "grad_norm")},
            hints=HINTS,
        )


def _describe(values: list[float]) -> str:
    for v in values:
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
    return "nan"


def _last(rows: pd.DataFrame, name: str) -> float | None:
    if name not in rows.columns:
        return None
    values = rows[name].astype(float)
    per_step = values[np.isfinite(values)].groupby(rows["step"]).median()  # the ranks' median
    return finite(per_step.iloc[-1]) if not per_step.empty else None
