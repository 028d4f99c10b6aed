"""The report's figures, drawn with matplotlib and embedded as PNG data URIs (no files, no network).

Each function takes the loaded `Evidence` and returns a data URI, or None when the run holds
nothing to draw. Sizes stay bounded on big runs: the phase timeline shows the last steps only
(where a failure is), the metric plots draw the median over ranks with the min-max band, not
one line per rank, once there are more than a few ranks.

Typical use:
    uri = phase_timeline(evidence)          # "data:image/png;base64,..." or None
"""
from __future__ import annotations

import base64
import io
import math

import matplotlib

matplotlib.use("Agg")  # no display: reports are built on head nodes and in CI
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.collections import PolyCollection  # noqa: E402

from grpo_doctor.analysis.load import Evidence  # noqa: E402

# Names from the run (phases, metrics) go into labels: "$" must never start mathtext there.
plt.rcParams["text.parse_math"] = False

TIMELINE_STEPS = 12  # the last steps drawn on the phase timeline
MAX_METRICS = 12
MAX_LINES = 8  # above this many ranks, draw the median and the min-max band instead of one line each
DPI = 80
OOM_WORDS = ("OutOfMemory", "MemoryError", "out of memory")


def phase_timeline(ev: Evidence, num_steps: int = TIMELINE_STEPS) -> str | None:
    """Top-level phases per rank over the last `num_steps` steps; open phases hatched, the hang
    moment and errors marked."""
    top = ev.phases[ev.phases["path"] == ev.phases["phase"]]  # top level: the path is the name itself
    if top.empty:
        return None
    steps = top["step"].dropna()
    if not steps.empty:
        top = top[top["step"].isna() | (top["step"] >= steps.max() - num_steps + 1)]
    end_of_run = _end_of_run(ev)
    start = float(top["begin_t"].min())
    ranks = sorted(top["rank"].unique())
    names = list(dict.fromkeys(top["phase"]))
    colours = {name: plt.cm.tab10(i % 10) for i, name in enumerate(names)}
    fig, ax = plt.subplots(figsize=(11, max(2.2, 0.28 * len(ranks) + 1.4)), dpi=DPI)
    # One collection per phase and one for the open phases, not a broken_barh per rank and phase:
    # 64 ranks made 448 collections, seconds to build and draw. They are added in the order their
    # labels first occur rank by rank, as the per-rank drawing did, so the legend reads the same.
    row = top["rank"].map({rank: i for i, rank in enumerate(ranks)}).to_numpy(float)
    x0 = (top["begin_t"] - start).to_numpy(float)
    is_open = top["end_t"].isna().to_numpy()
    x1 = np.where(is_open, x0 + np.maximum(end_of_run - top["begin_t"].to_numpy(float), 0.0),
                  x0 + (top["end_t"] - top["begin_t"]).to_numpy(float))
    rank_of, phase = top["rank"].to_numpy(), top["phase"].to_numpy(object)
    open_keys = set(zip(rank_of[is_open], phase[is_open], strict=True))
    labels: dict[str | None, None] = {}  # phase names, None standing for the open phases
    for key in dict.fromkeys(zip(rank_of, phase, strict=True)):
        labels.setdefault(key[1])
        if key in open_keys:
            labels.setdefault(None)
    for name in labels:
        if name is None:
            _boxes(ax, x0[is_open], x1[is_open], row[is_open], facecolor="none", edgecolor="#c0392b", hatch="///",
                   label="open at the end")
        else:
            closed = ~is_open & (phase == name)
            _boxes(ax, x0[closed], x1[closed], row[closed], color=colours[name], label=name)
    for hang in ev.hangs:
        if isinstance(hang.get("detected_t"), (int, float)):
            ax.axvline(hang["detected_t"] - start, color="#c0392b", linestyle="--", label="hang detected")
    errors = ev.errors[ev.errors["rank"].isin(ranks)]
    if not errors.empty:
        ax.scatter(errors["t"] - start, [ranks.index(r) for r in errors["rank"]], marker="X", s=80,
                   color="#c0392b", zorder=5, label="error")
    ax.set_yticks(range(len(ranks)), [f"rank {r}" for r in ranks])
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the first phase shown")
    _legend_once(ax)
    ax.grid(axis="x", alpha=0.3)
    return _to_uri(fig)


def _boxes(ax, x0: np.ndarray, x1: np.ndarray, row: np.ndarray, **style) -> None:
    """What broken_barh draws (boxes 0.8 high centred on their row), for boxes on any rows at once."""
    y0, y1 = row - 0.4, row - 0.4 + 0.8
    corners = [(x0, y0), (x0, y1), (x1, y1), (x1, y0)]
    ax.add_collection(PolyCollection(np.stack([np.stack(c, axis=-1) for c in corners], axis=1), **style))


def memory_over_time(ev: Evidence) -> str | None:
    """GPU memory allocated per rank (or host RSS where no GPU figure exists), with the OOM point."""
    mem = ev.memory
    series = []
    if not mem.empty and mem["allocated_bytes"].notna().any():
        series.append(("GPU allocated by PyTorch (GiB)", mem.dropna(subset=["allocated_bytes"]), "allocated_bytes"))
    if not mem.empty and mem["host_rss_bytes"].notna().any():
        series.append(("host RSS (GiB)", mem.dropna(subset=["host_rss_bytes"]), "host_rss_bytes"))
    samples = ev.samples
    if not samples.empty and "mem_used_bytes" in samples:
        gpus = samples[(samples["kind"] == "gpu") & samples["mem_used_bytes"].notna()]
        if not gpus.empty:
            gpus = gpus.assign(rank=gpus["host"].astype(str) + " GPU " + gpus["index"].astype(str))
            series.append(("GPU memory used, all processes (GiB, NVML)", gpus, "mem_used_bytes"))
    if not series:
        return None
    start = min(float(table["t"].min()) for _, table, _ in series)
    fig, axes = plt.subplots(len(series), 1, figsize=(11, 3.0 * len(series)), dpi=DPI, squeeze=False)
    ooms = ev.errors[ev.errors["exc_type"].astype(str).str.contains("|".join(OOM_WORDS))
                     | ev.errors["message"].astype(str).str.contains("out of memory")]
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


def step_metrics(ev: Evidence, max_metrics: int = MAX_METRICS) -> str | None:
    """Each numeric metric over steps, plus the step time; one line per rank, or median and band."""
    steps = ev.steps
    if steps.empty or steps["step"].isna().all():
        return None
    steps = steps.sort_values(["rank", "step"]).assign(step_time_s=lambda d: d.groupby("rank")["t"].diff())
    metrics = [c for c in steps.columns if c not in ("rank", "host", "step", "t")
               and pd.api.types.is_numeric_dtype(steps[c]) and steps[c].notna().any()]
    metrics = (["step_time_s"] + [m for m in metrics if m != "step_time_s"])[:max_metrics]
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
            ax.plot(rows[x] - x0, rows[y] / scale, linewidth=1.2, label=label)
        if legend and len(groups) > 1:
            ax.legend(fontsize=7, ncol=min(4, len(groups)))
        return
    # Many ranks: a band shows the spread, the median the typical rank; binning x keeps it cheap.
    bins = (table[x] - x0).round(0 if x == "t" else 6)
    stats = (table[y] / scale).groupby(bins).agg(["min", "median", "max"])
    ax.fill_between(stats.index, stats["min"], stats["max"], alpha=0.25, label=f"min-max over {len(groups)} ranks")
    ax.plot(stats.index, stats["median"], linewidth=1.2, label="median")
    if legend:
        ax.legend(fontsize=7)


def _end_of_run(ev: Evidence) -> float:
    times = [ev.phases["begin_t"].max(), ev.phases["end_t"].max()]
    for table in (ev.steps, ev.errors, ev.memory):
        if not table.empty:
            times.append(table["t"].max())
    times += [h["detected_t"] for h in ev.hangs if isinstance(h.get("detected_t"), (int, float))]
    return float(pd.Series(times, dtype=float).max())


def _legend_once(ax) -> None:
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    if unique:
        ax.legend(unique.values(), unique.keys(), fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))


def _to_uri(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")
