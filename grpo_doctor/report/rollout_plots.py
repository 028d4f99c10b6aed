"""The report's rollout section: GRPO step metrics, the rank-by-rank duplicate heatmap, sample completions.

Step metrics are drawn in the canonical vocabulary (analysis/metric_names.py), one line per
source (the event log's median over ranks, or a TRL / ms-swift log); where the event log has no
step metric for it, the ranks' rollout records fill in length, truncation and diversity. The
heatmap shows, for every pair of ranks, the share of their completions for a common prompt that
have an identical copy on the other rank: a block off the diagonal is a shared sampling seed.
Texts go to the template as they are (it escapes them).

Typical use:
    section = rollout_section(evidence)   # None, or {"metrics": uri, "heatmap": uri, "samples": [...],
                                          #           "metric_steps", "fold_metrics": fewer than 5 steps}
"""
from __future__ import annotations

from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display: reports are built on head nodes and in CI
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from grpo_doctor.analysis.grpo_metrics import step_series  # noqa: E402
from grpo_doctor.analysis.load import Evidence  # noqa: E402
from grpo_doctor.analysis.rollout_tables import (  # noqa: E402
    EVENT_LOG_SOURCE,
    cross_rank_overlaps,
    duplicate_rates,
    pair_matrix,
)
from grpo_doctor.report.figure_png import figure_uri  # noqa: E402
from grpo_doctor.report.plots import MIN_TREND_POINTS  # noqa: E402

plt.rcParams["text.parse_math"] = False  # names from the run go into labels: "$" must not start mathtext

# (panel title, canonical metrics drawn in it)
PANELS = (
    ("reward", ("reward",)),
    ("reward std", ("reward_std_batch", "reward_std_group_mean")),
    ("share of zero-std groups", ("frac_reward_zero_std",)),
    ("KL to the reference", ("kl",)),
    ("loss", ("loss",)),
    ("gradient norm", ("grad_norm",)),
    ("entropy", ("entropy",)),
    ("completion length (tokens)", ("completion_length_mean",)),
    ("share truncated at the limit", ("clipped_frac",)),
    ("diversity", ("duplicate_rate", "cross_rank_duplicate_frac", "distinct_1", "distinct_2", "edit_distance")),
    ("rollout vs trainer log-probs", ("rollout_logprob_diff", "rollout_kl", "rollout_prob_diff")),
)
MAX_SAMPLE_STEPS = 3  # steps whose sampled completions are shown: the first, the middle and the last
SAMPLES_PER_STEP = 4
MAX_TEXT_CHARS = 500
ANNOTATE_MAX_RANKS = 16  # above this the heatmap's cells are too small for numbers
DPI = 80


def rollout_section(run: Evidence) -> dict[str, Any] | None:
    """Everything the _rollouts.html.j2 template shows; None when the run holds no GRPO metrics or rollouts."""
    series = metric_series(run)
    metric_steps = max((len(frame.index) for frame in series.values()), default=0)
    section = {"metrics": rollout_metrics(series), "heatmap": duplicate_heatmap(run),
               "samples": sample_completions(run), "sources": sorted(series),
               # too few steps for a trend: the page folds the panels (plots.MIN_TREND_POINTS)
               "metric_steps": metric_steps, "fold_metrics": metric_steps < MIN_TREND_POINTS}
    return section if section["metrics"] or section["heatmap"] or section["samples"] else None


def metric_series(run: Evidence) -> dict[str, pd.DataFrame]:
    """{source: canonical metrics by step}, the event log's completed from its rollout records."""
    series = step_series(run)
    if run.rollout_records:
        frame = series.get(EVENT_LOG_SOURCE, pd.DataFrame())
        extra = {"completion_length_mean": _pooled(run.rollouts, "length_mean"),
                 "clipped_frac": _pooled(run.rollouts, "truncated_frac"),
                 "distinct_1": _pooled(run.rollouts, "distinct_1"), "distinct_2": _pooled(run.rollouts, "distinct_2"),
                 "edit_distance": _pooled(run.rollouts, "edit_distance"),
                 "duplicate_rate": duplicate_rates(run.rollout_records)}
        for name, values in extra.items():
            if values is not None and not values.empty and (name not in frame or frame[name].isna().all()):
                frame = frame.drop(columns=[name], errors="ignore").join(values.rename(name), how="outer")
        series[EVENT_LOG_SOURCE] = frame.sort_index()
    return {source: frame for source, frame in series.items() if not frame.empty}


def rollout_metrics(series: dict[str, pd.DataFrame]) -> str | None:
    """One panel per GRPO quantity any source logged; a line per source and metric."""
    panels = [(title, names) for title, names in PANELS
              if any(n in f.columns and f[n].notna().any() for f in series.values() for n in names)]
    if not panels:
        return None
    cols = 3
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(11, 2.4 * rows), dpi=DPI, squeeze=False)
    for ax, (title, names) in zip(axes.flat, panels, strict=False):
        for source, frame in series.items():
            for name in names:
                if name in frame.columns and frame[name].notna().any():
                    values = frame[name].dropna()
                    label = source if len(names) == 1 else f"{source}: {name}"
                    ax.plot(values.index, values.to_numpy(dtype=float), marker="." if len(values) < 30 else None,
                            linewidth=1.2, label=label)
        ax.set_title(title, fontsize=9, loc="left")
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=8)
        if len(series) > 1 or len(names) > 1:
            ax.legend(fontsize=6)
    for i, ax in enumerate(axes.flat):
        if i >= len(panels):
            ax.set_visible(False)
        elif i + cols >= len(panels):  # the lowest panel of its column
            ax.set_xlabel("step", fontsize=8)
    fig.tight_layout()
    return _to_uri(fig)


def duplicate_heatmap(run: Evidence) -> str | None:
    """Rank x rank share of identical completions for common prompts; the diagonal: within the rank's groups."""
    matrix = pair_matrix(cross_rank_overlaps(run.rollout_records))
    if matrix.empty:
        return None
    within = run.rollouts.dropna(subset=["duplicate_rate"]).groupby("rank")["duplicate_rate"].mean()
    for rank in matrix.index:
        matrix.loc[rank, rank] = within.get(rank, float("nan"))
    ranks = list(matrix.index)
    size = min(11, 1.6 + 0.35 * len(ranks))
    fig, ax = plt.subplots(figsize=(size + 1.2, size), dpi=DPI)
    image = ax.imshow(matrix.to_numpy(dtype=float), vmin=0, vmax=1, cmap="Reds")
    ax.set_xticks(range(len(ranks)), [str(r) for r in ranks], fontsize=7)
    ax.set_yticks(range(len(ranks)), [str(r) for r in ranks], fontsize=7)
    ax.set_xlabel("rank")
    ax.set_ylabel("rank")
    if len(ranks) <= ANNOTATE_MAX_RANKS:
        for i, a in enumerate(ranks):
            for j, b in enumerate(ranks):
                value = matrix.loc[a, b]
                if pd.notna(value):
                    ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=7,
                            color="white" if value > 0.6 else "black")
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="share identical")
    return _to_uri(fig)


def sample_completions(run: Evidence) -> list[dict[str, Any]]:
    """A few completions of the first, middle and last step that kept texts, cut to MAX_TEXT_CHARS;
    copies of one prompt from different ranks side by side, where a shared seed shows."""
    table = run.completions.dropna(subset=["step", "completion"])
    if table.empty:
        return []
    steps = sorted(table["step"].astype(int).unique())
    chosen = sorted({steps[0], steps[len(steps) // 2], steps[-1]})[:MAX_SAMPLE_STEPS]
    out = []
    table = table[table["step"].astype(int).isin(chosen)].sort_values(["step", "group", "rank"], na_position="last")
    for _, row in table.groupby(["source", "step"]).head(SAMPLES_PER_STEP).iterrows():
        out.append({"source": row["source"], "step": int(row["step"]),
                    "rank": "" if pd.isna(row["rank"]) else int(row["rank"]),
                    "reward": "" if pd.isna(row["reward"]) else f"{float(row['reward']):.3g}",
                    "prompt": _cut(row["prompt"]), "completion": _cut(row["completion"])})
    return out


def _pooled(rollouts: pd.DataFrame, name: str) -> pd.Series | None:
    known = rollouts.dropna(subset=[name, "num_completions", "step"])
    if known.empty:
        return None
    weights = known["num_completions"].astype(float)
    weighted = (known[name].astype(float) * weights).groupby(known["step"].astype(int)).sum()
    return weighted / weights.groupby(known["step"].astype(int)).sum()


def _cut(text: Any) -> str:
    text = "" if text is None or (isinstance(text, float) and pd.isna(text)) else str(text)
    return text if len(text) <= MAX_TEXT_CHARS else text[:MAX_TEXT_CHARS] + f" ... ({len(text) - MAX_TEXT_CHARS} more)"


def _to_uri(fig) -> str:
    return figure_uri(fig)  # a 2x palette PNG: crisp on HiDPI screens (figure_png.py)
