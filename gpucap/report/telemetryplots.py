"""Figures of a telemetry fit (``gpucap.calibration.telemetryfit``): each window's measured mean
against the prediction at the prior and after the fit, and the step log's times against the tokens
each step ran, with the step time gpucap predicts. No physics here."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

WINDOW_METRICS = {"ttft": "TTFT (s)", "itl": "ITL (s)", "tpot": "TPOT (s)", "e2e": "E2E (s)"}


def windows_figure(windows: pd.DataFrame) -> Figure:
    """Per metric, each window's measured mean (x) against the predicted one at the prior and
    after the fit (y); the dotted lines are +-15%."""
    metrics = [m for m in WINDOW_METRICS if windows[f"{m}_measured"].notna().any()]
    fig = Figure(figsize=(3.4 * len(metrics), 3.4))
    axes = np.atleast_1d(fig.subplots(1, len(metrics)))
    for ax, m in zip(axes, metrics, strict=True):
        x = windows[f"{m}_measured"].to_numpy(float)
        for which, marker in (("prior", "o"), ("fit", "x")):
            ax.plot(
                x,
                windows[f"{m}_{which}"].to_numpy(float),
                marker,
                ls="",
                label="at the prior" if which == "prior" else "fitted",
            )
        values = np.concatenate([x, windows[f"{m}_prior"], windows[f"{m}_fit"]]).astype(float)
        values = values[np.isfinite(values) & (values > 0)]
        if values.size:
            lo, hi = values.min() / 1.3, values.max() * 1.3
            ax.plot([lo, hi], [lo, hi], color="0.5", lw=1)
            for f in (0.85, 1.15):
                ax.plot([lo, hi], [lo * f, hi * f], color="0.7", lw=0.8, ls=":")
            ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi))
        ax.set(xlabel=f"measured {WINDOW_METRICS[m]}", ylabel="predicted", title=f"{m.upper()} per window")
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def steps_figure(steps: pd.DataFrame) -> Figure:
    """Each logged step's time against the tokens it ran (decode-only steps and steps with a
    prompt chunk apart), with the times predicted at the start and after the fit
    (``gpucap.calibration.stepfit.StepFit.steps``)."""
    fig = Figure(figsize=(7.5, 4))
    ax = fig.subplots()
    tokens = steps["decode"] + steps["prefill"]
    for kind, sel, color in (
        ("decode only", steps["prefill"] == 0, "tab:blue"),
        ("with a prompt chunk", steps["prefill"] > 0, "tab:orange"),
    ):
        if not sel.any():
            continue
        ax.plot(
            tokens[sel], steps.loc[sel, "logged_s"] * 1e3, ".", ms=3, alpha=0.25, color=color, label=f"logged, {kind}"
        )
        order = np.argsort(tokens[sel].to_numpy())
        t = tokens[sel].to_numpy()[order]
        for col, ls, name in (("start_s", ":", "start"), ("fitted_s", "-", "fitted")):
            ax.plot(t, steps.loc[sel, col].to_numpy()[order] * 1e3, ls, color=color, lw=1.2, label=f"{name}, {kind}")
    ax.set(xscale="log", yscale="log", xlabel="tokens in the step", ylabel="step time (ms)", title="Engine steps")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig
