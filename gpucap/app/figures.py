"""The interactive estimator's figures (``gpucap.app.widgets``) as SVG: one GPU's memory, the
concurrency each resource allows, and TTFT / TPOT / output tokens/s against concurrency.

Each takes gpucap results and returns an SVG document (a string); no physics here. SVG instead
of matplotlib so that a figure follows a slider: each builds in about a millisecond (see
``gpucap.app.svg``). Elements a reader or a test looks for carry a class: ``bar``, ``slo``,
``recommended``, ``memory-limit``, ``curve``.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass

import numpy as np

from gpucap.app.svg import (
    DASH_DOT,
    DASHED,
    DOTTED,
    Canvas,
    Panel,
    Stroke,
    linear_ticks,
    log_label,
    log_ticks,
    padded_limits,
)
from gpucap.estimate import Estimate
from gpucap.physics.batching import LoadPoint
from gpucap.physics.memory import MemoryBreakdown
from gpucap.report.knee import Knee
from gpucap.report.text import BAR_NAMES, PLAIN_NAMES
from gpucap.units import GiB

# What each bar of the constraints figure means and where its number comes from (its tooltip).
BAR_TIPS = {
    "memory": "requests whose KV cache (input + output tokens, in paged blocks) fits the KV budget of every "
    "replica: gpucap.physics.memory.memory_breakdown and concurrency_by_memory",
    "compute": "the concurrency at which the steps' matmul and attention FLOP alone, at u_compute of the GPU's "
    "peak, would use up the TTFT or TPOT SLO (gpucap.physics.steptime.step_time)",
    "hbm_bandwidth": "the concurrency at which the weight and KV reads alone, at u_hbm of the HBM bandwidth, "
    "would use up an SLO (gpucap.physics.steptime.step_time)",
    "interconnect": "the concurrency at which the tensor-parallel all-reduces alone (link latency and u_link of "
    "its bandwidth) would use up an SLO",
    "host": "the concurrency at which the HTTP server's core is full: requests/s x its CPU time per request "
    "(gpucap.queueing.frontend)",
    "max_num_seqs": "the requests the engine runs at once (max_num_seqs per replica); the rest wait in its queue",
    "step_overhead": "the concurrency at which the step's time outside the GPU (scheduling, sampling, launches) "
    "alone would use up the TPOT SLO",
}
RED, GRAY, BLUE, GREEN, ORANGE = "#d62728", "#7f7f7f", "#1f77b4", "#2ca02c", "#ff7f0e"  # matplotlib's tab: colors
SMALL, TEXT, TITLE = 9.7, 11.0, 12.5  # px: 7, 8 and 9 pt at 100 dpi
MEMORY_COLORS = {
    "embeddings": "#9ecae1",
    "attention": "#4292c6",
    "dense MLP": "#2171b5",
    "experts": "#08519c",
    "activations": "#fdae6b",
    "CUDA graphs": "#e6550d",
    "runtime": "#a63603",
    "KV budget": "#74c476",
}
WEIGHT_PARTS = ("embeddings", "attention", "dense MLP", "experts")


def memory_svg(m: MemoryBreakdown, *, title: str) -> str:
    """One GPU's memory as a stacked bar (GiB): weights by part, activations, CUDA graphs, runtime
    and the KV budget left, with the usable (``gpu_memory_utilization``, dashed) and total (solid)
    lines, and a key."""
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
    shown = [(name, value / GiB) for name, value in parts if value > 0]
    top_gib = sum(gib for _, gib in shown)
    c = Canvas(560, 380)
    ax = Panel.make(c, (56, 45.6, 168, 296.4), (-0.6, 0.6), (0.0, max(m.total / GiB, top_gib) * 1.06))
    ticks, label = linear_ticks(ax.y.lo, ax.y.hi)
    ax.y_axis(ticks, label, size=TEXT)
    c.text(16, ax.top + ax.height / 2, "GiB", size=TEXT, anchor="middle", rotate=-90)
    key: list[tuple[str, str]] = []  # (color, label), bottom to top
    bottom = 0.0
    for name, gib in shown:
        y0, y1 = ax.y(bottom), ax.y(bottom + gib)
        c.rect((ax.x(-0.3), y1, ax.x(0.3) - ax.x(-0.3), y0 - y1), fill=MEMORY_COLORS[name], kind="bar")
        c.line(ax.x(-0.3), y1, ax.x(0.3), y1, Stroke("white", 0.5))
        text = f"{name} {gib:,.2f} GiB"
        if name == "KV budget":
            text += f" = {m.kv_tokens_per_gpu:,.0f} tokens"
        elif name in WEIGHT_PARTS:
            text = "weights: " + text
        key.append((MEMORY_COLORS[name], text))
        bottom += gib
    ax.hline(m.total / GiB, Stroke("#000", 1.2), kind="total")
    lines = [f"total {m.total / GiB:,.1f} GiB (solid line)"]
    if m.usable < m.total:
        ax.hline(m.usable / GiB, Stroke("#000", dash=DASHED), kind="usable")
        lines.append(f"usable {m.usable / GiB:,.1f} GiB (dashed)")
    if not m.fits:
        c.text(
            ax.x(0),
            ax.y(bottom) - 2,
            f"short by {-m.kv_budget / GiB:,.1f} GiB",
            color=RED,
            anchor="middle",
            valign="bottom",
        )
    ax.frame()
    ax.title(title)
    y = 0.16 * 380  # the key, top to bottom, right of the bar
    for color, text in key[::-1]:
        c.rect((246.4, y - 6.65, 14, 13.3), fill=color)
        c.text(268.8, y, text, size=TEXT)
        y += 24.7
    for text in lines:
        c.text(246.4, y, text, size=TEXT)
        y += 24.7
    return c.to_svg()


def constraints_svg(estimate: Estimate, knee: Knee | None = None) -> str:
    """The concurrency each resource allows (``estimate.limits``, all replicas) as horizontal bars on
    a log scale, the binding one in red, and the SLO-limited recommendation as a dashed line; with
    a ``knee`` (``gpucap.report.knee``), where TTFT bends and why as an orange bar below them (the
    token budget, which is no limit of its own, shows here)."""
    names = list(estimate.limits)
    values = [estimate.limits[n] for n in names]
    if knee is not None:
        names.append("knee")
        values.append(knee.concurrency)
    finite = [v for v in values if v is not None and v > 0]
    rec = estimate.recommended_concurrency
    top = max([*finite, rec, 1.0])
    c = Canvas(560, 380)
    n = len(names)
    ax = Panel.make(c, (140, 53.2, 392, 273.6), (0.5, top * 6), (-0.6, n - 0.1), xlog=True)
    half_bar = (ax.y(0) - ax.y(0.3)) if n else 0.0
    for k, (name, v) in enumerate(zip(names, values, strict=True)):
        yi = n - 1 - k  # the first resource at the top
        py = ax.y(yi)
        color = RED if name == estimate.bottleneck else ORANGE if name == "knee" else GRAY
        if v is None:
            c.text(ax.x(0.8), py, "not binding", size=TEXT, color="#595959")
        elif v <= 0:
            c.text(ax.x(0.8), py, "0 (fails at 1 request)", size=TEXT, color=color)
        else:
            x0, x1 = ax.x(0.5), ax.x(max(v, 0.5))
            tip = knee.text if name == "knee" and knee is not None else BAR_TIPS[name]
            c.rect((x0, py - half_bar, x1 - x0, 2 * half_bar), fill=color, opacity=0.85, kind="bar", tip=tip)
            c.text(ax.x(v * 1.08), py, f"{v:,.0f}", size=TEXT)
        label = f"knee: {knee.cause}" if name == "knee" and knee is not None else BAR_NAMES.get(name, name)
        ax.y_tick(yi, label, size=TEXT)
    span = estimate.ranges.get("recommended_concurrency")
    if span is not None and span.high > 0:  # the recommendation's range as a pale band
        x0, x1 = ax.x(max(span.low, 0.5)), ax.x(max(span.high, 0.5))
        c.rect(
            (x0, ax.y(n - 0.45), max(x1 - x0, 1.0), ax.y(-0.6) - ax.y(n - 0.45)), fill=BLUE, opacity=0.12,
            kind="range", tip=f"{span.text('{:,.0f}')}: where the SLO limit lands if the latencies err as published runs did",
        )  # fmt: skip
    if rec >= 1:
        ax.vline(rec, Stroke(BLUE, 1.2, DASHED), kind="recommended")
        c.text(ax.x(rec), ax.y(n - 0.45), f" recommended {rec:,}", size=TEXT, color=BLUE, valign="bottom")
    ax.x_axis(log_ticks(ax.x.lo, ax.x.hi), log_label, size=TEXT)
    c.text(
        ax.left + ax.width / 2,
        ax.bottom + 22,
        "concurrent requests (all replicas)",
        size=TEXT,
        anchor="middle",
        valign="top",
    )
    ax.frame()
    ax.title(f"what each limit allows; bottleneck: {PLAIN_NAMES.get(estimate.bottleneck, estimate.bottleneck)}")
    return c.to_svg()


KNEE_LABEL_PX = 14  # room the knee's label takes above its baseline


def _clear_of(ax: Panel, slo: float | None) -> float:
    """The knee label's baseline: at the panel's foot, or just above the SLO line where that
    line runs through the foot (a label struck through reads as crossed out)."""
    foot = ax.bottom - 4
    if slo is None or abs(ax.y(slo) - foot) >= KNEE_LABEL_PX:
        return foot
    above = ax.y(slo) - 4
    return above if above - KNEE_LABEL_PX > ax.top else ax.y(slo) + KNEE_LABEL_PX + 2


@dataclass(frozen=True)
class CurveMarks:
    """What ``curves_svg`` marks on the curves: the SLO lines (red), the recommended concurrency
    (green), what memory holds (grey) and where TTFT bends (orange); None: not drawn."""

    ttft_slo_s: float | None = None
    tpot_slo_s: float | None = None
    recommended: float | None = None
    memory_limit: float | None = None
    knee: float | None = None


def curves_svg(point: LoadPoint, marks: CurveMarks = CurveMarks(), *, replicas: int = 1, title: str = "") -> str:
    """TTFT, TPOT and output tokens/s against concurrency from a closed-loop ``LoadPoint`` over an
    array of concurrencies (one replica; ``replicas`` scales concurrency and throughput to the
    whole box), with the SLO lines (red), the recommendation (green), what memory holds (grey) and
    where TTFT bends (``knee``, orange: ``gpucap.report.knee``) as ``marks`` give them, the last two
    shown within the curves' range. Each axis spans its curve and its marks."""
    ttft_slo_s, tpot_slo_s, recommended, memory_limit, knee = astuple(marks)
    conc = np.asarray(point.concurrency, dtype=float).ravel() * replicas
    panels = (
        (np.asarray(point.ttft_s, dtype=float).ravel(), "TTFT (s)", ttft_slo_s),
        (
            np.asarray(point.tpot_s, dtype=float).ravel() * 1e3,
            "TPOT (ms)",
            None if tpot_slo_s is None else tpot_slo_s * 1e3,
        ),
        (np.asarray(point.output_tokens_per_s, dtype=float).ravel() * replicas, "output tokens/s", None),
    )
    rec = recommended if recommended is not None and recommended >= 1 else None
    top = float(np.max(conc)) if conc.size else 0.0
    mem = memory_limit if memory_limit is not None and 0 < memory_limit <= top else None
    bend = knee if knee is not None and 0 < knee <= top else None
    c = Canvas(1150, 330)
    width, gap = 305.57, 76.39
    xlim = padded_limits([*conc, *([rec] if rec else [])], log=True)
    for k, (y, label, slo) in enumerate(panels):
        log_y = k < 2
        ok = np.isfinite(y) & np.isfinite(conc) & ((y > 0) | (not log_y)) & (conc > 0)
        ylim = padded_limits([*y[ok], *([slo] if slo is not None else [])], log=log_y)
        ax = Panel.make(c, (63.25 + k * (width + gap), 52.8, width, 221.1), xlim, ylim, xlog=True, ylog=log_y)
        if log_y:
            ax.y_axis(log_ticks(*ylim), log_label, grid=True, size=TEXT)
        else:
            ticks, tick_label = linear_ticks(*ylim)
            ax.y_axis(ticks, tick_label, grid=True, size=TEXT)
        ax.x_axis(log_ticks(*xlim), log_label, grid=True, size=TEXT)
        c.polyline([ax.x(v) for v in conc[ok]], [ax.y(v) for v in y[ok]], Stroke(BLUE, 1.6), kind="curve")
        if slo is not None:
            ax.hline(slo, Stroke(RED, dash=DASHED), kind="slo")
            c.text(
                ax.right - 0.01 * width,
                ax.y(slo) - 1,
                f"SLO {slo:g}",
                size=SMALL,
                color=RED,
                anchor="end",
                valign="bottom",
            )
        if rec is not None:
            ax.vline(rec, Stroke(GREEN, 1.3, DOTTED), kind="recommended")
            if k == 0:
                c.text(ax.x(rec), ax.top + 4, f" recommended {rec:,.0f}", size=SMALL, color=GREEN, valign="top")
        if mem is not None:
            ax.vline(mem, Stroke("#666666", dash=DASH_DOT), kind="memory-limit")
            if k == 0:
                c.text(
                    ax.x(mem),
                    ax.top + 0.12 * ax.height,
                    f"memory holds {mem:,.0f} ",
                    size=SMALL,
                    color="#4d4d4d",
                    anchor="end",
                    valign="top",
                )
        if bend is not None and k == 0:
            ax.vline(bend, Stroke(ORANGE, dash=DASHED), kind="knee")
            c.text(ax.x(bend), _clear_of(ax, slo), f" knee {bend:,.0f}", size=SMALL, color=ORANGE, valign="bottom",
                   kind="knee-label")  # fmt: skip
        ax.frame()
        ax.title(label)
    c.text(575, 330 - 6, "concurrent requests (all replicas)", size=TEXT, anchor="middle", valign="bottom")
    if title:
        c.text(63.25, 13.2, title, size=TITLE, valign="top")
    return c.to_svg()
