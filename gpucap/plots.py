"""Figures the notebooks show. Each takes gpucap results and returns a matplotlib Figure; no
physics here."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import FuncFormatter, Locator, NullLocator

from .batching import LoadPoint
from .estimate import Estimate
from .loadtests import MeasuredLimit
from .memory import MemoryBreakdown
from .units import GiB
from .validate import METRICS

METRIC_LABELS = {"output_tok_s": "output tokens/s", "ttft_ms": "TTFT (ms)", "tpot_ms": "TPOT (ms)"}


def sweep_figure(
    sweep: pd.DataFrame,
    *,
    x: str = "concurrency",
    stat: str = "mean",
    ttft_slo_s: float = 2.0,
    tpot_slo_s: float = 0.1,
    limit: MeasuredLimit | None = None,
    title: str = "",
) -> Figure:
    """TTFT and TPOT (or ITL where the file has no TPOT) of a sweep against ``x``, with the SLO
    lines and the measured limit."""
    fig = Figure(figsize=(10, 3.6))
    axes = fig.subplots(1, 2)
    s = sweep.sort_values(x)
    tpot = f"tpot_{stat}_s" if s.get(f"tpot_{stat}_s", pd.Series(dtype=float)).notna().any() else f"itl_{stat}_s"
    for ax, col, slo, name in (
        (axes[0], f"ttft_{stat}_s", ttft_slo_s, "TTFT"),
        (axes[1], tpot, tpot_slo_s, tpot.split("_")[0].upper()),
    ):
        ax.plot(s[x], s[col], "o-", label=f"measured {stat}")
        ax.axhline(slo, color="tab:red", ls="--", lw=1, label=f"SLO {slo:g} s")
        if limit is not None and limit.limit is not None:
            ax.axvline(limit.limit, color="tab:green", ls=":", lw=1.2, label=f"limit {limit.limit:.1f}")
        ax.set(
            xscale="log",
            yscale="log",
            xlabel=x.replace("_", " "),
            ylabel=f"{name} (s)",
            title=f"{title} {name}".strip(),
        )
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def predicted_vs_measured_figure(before: pd.DataFrame, after: pd.DataFrame | None = None) -> Figure:
    """Predicted against measured for each metric (``validate`` results), before and after a fit;
    the dotted lines are +-25%."""
    fig = Figure(figsize=(13, 3.8))
    axes = fig.subplots(1, len(METRICS))
    for ax, m in zip(axes, METRICS, strict=True):
        values = []
        for res, label, marker in ((before, "default", "o"), (after, "calibrated", "x")):
            if res is None:
                continue
            d = res[res[f"{m}_ratio"].notna()]
            ax.scatter(d[f"{m}_measured"], d[f"{m}_predicted"], marker=marker, s=22, label=label, alpha=0.8)
            values += [d[f"{m}_measured"].to_numpy(), d[f"{m}_predicted"].to_numpy()]
        v = np.concatenate(values) if values else np.array([])
        v = v[np.isfinite(v) & (v > 0)]
        if v.size == 0:
            ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes)
            ax.set(title=METRIC_LABELS[m], xticks=[], yticks=[])
            continue
        lo, hi = v.min() / 1.5, v.max() * 1.5
        ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
        for f in (1.25, 1 / 1.25):
            ax.plot([lo, hi], [lo * f, hi * f], "k:", lw=0.6)
        ax.set(
            xscale="log",
            yscale="log",
            xlabel=f"measured {METRIC_LABELS[m]}",
            ylabel="predicted",
            title=METRIC_LABELS[m],
        )
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


# The interactive estimator's figures (gpucap.widgets). Fixed margins instead of tight_layout so
# that a redraw stays fast enough to follow a slider.

_MEMORY_COLORS = {
    "embeddings": "#9ecae1",
    "attention": "#4292c6",
    "dense MLP": "#2171b5",
    "experts": "#08519c",
    "activations": "#fdae6b",
    "CUDA graphs": "#e6550d",
    "runtime": "#a63603",
    "KV budget": "#74c476",
}


class _ReadableLogLocator(Locator):
    """Log-axis ticks at 1-2-5 steps over short spans and at powers of ten (every few decades)
    over long ones, so that a small axis carries a handful of labels whatever its range."""

    def __call__(self) -> Any:
        lo, hi = self.axis.get_view_interval() if self.axis is not None else (1.0, 10.0)
        return self.tick_values(lo, hi)

    def tick_values(self, vmin: float, vmax: float) -> Any:
        lo, hi = sorted((max(float(vmin), 1e-300), max(float(vmax), 1e-300)))
        first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
        span = math.log10(hi / lo)
        subs: tuple[float, ...] = (1.0, 2.0, 5.0) if span < 2.2 else (1.0,)
        if span < 0.6:
            subs = (1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0)
        stride = max(1, math.ceil((last - first) / 5)) if len(subs) == 1 else 1
        ticks = [s * 10.0**d for d in range(first, last + 1, stride) for s in subs]
        return np.array([t for t in ticks if lo <= t * (1 + 1e-9) and t <= hi * (1 + 1e-9)] or [lo, hi])


def _plain_log_axis(axis: Any) -> None:
    """Log-scale axis with plain-number labels (1, 10, 100, 1,000) and no minor ticks: clearer to
    read, and about twice as fast to draw as mathtext labels with minor tick marks."""
    axis.set_major_locator(_ReadableLogLocator())
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:.3g}"))
    axis.set_minor_locator(NullLocator())


def memory_figure(result: Estimate | MemoryBreakdown, *, title: str | None = None) -> Figure:
    """One GPU's memory as a stacked bar (GiB): weights by part, activations, CUDA graphs, runtime
    and the KV budget left, with the usable (``gpu_memory_utilization``) and total lines.

    ``result`` is an ``Estimate`` or a ``MemoryBreakdown``."""
    m = result.memory if isinstance(result, Estimate) else result
    if title is None:
        title = "memory per GPU"
        if isinstance(result, Estimate):
            title = f"{result.hw.spec.name} on {result.hw.gpu.key}: memory per GPU"
    w = m.weights
    parts = [
        ("embeddings", w.embeddings),
        ("attention", w.attention),
        ("dense MLP", w.dense_mlp),
        ("experts", w.experts),
        ("activations", m.activations),
        ("CUDA graphs", m.cuda_graphs),
        ("runtime", m.runtime_overhead),
        ("KV budget", max(m.kv_budget, 0.0)),
    ]
    fig = Figure(figsize=(5.6, 3.8), dpi=100)
    ax = fig.add_axes((0.1, 0.1, 0.3, 0.78))
    bottom = 0.0
    key: list[tuple[str, str]] = []  # (color, label), bottom to top
    for name, value in parts:
        if value <= 0:
            continue
        gib = value / GiB
        label = f"{name} {gib:,.2f} GiB"
        if name == "KV budget":
            label += f" = {m.kv_tokens_per_gpu:,.0f} tokens"
        elif name in ("embeddings", "attention", "dense MLP", "experts"):
            label = "weights: " + label
        ax.bar(0, gib, bottom=bottom, width=0.6, color=_MEMORY_COLORS[name], edgecolor="white", lw=0.5)
        key.append((_MEMORY_COLORS[name], label))
        bottom += gib
    ax.axhline(m.total / GiB, color="black", lw=1.2)
    lines = [f"total {m.total / GiB:,.1f} GiB (solid line)"]
    if m.usable < m.total:
        ax.axhline(m.usable / GiB, color="black", ls="--", lw=1)
        lines.append(f"usable {m.usable / GiB:,.1f} GiB (dashed)")
    if not m.fits:
        ax.text(0, bottom, f"short by {-m.kv_budget / GiB:,.1f} GiB", ha="center", va="bottom", color="tab:red")
    ax.set(xlim=(-0.6, 0.6), ylim=(0, max(m.total, bottom * GiB) / GiB * 1.06), xticks=[], ylabel="GiB")
    ax.set_title(title, fontsize=9, loc="left", y=1.0)
    # a hand-made key (a Legend costs several times as much to draw)
    y = 0.84
    for color, label in key[::-1]:
        fig.add_artist(Rectangle((0.44, y - 0.012), 0.025, 0.035, color=color, transform=fig.transFigure))
        fig.text(0.48, y, label, fontsize=8, va="center")
        y -= 0.065
    for line in lines:
        fig.text(0.44, y, line, fontsize=8, va="center")
        y -= 0.065
    return fig


def constraints_figure(estimate: Estimate) -> Figure:
    """The concurrency each resource allows (``estimate.limits``, all replicas) as horizontal bars on
    a log scale, the binding one in red, and the SLO-limited recommendation as a vertical line."""
    names = list(estimate.limits)
    values = [estimate.limits[n] for n in names]
    finite = [v for v in values if v is not None and v > 0]
    rec = estimate.recommended_concurrency
    top = max([*finite, rec, 1.0])
    fig = Figure(figsize=(5.6, 3.8), dpi=100)
    ax = fig.add_axes((0.25, 0.14, 0.7, 0.72))
    y = np.arange(len(names))[::-1]
    for yi, name, v in zip(y, names, values, strict=True):
        color = "tab:red" if name == estimate.bottleneck else "tab:gray"
        if v is None:
            ax.text(0.8, yi, "not binding", va="center", fontsize=8, color="0.35")
        elif v <= 0:
            ax.text(0.8, yi, "0 (fails at 1 request)", va="center", fontsize=8, color=color)
        else:
            ax.barh(yi, v, left=0.5, height=0.6, color=color, alpha=0.85)
            ax.text(v * 1.08, yi, f"{v:,.0f}", va="center", fontsize=8)
    if rec >= 1:
        ax.axvline(rec, color="tab:blue", ls="--", lw=1.2)
        ax.text(rec, len(names) - 0.45, f" recommended {rec:,}", color="tab:blue", fontsize=8, va="bottom")
    ax.set(xscale="log", xlim=(0.5, top * 6), ylim=(-0.6, len(names) - 0.1), yticks=y, yticklabels=names)
    _plain_log_axis(ax.xaxis)
    ax.set_xlabel("concurrent requests (all replicas)", fontsize=8)
    ax.tick_params(labelsize=8)
    ax.set_title(f"what each resource allows; bottleneck: {estimate.bottleneck}", fontsize=9, loc="left", y=1.0)
    return fig


_CURVE = "gpucap-curve"
_SLO = "gpucap-slo"
_RECOMMENDED = "gpucap-recommended"
_MEMORY = "gpucap-memory"


def load_curves_figure(
    point: LoadPoint,
    *,
    replicas: int = 1,
    ttft_slo_s: float | None = None,
    tpot_slo_s: float | None = None,
    recommended: float | None = None,
    memory_limit: float | None = None,
    title: str = "",
) -> Figure:
    """TTFT, TPOT and output tokens/s against concurrency from a closed-loop ``LoadPoint`` over an
    array of concurrencies (one replica; ``replicas`` scales concurrency and throughput to the
    whole box), with the SLO lines, the recommendation and what memory holds (the marks, which
    ``set_load_curves_marks`` moves afterwards)."""
    c = np.asarray(point.concurrency, dtype=float) * replicas
    panels = (
        (np.asarray(point.ttft_s, dtype=float), "TTFT (s)"),
        (np.asarray(point.tpot_s, dtype=float) * 1e3, "TPOT (ms)"),
        (np.asarray(point.output_tokens_per_s, dtype=float) * replicas, "output tokens/s"),
    )
    fig = Figure(figsize=(11.5, 3.3), dpi=100)
    axes = fig.subplots(1, 3)
    fig.subplots_adjust(left=0.055, right=0.985, bottom=0.17, top=0.84, wspace=0.25)
    for k, (ax, (y, label)) in enumerate(zip(axes, panels, strict=True)):
        ax.plot(c, y, "-", color="tab:blue", lw=1.6, gid=_CURVE)
        if k < 2:  # SLO line and its label, placed by set_load_curves_marks
            ax.axhline(1.0, color="tab:red", ls="--", lw=1, gid=_SLO, visible=False)
            label_kw = dict(color="tab:red", fontsize=7, ha="right", va="bottom", visible=False)
            ax.text(0.99, 1.0, "", gid=_SLO + "-label", transform=ax.get_yaxis_transform(), **label_kw)
        ax.axvline(1.0, color="tab:green", ls=":", lw=1.3, gid=_RECOMMENDED, visible=False)
        if k == 0:
            label_kw = dict(color="tab:green", fontsize=7, va="top", visible=False)
            ax.text(1.0, 0.98, "", gid=_RECOMMENDED + "-label", transform=ax.get_xaxis_transform(), **label_kw)
        ax.axvline(1.0, color="0.4", ls="-.", lw=1, gid=_MEMORY, visible=False)
        if k == 0:
            label_kw = dict(color="0.3", fontsize=7, ha="right", va="top", visible=False)
            ax.text(1.0, 0.88, "", gid=_MEMORY + "-label", transform=ax.get_xaxis_transform(), **label_kw)
        ax.set_xscale("log")
        _plain_log_axis(ax.xaxis)
        if k < 2:
            ax.set_yscale("log")
            _plain_log_axis(ax.yaxis)
        ax.set_title(label, fontsize=9, loc="left", y=1.0)
        ax.tick_params(labelsize=8)
        ax.grid(True, which="major", lw=0.4, alpha=0.5)
    fig.text(0.5, 0.02, "concurrent requests (all replicas)", ha="center", fontsize=8)
    if title:
        fig.text(0.055, 0.96, title, fontsize=9, va="top")
    return set_load_curves_marks(
        fig, ttft_slo_s=ttft_slo_s, tpot_slo_s=tpot_slo_s, recommended=recommended, memory_limit=memory_limit
    )


def set_load_curves_marks(
    fig: Figure,
    *,
    ttft_slo_s: float | None = None,
    tpot_slo_s: float | None = None,
    recommended: float | None = None,
    memory_limit: float | None = None,
) -> Figure:
    """Place the SLO lines, the recommendation and what memory holds on a ``load_curves_figure``
    (None hides a mark; what memory holds shows within the curves' range) and rescale its axes.
    Moving the marks on the same figure draws about a third faster than building it again, which
    the interactive estimator uses while a slider moves."""
    slos = (ttft_slo_s, None if tpot_slo_s is None else tpot_slo_s * 1e3, None)
    rec = recommended if recommended is not None and recommended >= 1 else None
    for ax, slo in zip(fig.axes, slos, strict=True):
        top = max((float(np.max(line.get_xdata())) for line in ax.lines if line.get_gid() == _CURVE), default=0.0)
        mem = memory_limit if memory_limit is not None and 0 < memory_limit <= top else None
        for line in ax.lines:
            if line.get_gid() == _SLO:
                line.set_visible(slo is not None)
                line.set_ydata([slo or 1.0] * 2)
            elif line.get_gid() == _RECOMMENDED:
                line.set_visible(rec is not None)
                line.set_xdata([rec or 1.0] * 2)
            elif line.get_gid() == _MEMORY:
                line.set_visible(mem is not None)
                line.set_xdata([mem or 1.0] * 2)
        for text in ax.texts:
            if text.get_gid() == _SLO + "-label":
                text.set_visible(slo is not None)
                text.set_y(slo or 1.0)
                text.set_text(f"SLO {slo:g}" if slo is not None else "")
            elif text.get_gid() == _RECOMMENDED + "-label":
                text.set_visible(rec is not None)
                text.set_x(rec or 1.0)
                text.set_text(f" recommended {rec:,.0f}" if rec is not None else "")
            elif text.get_gid() == _MEMORY + "-label":
                text.set_visible(mem is not None)
                text.set_x(mem or 1.0)
                text.set_text(f"memory holds {mem:,.0f} " if mem is not None else "")
        ax.relim(visible_only=True)
        ax.autoscale_view()
    return fig
