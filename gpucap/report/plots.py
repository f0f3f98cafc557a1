"""Figures the notebooks show. Each takes gpucap results and returns a matplotlib Figure; no
physics here. The interactive estimator draws its own figures as SVG (``gpucap.app.figures``)."""

from __future__ import annotations

import textwrap

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from gpucap.calibration.fitchecks import Z_95
from gpucap.calibration.loadtests import MeasuredLimit
from gpucap.calibration.validate import METRICS

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
        for axis in (ax.xaxis, ax.yaxis):  # labels on the decades only: minor labels of a log axis run together
            axis.set_minor_formatter(NullFormatter())
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def limits_figure(limits: pd.DataFrame, title: str = "") -> Figure:
    """Each sweep's SLO-limited concurrency or rate (a fit's ``limits`` table): measured, predicted
    with the default coefficients and with the fitted ones, the fitted limit's interval from the
    coefficients' covariance and, where the fit has one, its out-of-sample 80% interval."""
    d = limits.reset_index(drop=True)
    fig = Figure(figsize=(10, 0.8 * len(d) + 2.2))
    ax = fig.subplots()
    y = np.arange(len(d))[::-1].astype(float)
    fitted = d["fitted"].to_numpy(float)
    if "held_out_low" in d and d["held_out_low"].notna().any():
        lo, hi = d["held_out_low"].to_numpy(float), d["held_out_high"].to_numpy(float)
        ax.errorbar(fitted, y - 0.12, xerr=[np.clip(fitted - lo, 0, None), np.clip(hi - fitted, 0, None)],
                    fmt="none", ecolor="tab:orange", capsize=3, lw=1.2, label="80% out of sample")  # fmt: skip
    lo, hi = d["fitted_low"].to_numpy(float), d["fitted_high"].to_numpy(float)
    ax.errorbar(fitted, y + 0.12, xerr=[np.clip(fitted - lo, 0, None), np.clip(hi - fitted, 0, None)],
                fmt="none", ecolor="tab:blue", capsize=3, lw=1.2, label="95% from the covariance")  # fmt: skip
    ax.scatter(d["default"], y, marker="o", facecolors="none", edgecolors="gray", s=40, label="default coefficients")
    ax.scatter(fitted, y, marker="x", color="tab:blue", s=40, label="fitted")
    ax.scatter(d["measured"], y, marker="D", color="black", s=30, label="measured", zorder=3)
    ax.set_yticks(y, [textwrap.fill(str(label), 42) for label in d["sweep"]], fontsize=8)
    ax.set_xscale("log")
    unit = str(d["unit"].iloc[0]) if "unit" in d and len(d) else ""
    ax.set_xlabel(f"SLO-limited {unit}".strip())
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=3)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def history_figure(history: pd.DataFrame) -> Figure:
    """Each free coefficient over the calibrations of a history (``gpucap.calibration.history.
    calibration_history``), with 95% error bars (1.96 standard errors)."""
    free = history[history["free"]]
    names = list(dict.fromkeys(free["coefficient"]))
    if not names:
        raise ValueError("the history has no free coefficient to draw")
    fig = Figure(figsize=(4.2 * len(names), 3.2))
    axes = np.atleast_1d(fig.subplots(1, len(names)))
    for ax, name in zip(axes, names, strict=True):
        d = free[free["coefficient"] == name].sort_values("entry")
        err = Z_95 * d["stderr"].fillna(0.0).where(np.isfinite(d["stderr"]), 0.0)
        ax.errorbar(d["entry"], d["value"], yerr=err, fmt="o-", capsize=3)
        ax.set(xlabel="calibration", ylabel=name, title=name)
        ax.set_xticks(d["entry"])
        ax.set_xticklabels([str(lb) or str(e) for e, lb in zip(d["entry"], d["label"], strict=True)], fontsize=8)
    fig.tight_layout()
    return fig
