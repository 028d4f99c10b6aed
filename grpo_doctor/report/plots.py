"""The report's figures, drawn with matplotlib and embedded as PNG data URIs (no files, no network)
at twice the resolution they are shown at, so they stay crisp on HiDPI screens (figure_png.py).

Each function takes the loaded `Evidence` and returns a data URI (the timeline: a TimelinePlot,
its URI and a note of what it leaves out), or None when the run holds nothing to draw. Sizes stay
bounded on big runs: the phase timeline shows the last steps only (where a failure is) and cuts a
long stretch without events (time_cut.py) out of its axis, the metric plots draw the median over
ranks with the min-max band, not one line per rank, once there are more than a few ranks. Metrics
logged at fewer than MIN_TREND_POINTS steps are drawn apart, for the page to fold.

Typical use:
    timeline = phase_timeline(evidence)     # TimelinePlot(uri="data:image/png;base64,...", note="Cut: ...")
    uri = memory_over_time(evidence)        # "data:image/png;base64,..." or None
    metrics = step_metrics(evidence)        # MetricPlots(uri=..., few_uri=..., few=("loss", ...)) or None
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display: reports are built on head nodes and in CI
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.collections import PolyCollection  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator  # noqa: E402

from grpo_doctor.analysis.grpo_metrics import unusual_gaps  # noqa: E402
from grpo_doctor.analysis.load import Evidence  # noqa: E402
from grpo_doctor.report.figure_png import figure_uri  # noqa: E402
from grpo_doctor.report.time_cut import TimeCut, duration_text, find_cut  # noqa: E402

# Names from the run (phases, metrics) go into labels: "$" must never start mathtext there.
plt.rcParams["text.parse_math"] = False

TIMELINE_STEPS = 12  # the last steps drawn on the phase timeline
# At most this many ranks get a row on the timeline (1,024 rows would be a 300-inch image): the
# ranks with something to show first (a phase open at the end, an error, the slowest), then the
# others evenly spaced, in rank order.
TIMELINE_MAX_RANKS = 32
STEPS_BEFORE_CUT = 4  # the last steps drawn when a long stretch at the end is cut from the time axis
LABEL_POINTS = 8
MAX_METRICS = 12
# A metric logged at fewer steps than this shows no trend: its panel is folded away on the page, so that
# a run that stopped after 3 steps does not lead with a screen of 3-point lines.
MIN_TREND_POINTS = 5
MAX_LINES = 8  # above this many ranks, draw the median and the min-max band instead of one line each
DPI = 80
OOM_WORDS = ("OutOfMemory", "MemoryError", "out of memory")


@dataclass(frozen=True)
class TimelinePlot:
    uri: str
    note: str  # what the figure leaves out (earlier steps, a stretch cut from the time axis), or ""
    labels: tuple[str, ...] = ()  # the names written on bars, "rank 1: rollout (open 20 s)": the image's alt text
    cut: TimeCut | None = None


def phase_timeline(run: Evidence, num_steps: int = TIMELINE_STEPS) -> TimelinePlot | None:
    """Top-level phases per rank over the last `num_steps` steps; open phases hatched and labelled
    with their name, the hang moment and errors marked. A long stretch in which nothing happened
    (a hang: one phase open for minutes) is cut out of the time axis, and then only the last
    STEPS_BEFORE_CUT steps are drawn, so that the steps before the failure stay readable."""
    top = run.phases[run.phases["path"] == run.phases["phase"]]  # top level: the path is the name itself
    if top.empty:
        return None
    end_of_run = _end_of_run(run)
    top, num_ranks = _rows_to_draw(run, top), top["rank"].nunique()
    shown = _last_steps(top, num_steps)
    cut = _cut_for(run, shown, end_of_run)
    if cut is not None and cut.at_end and num_steps > STEPS_BEFORE_CUT:
        shown = _last_steps(top, STEPS_BEFORE_CUT)
        cut = _cut_for(run, shown, end_of_run)
    uri, labels = _draw_timeline(run, shown, end_of_run, cut)
    note = _timeline_note(top, shown, cut)
    drawn = top["rank"].nunique()
    if drawn < num_ranks:
        note = (f"{drawn} of {num_ranks} ranks drawn (those with a phase open at the end, an error or the "
                f"slowest steps, then others evenly spaced). " + note).strip()
    return TimelinePlot(uri=uri, note=note, labels=labels, cut=cut)


def _rows_to_draw(run: Evidence, top: pd.DataFrame, max_ranks: int = TIMELINE_MAX_RANKS) -> pd.DataFrame:
    ranks = sorted(top["rank"].unique())
    if len(ranks) <= max_ranks:
        return top
    recent = _last_steps(top, TIMELINE_STEPS)
    notable = [*recent.loc[recent["end_t"].isna(), "rank"], *run.errors["rank"].dropna().astype(int),
               *recent.groupby("rank")["duration_s"].sum().sort_values(ascending=False).index]
    present = set(ranks)
    chosen = set(list(dict.fromkeys(r for r in notable if r in present))[:max_ranks // 2])
    rest = [r for r in ranks if r not in chosen]
    step = len(rest) / max(1, max_ranks - len(chosen))
    chosen |= {rest[int(i * step)] for i in range(max_ranks - len(chosen)) if int(i * step) < len(rest)}
    return top[top["rank"].isin(chosen)]


def _last_steps(top: pd.DataFrame, num_steps: int) -> pd.DataFrame:
    steps = top["step"].dropna()
    if steps.empty:
        return top
    return top[top["step"].isna() | (top["step"] >= steps.max() - num_steps + 1)]


def _cut_for(run: Evidence, top: pd.DataFrame, end_of_run: float) -> TimeCut | None:
    start = float(top["begin_t"].min())
    times = [top["begin_t"].to_numpy(float), top["end_t"].dropna().to_numpy(float)]
    errors = run.errors[run.errors["rank"].isin(top["rank"].unique())]
    times.append(errors["t"].to_numpy(float))
    times.append(np.array([h.detected_t for h in run.hangs if h.detected_t is not None], dtype=float))
    return find_cut(np.concatenate(times) - start, end_of_run - start)


def _timeline_note(top: pd.DataFrame, shown: pd.DataFrame, cut: TimeCut | None) -> str:
    parts = []
    all_steps, shown_steps = top["step"].dropna(), shown["step"].dropna()
    if not shown_steps.empty and all_steps.min() < shown_steps.min():
        first, last = int(all_steps.min()), int(shown_steps.min()) - 1
        parts.append(f"steps {first}-{last} are not drawn" if last > first else f"step {first} is not drawn")
    if cut is not None:
        parts.append(f"{duration_text(cut.hidden_s)} in which no rank began or ended a phase are cut out "
                     "of the time axis at the zigzag mark")
    return ("Cut: " + "; ".join(parts) + ".") if parts else ""


def _draw_timeline(run: Evidence, top: pd.DataFrame, end_of_run: float, cut: TimeCut | None
                   ) -> tuple[str, tuple[str, ...]]:
    start = float(top["begin_t"].min())
    ranks = sorted(top["rank"].unique())
    names = list(dict.fromkeys(top["phase"]))
    colours = {name: plt.cm.tab10(i % 10) for i, name in enumerate(names)}
    fig, ax = plt.subplots(figsize=(11, max(2.2, 0.28 * len(ranks) + 1.4)), dpi=DPI)
    axis = cut.to_axis if cut is not None else np.asarray
    # One collection per phase and one for the open phases, not a broken_barh per rank and phase:
    # 64 ranks made 448 collections, seconds to build and draw. They are added in the order their
    # labels first occur rank by rank, as the per-rank drawing did, so the legend reads the same.
    row = top["rank"].map({rank: i for i, rank in enumerate(ranks)}).to_numpy(float)
    t0 = (top["begin_t"] - start).to_numpy(float)
    is_open = top["end_t"].isna().to_numpy()
    t1 = np.where(is_open, np.maximum(end_of_run - start, t0), (top["end_t"] - start).to_numpy(float))
    x0, x1 = axis(t0), axis(t1)
    rank_of, phase = top["rank"].to_numpy(), top["phase"].to_numpy(object)
    open_keys = set(zip(rank_of[is_open], phase[is_open], strict=True))
    legend: dict[str | None, None] = {}  # phase names, None standing for the open phases
    for key in dict.fromkeys(zip(rank_of, phase, strict=True)):
        legend.setdefault(key[1])
        if key in open_keys:
            legend.setdefault(None)
    for name in legend:
        if name is None:
            # The open phase keeps its colour (faint) under the hatching: which phase hangs is the point.
            faces = [(*colours[p][:3], 0.3) for p in phase[is_open]]
            _boxes(ax, x0[is_open], x1[is_open], row[is_open], facecolors=faces, edgecolor="#c0392b", hatch="///",
                   label="open at the end")
        else:
            closed = ~is_open & (phase == name)
            _boxes(ax, x0[closed], x1[closed], row[closed], color=colours[name], label=name)
    for hang in run.hangs:
        if hang.detected_t is not None:
            ax.axvline(float(axis(hang.detected_t - start)), color="#c0392b", linestyle="--", label="hang detected")
    errors = run.errors[run.errors["rank"].isin(ranks)]
    if not errors.empty:
        ax.scatter(axis((errors["t"] - start).to_numpy(float)), [ranks.index(r) for r in errors["rank"]], marker="X",
                   s=80, color="#c0392b", zorder=5, label="error")
    ax.set_xlim(-0.01 * float(x1.max()), float(x1.max()) * 1.01)
    # The ranks the others wait for (watch's culprits, else the ranks in the odd collective) are marked on
    # their row: in a hang every rank may be open in the same phase, and the bars alone look alike.
    waited_for = {int(r) for h in run.hangs for r in (h.culprits or h.odd_ranks)}
    ax.set_yticks(range(len(ranks)), [f"rank {r} (waited for)" if r in waited_for else f"rank {r}" for r in ranks])
    for tick, rank in zip(ax.get_yticklabels(), ranks, strict=True):
        if rank in waited_for:
            tick.set_color("#c0392b")
            tick.set_fontweight("bold")
    ax.set_ylim(len(ranks) - 0.5, -0.5)
    ax.set_xlabel("seconds since the first phase shown")
    crossing = ~is_open & (t0 < cut.from_s) & (t1 > cut.to_s) if cut is not None else np.zeros_like(is_open)
    labels = _label_bars(ax, x0, x1, row, t1 - t0, phase, is_open, crossing)
    if cut is not None:
        _mark_cut(ax, cut, float(x1.max()))
    _legend_once(ax)
    ax.grid(axis="x", alpha=0.3)
    return _to_uri(fig), tuple(f"rank {ranks[int(r)]}{' (waited for)' if ranks[int(r)] in waited_for else ''}: {text}"
                               for r, text in labels)


def _label_bars(ax, x0, x1, row, duration_s, phase, is_open, crossing) -> list[tuple[float, str]]:
    """Names on the bars that matter: every open phase, and the long phases the cut runs through.
    A label that does not fit in its bar goes before it; a white ground keeps it readable on hatching."""
    lo, hi = ax.get_xlim()
    px_per_s = ax.get_window_extent().width / (hi - lo)
    char_px = LABEL_POINTS * 0.6 * DPI / 72
    labels = []
    for i in np.flatnonzero(is_open | crossing):
        text = f"{phase[i]} ({'open ' if is_open[i] else ''}{duration_text(duration_s[i])})"
        fits = (x1[i] - x0[i]) * px_per_s > (len(text) + 2) * char_px
        pad = 4 / px_per_s
        ax.text(x0[i] + pad if fits else x0[i] - pad, row[i], text, ha="left" if fits else "right", va="center",
                fontsize=LABEL_POINTS, zorder=6, clip_on=True,
                bbox={"facecolor": "white", "alpha": 0.85, "edgecolor": "none", "pad": 1})
        labels.append((row[i], text))
    return labels


def _mark_cut(ax, cut: TimeCut, x_max: float) -> None:
    """A white zigzag band across every row where the time axis jumps, the hidden seconds above it;
    tick labels read true time on both sides."""
    x = cut.from_s
    half = 0.006 * x_max
    y_lo, y_hi = ax.get_ylim()
    ys = np.linspace(y_hi, y_lo, 4 * int(abs(y_lo - y_hi)) + 5)
    zig = np.where(np.arange(len(ys)) % 2 == 0, -half, half) * 0.6
    ax.fill_betweenx(ys, x - half + zig, x + half + zig, color="white", zorder=4, linewidth=0)
    for side in (-half, half):
        ax.plot(x + side + zig, ys, color="#555", linewidth=0.8, zorder=4)
    ax.annotate(f"{duration_text(cut.hidden_s)} cut", (x, 1.0), xycoords=("data", "axes fraction"),
                xytext=(0, 3), textcoords="offset points", ha="center", va="bottom", fontsize=8, color="#555")
    # Left of the cut the usual ticks; right of it one tick, the end, which says how long it all took.
    left = [t for t in MaxNLocator(nbins=6).tick_values(0.0, cut.from_s) if 0.0 <= t <= cut.from_s - 2 * half]
    ax.xaxis.set_major_locator(FixedLocator([*left, x_max]))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: _tick_text(float(cut.to_time(v)))))


def _tick_text(seconds: float) -> str:
    if abs(seconds) >= 100:
        return f"{seconds:.0f}"
    return f"{seconds:g}" if seconds == round(seconds, 2) else f"{seconds:.1f}"


def _boxes(ax, x0: np.ndarray, x1: np.ndarray, row: np.ndarray, **style) -> None:
    """What broken_barh draws (boxes 0.8 high centred on their row), for boxes on any rows at once."""
    y0, y1 = row - 0.4, row - 0.4 + 0.8
    corners = [(x0, y0), (x0, y1), (x1, y1), (x1, y0)]
    verts = np.stack([np.stack(c, axis=-1) for c in corners], axis=1)  # (boxes, 4 corners, x and y)
    # matplotlib's stub asks a Sequence of vertex arrays; it takes one (N, 4, 2) array, without a list of N.
    ax.add_collection(PolyCollection(verts, **style))  # type: ignore[arg-type]


def memory_over_time(run: Evidence) -> str | None:
    """GPU memory allocated per rank (or host RSS where no GPU figure exists), with the OOM point."""
    mem = run.memory
    series = []
    if not mem.empty and mem["allocated_bytes"].notna().any():
        series.append(("GPU allocated by PyTorch (GiB)", mem.dropna(subset=["allocated_bytes"]), "allocated_bytes"))
    if not mem.empty and mem["host_rss_bytes"].notna().any():
        series.append(("host RSS (GiB)", mem.dropna(subset=["host_rss_bytes"]), "host_rss_bytes"))
    samples = run.samples
    if not samples.empty and "mem_used_bytes" in samples:
        gpus = samples[(samples["kind"] == "gpu") & samples["mem_used_bytes"].notna()]
        if not gpus.empty:
            gpus = gpus.assign(rank=gpus["host"].astype(str) + " GPU " + gpus["index"].astype(str))
            series.append(("GPU memory used, all processes (GiB, NVML)", gpus, "mem_used_bytes"))
    if not series:
        return None
    start = min(float(table["t"].min()) for _, table, _ in series)
    fig, axes = plt.subplots(len(series), 1, figsize=(11, 3.0 * len(series)), dpi=DPI, squeeze=False)
    ooms = run.errors[run.errors["exc_type"].astype(str).str.contains("|".join(OOM_WORDS))
                     | run.errors["message"].astype(str).str.contains("out of memory")]
    for ax, (title, table, column) in zip(axes[:, 0], series, strict=True):
        _lines_by(ax, table, "t", column, start, scale=2**30, by="rank")
        for _, oom in ooms.iterrows():
            ax.axvline(oom["t"] - start, color="#c0392b", linestyle="--", label=f"OOM on rank {oom['rank']}")
        ax.set_title(title, fontsize=10, loc="left")
        ax.set_xlabel("seconds since the run started")
        _legend_once(ax)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return _to_uri(fig)


@dataclass(frozen=True)
class MetricPlots:
    """The step-metric panels: those with a trend to show (MIN_TREND_POINTS steps or more) in `uri`, the
    others in `few_uri`, which the page folds; `few` names them, `few_points` is the most steps any has."""

    uri: str | None
    few_uri: str | None = None
    few: tuple[str, ...] = ()
    few_points: int = 0
    min_points: int = MIN_TREND_POINTS


def step_metrics(run: Evidence, max_metrics: int = MAX_METRICS,
                 min_points: int = MIN_TREND_POINTS) -> MetricPlots | None:
    """Each numeric metric over steps, plus the step time; one line per rank, or median and band. Metrics
    logged at fewer than `min_points` steps go to a second figure (MetricPlots.few_uri)."""
    steps = run.steps
    if steps.empty or steps["step"].isna().all():
        return None
    steps = steps.sort_values(["rank", "step"]).assign(step_time_s=lambda d: d.groupby("rank")["t"].diff())
    # No step time across a gap (the unread middle of a big rank file: runlog/window.py).
    gap = steps.groupby("rank")["step"].transform(lambda s: pd.Series(unusual_gaps(s), index=s.index))
    steps.loc[gap.astype(bool), "step_time_s"] = np.nan
    metrics = [c for c in steps.columns if c not in ("rank", "host", "step", "t")
               and pd.api.types.is_numeric_dtype(steps[c]) and steps[c].notna().any()]
    metrics = (["step_time_s"] + [m for m in metrics if m != "step_time_s"])[:max_metrics]
    points = {m: int(steps.loc[steps[m].notna(), "step"].nunique()) for m in metrics}
    metrics = [m for m in metrics if points[m]]
    if not metrics:
        return None
    trend = [m for m in metrics if points[m] >= min_points]
    few = [m for m in metrics if points[m] < min_points]
    return MetricPlots(uri=_metric_panels(steps, trend) if trend else None,
                       few_uri=_metric_panels(steps, few) if few else None, few=tuple(few),
                       few_points=max((points[m] for m in few), default=0), min_points=min_points)


def _metric_panels(steps: pd.DataFrame, metrics: list[str]) -> str:
    cols = 3
    rows = math.ceil(len(metrics) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(11, 2.4 * rows), dpi=DPI, squeeze=False)
    for ax, metric in zip(axes.flat, metrics, strict=False):
        _lines_by(ax, steps.dropna(subset=[metric]), "step", metric, 0.0, scale=1.0, by="rank", legend=False)
        ax.set_title(metric, fontsize=9, loc="left")
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=8)
    for ax in list(axes.flat)[len(metrics):]:
        ax.set_visible(False)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.tight_layout(rect=(0, 0, 1, 0.96 if labels else 1))
    if labels:  # one legend for all panels: the ranks (or the band) are the same in each
        fig.legend(handles, labels, loc="upper center", ncol=min(len(labels), 8), fontsize=8, frameon=False)
    return _to_uri(fig)


def _lines_by(ax, table: pd.DataFrame, x: str, y: str, x0: float, scale: float, by: str,
              legend: bool = True) -> None:
    groups = list(table.groupby(by, sort=True))
    if len(groups) <= MAX_LINES:
        for key, rows in groups:
            label = f"rank {key}" if isinstance(key, (int, float)) and not isinstance(key, bool) else str(key)
            ax.plot(rows[x] - x0, rows[y] / scale, linewidth=1.2, label=label, **_dot_if_alone(len(rows)))
        if legend and len(groups) > 1:
            ax.legend(fontsize=7, ncol=min(4, len(groups)))
        return
    # Many ranks: a band shows the spread, the median the typical rank; binning x keeps it cheap.
    bins = (table[x] - x0).round(0 if x == "t" else 6)
    stats = (table[y] / scale).groupby(bins).agg(["min", "median", "max"])
    ax.fill_between(stats.index, stats["min"], stats["max"], alpha=0.25, label=f"min-max over {len(groups)} ranks")
    ax.plot(stats.index, stats["median"], linewidth=1.2, label="median", **_dot_if_alone(len(stats)))
    if legend:
        ax.legend(fontsize=7)


def _dot_if_alone(num_points: int) -> dict[str, Any]:
    """One value is no line: a dot shows it (a metric logged once, a step time from two steps)."""
    return {"marker": "o" if num_points == 1 else None, "markersize": 3}


def _end_of_run(run: Evidence) -> float:
    times = [run.phases["begin_t"].max(), run.phases["end_t"].max()]
    for table in (run.steps, run.errors, run.memory):
        if not table.empty:
            times.append(table["t"].max())
    times += [h.detected_t for h in run.hangs if h.detected_t is not None]
    return float(pd.Series(times, dtype=float).max())


def _legend_once(ax) -> None:
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    if unique:
        ax.legend(unique.values(), unique.keys(), fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))


def _to_uri(fig) -> str:
    return figure_uri(fig)  # a 2x palette PNG: crisp on HiDPI screens (figure_png.py)
