"""Capacity-planning figures and the tables behind them (``notebooks/04-capacity-planning``).

Data and drawing are separate: ``frontier``, ``latency_vs_rate``, ``simulated_latency`` and
``rejected_counts`` return DataFrames computed by ``gpucap.planning.search``, ``gpucap.queueing.analytic`` and
``gpucap.queueing.simulate``; ``frontier_figure`` and ``latency_vs_rate_figure`` draw them and return a
matplotlib ``Figure``. No physics here, and no global state (figures are built with
``matplotlib.figure.Figure``, not pyplot).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from gpucap.catalog.models import ModelSpec
from gpucap.config import Hardware
from gpucap.physics.coefficients import Coefficients
from gpucap.physics.memory import batch_slots
from gpucap.physics.requests import Requests
from gpucap.planning.result import rejected_counts as rejected_counts
from gpucap.planning.search import plan
from gpucap.queueing.analytic import open_loop_latency
from gpucap.queueing.servicecurve import service_curve
from gpucap.queueing.simulate import simulate
from gpucap.types import STATISTICS

SLO_KINDS = {"ttft": "ttft_slo_s", "tpot": "tpot_slo_s"}
SLO_LABELS = {"ttft": "TTFT", "tpot": "TPOT"}
FRONTIER_COLUMNS = [
    "slo",
    "slo_s",
    "stat",
    "gpu",
    "cost_per_hour",
    "cost_per_million_output_tokens",
    "total_gpus",
    "replicas",
    "gpus_per_replica",
    "tp",
    "pp",
    "weight_dtype",
    "kv_dtype",
    "ttft_s",
    "tpot_s",
]
CHEAPEST = "cheapest of all"
KNEE_POINTS = 48  # rates the analytic curve is evaluated at by default
KNEE_FLOOR = 0.02  # lowest utilization of the default rate grid
KNEE_TOP = 0.998  # highest utilization of the default rate grid
SLO_SPAN = 30.0  # the latency axes stop at this multiple of the SLO, so the knee stays readable


# ---- cost against the SLO ------------------------------------------------------------------------
def frontier(
    model: str | Path | ModelSpec,
    *,
    slo: str = "ttft",
    slo_values_s: Sequence[float],
    **plan_kwargs: Any,
) -> pd.DataFrame:
    """The cheapest fleet per GPU type as one SLO tightens: one ``gpucap.planning.search.plan`` run per value
    of ``slo_values_s`` (the ``slo`` "ttft" or "tpot" SLO, seconds), everything else from
    ``plan_kwargs`` (target, lengths, the other SLO, stat, GPUs, formats, headroom, prices).

    One row per (SLO value, GPU) with the cheapest plan's cost, fleet and split; NaN cost where
    that GPU has no plan at that SLO. Rows with ``gpu == CHEAPEST`` carry the cheapest over all
    GPUs. A tighter SLO leaves each option no more capacity per replica, so the cost does not
    fall as the SLO tightens (the planner's communication-bound check, made at the load per
    serving replica, is the one rule that could break this).
    """
    if slo not in SLO_KINDS:
        raise ValueError(f"slo must be one of {', '.join(SLO_KINDS)}, got {slo!r}")
    if SLO_KINDS[slo] in plan_kwargs:
        raise ValueError(f"{SLO_KINDS[slo]} is what the frontier varies: give it as slo_values_s, not as an argument")
    values = [float(v) for v in slo_values_s]
    if not values or not all(math.isfinite(v) and v > 0 for v in values):
        raise ValueError(f"slo_values_s must be positive numbers of seconds, got {list(slo_values_s)!r}")
    rows: list[dict[str, Any]] = []
    for value in sorted(set(values)):
        kwargs: dict[str, Any] = {**plan_kwargs, SLO_KINDS[slo]: value}
        result = plan(model, **kwargs)
        gpus = list(dict.fromkeys([*result.plans["gpu"], *result.rejected["gpu"]]))
        for gpu in [*gpus, CHEAPEST]:
            options = result.plans if gpu == CHEAPEST else result.plans[result.plans["gpu"] == gpu]
            row: dict[str, Any] = {"slo": slo, "slo_s": value, "stat": result.slo.statistic, "gpu": gpu}
            if not options.empty:
                best = options.iloc[0]  # plans are sorted by cost
                row.update({c: best[c] for c in FRONTIER_COLUMNS[4:]})
                if gpu == CHEAPEST:
                    row["gpu_type"] = best["gpu"]
            rows.append(row)
    return pd.DataFrame(rows, columns=[*FRONTIER_COLUMNS, "gpu_type"])


def _per_million_factor(frame: pd.DataFrame) -> float | None:
    """$/M output tokens per $/hour when it is one number (rate and output-token targets: the
    fleet's output tokens/s is the target), else None."""
    ok = frame["cost_per_hour"].gt(0) & frame["cost_per_million_output_tokens"].notna()
    ratio = (frame.loc[ok, "cost_per_million_output_tokens"] / frame.loc[ok, "cost_per_hour"]).to_numpy(dtype=float)
    if ratio.size == 0 or not np.allclose(ratio, ratio[0], rtol=1e-6):
        return None
    return float(ratio[0])


MARKERS = ("o", "s", "^", "D", "v")
LINE_STYLES = ("-", "--", ":", "-.")


def line_looks(names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """A distinct look per line: ``color`` from tab10 for up to 10 lines, else tab20 (its dark
    shades first, then the light ones), so that up to 20 lines never share a colour; a marker
    that changes with each line, and past 20 lines another ``linestyle``."""
    from matplotlib import colormaps

    if len(names) <= 10:
        palette = list(colormaps["tab10"].colors)  # type: ignore[attr-defined]
    else:
        tab20 = list(colormaps["tab20"].colors)  # type: ignore[attr-defined]
        palette = tab20[0::2] + tab20[1::2]
    return {
        name: {
            "color": palette[k % len(palette)],
            "marker": MARKERS[k % len(MARKERS)],
            "linestyle": LINE_STYLES[(k // len(palette)) % len(LINE_STYLES)],
        }
        for k, name in enumerate(names)
    }


def frontier_figure(frame: pd.DataFrame, *, title: str = "") -> Figure:
    """Cheapest $/hour against the SLO, one line per GPU type and the cheapest of all (grey), one
    panel per SLO kind in ``frame`` (from ``frontier``); the right axis reads $/M output tokens
    where the target fixes the fleet's output. Each GPU type has its own colour and marker in
    every panel (``line_looks``), named once in a legend below the panels. Points are labelled
    with the fleet's GPU count; both axes are logarithmic."""
    if frame.empty:
        raise ValueError("the frontier table is empty: give it at least one SLO value")
    kinds = list(dict.fromkeys(frame["slo"]))
    gpus = sorted(g for g in frame["gpu"].unique() if g != CHEAPEST)
    looks = line_looks(gpus)  # the same look for a GPU in every panel
    fig = Figure(figsize=(6.2 * len(kinds), 4.6 + 0.25 * math.ceil((len(gpus) + 1) / 4)), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(kinds)))
    for ax, kind in zip(axes, kinds, strict=True):
        part = frame[frame["slo"] == kind]
        for gpu in [CHEAPEST, *gpus]:
            rows = part[part["gpu"] == gpu].sort_values("slo_s")
            cost = rows["cost_per_hour"].to_numpy(dtype=float)
            if gpu == CHEAPEST:
                ax.plot(rows["slo_s"], cost, "-", color="0.6", lw=7, alpha=0.45, label=CHEAPEST)
                continue
            ax.plot(rows["slo_s"], cost, label=gpu, **looks[gpu])
            lift = 4 + 9 * (gpus.index(gpu) % 5)  # counts at staggered heights: few labels on one spot
            for x, y, n in zip(rows["slo_s"], cost, rows["total_gpus"], strict=True):
                if np.isfinite(y):
                    ax.annotate(
                        f"{n:.0f}",
                        (x, y),
                        textcoords="offset points",
                        xytext=(4, lift),
                        fontsize=7,
                        color=looks[gpu]["color"],
                    )
        stat = part["stat"].iloc[0]
        ax.set(
            xscale="log",
            yscale="log",
            xlabel=f"{stat} {SLO_LABELS[kind]} SLO (s); tighter to the left",
            ylabel="fleet cost ($/hour)",
            title=f"{title} cost against the {SLO_LABELS[kind]} SLO".strip(),
        )
        ax.set_xticks(sorted(part["slo_s"].unique()), labels=[f"{v:g}" for v in sorted(part["slo_s"].unique())])
        ax.minorticks_off()
        plain = FuncFormatter(lambda v, _pos: f"{v:,.0f}" if v >= 1 else f"{v:g}")  # 1,000 rather than 10^3
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(plain)
        factor = _per_million_factor(part)
        if factor is not None:
            ax.secondary_yaxis("right", functions=(lambda c, f=factor: c * f, lambda m, f=factor: m / f)).set_ylabel(
                "$ per million output tokens"
            )
    named: dict[str, Any] = {}  # every line once, in drawing order, whichever panel has it
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            named.setdefault(label, handle)
    fig.legend(list(named.values()), list(named), loc="outside lower center", ncol=min(4, len(named)), fontsize=8)
    return fig


# ---- latency against the arrival rate ------------------------------------------------------------
def latency_vs_rate(
    hw: Hardware,
    coef: Coefficients | None = None,
    *,
    input_len: float,
    output_len: float,
    request_rates: Sequence[float] | None = None,
    max_running: float | None = None,
    burstiness: float = 1.0,
    service_scv: float = 0.0,
    points: int = KNEE_POINTS,
) -> pd.DataFrame:
    """Mean, P50, P95 and P99 TTFT, TPOT and e2e of one replica at each arrival rate
    (``gpucap.queueing.analytic.open_loop_latency``). Without ``request_rates``, ``points`` rates from 2%
    to 99.8% of the service rate, denser near it where the knee is. ``max_running`` defaults to
    ``batch_slots``. ``attrs``: ``service_rate`` (requests/s) and ``max_running``."""
    coef = coef or Coefficients.for_engine(hw.engine.engine)
    slots = batch_slots(hw, context_tokens=input_len + output_len) if max_running is None else max_running
    if request_rates is None and points < 2:
        raise ValueError(f"points must be at least 2, got {points!r}")
    curve = service_curve(hw, coef, Requests(input_len, output_len, max_running=slots))
    if request_rates is None:
        rates = curve.service_rate * (1.0 - np.geomspace(1.0 - KNEE_FLOOR, 1.0 - KNEE_TOP, points))
    else:
        rates = np.asarray(request_rates, dtype=float)
    lat = open_loop_latency(curve, request_rate=rates, burstiness=burstiness, service_scv=service_scv)
    cols: dict[str, Any] = {
        "request_rate": lat.request_rate,
        "utilization": lat.utilization,
        "stable": lat.stable,
        "wait_probability": lat.wait_probability,
    }
    for name, values in (("ttft", lat.ttft_s), ("tpot", lat.tpot_s), ("e2e", lat.e2e_s)):
        cols.update({f"{name}_{s}_s": values[s] for s in STATISTICS})
    out = pd.DataFrame(cols)
    out.attrs.update(service_rate=lat.service_rate, max_running=slots)
    return out


def simulated_latency(
    hw: Hardware,
    coef: Coefficients | None = None,
    *,
    request_rates: Sequence[float],
    input_len: float,
    output_len: float,
    max_running: float | None = None,
    num_requests: int = 600,
    burstiness: float = 1.0,
    seed: int = 0,
) -> pd.DataFrame:
    """``gpucap.queueing.simulate.simulate`` of one replica at each rate: the same columns as
    ``latency_vs_rate`` for TTFT, TPOT and e2e, and the run's preemptions and mean running."""
    coef = coef or Coefficients.for_engine(hw.engine.engine)
    slots = batch_slots(hw, context_tokens=input_len + output_len) if max_running is None else max_running
    rows = []
    for k, rate in enumerate(request_rates):
        run = simulate(
            hw,
            coef,
            request_rate=float(rate),
            num_requests=num_requests,
            input_len=input_len,
            output_len=output_len,
            max_running=slots,
            burstiness=burstiness,
            seed=seed + k,
        )
        row: dict[str, Any] = {"request_rate": float(rate)}
        for name in ("ttft", "tpot", "e2e"):
            row.update({f"{name}_{s}_s": run.summary[f"{name}_s"][s] for s in STATISTICS})
        rows.append({**row, "preemptions": run.preemptions, "mean_running": run.mean_running})
    return pd.DataFrame(rows)


def latency_vs_rate_figure(
    curve: pd.DataFrame,
    *,
    simulated: pd.DataFrame | None = None,
    ttft_slo_s: float | None = None,
    tpot_slo_s: float | None = None,
    slo_rate: float | None = None,
    stats: Sequence[str] = ("median", "p95", "p99"),
    title: str = "",
) -> Figure:
    """TTFT and TPOT percentiles of one replica against the arrival rate (``latency_vs_rate``),
        with the SLO lines, the service rate (where the queue stops being stable), the rate at which
        the SLOs are last met (``slo_rate``, e.g. ``max_request_rate``) and, as markers of the same
        colours, simulated points (``simulated_latency``). Lines are labelled "P50", "P95", "P99"; with an
    SLO the axis stops at ``SLO_SPAN`` times it."""
    bad = [s for s in stats if s not in STATISTICS]
    if bad:
        raise ValueError(f"stats must be among {', '.join(STATISTICS)}, got {bad!r}")
    mu = float(curve.attrs.get("service_rate", np.nan))
    fig = Figure(figsize=(11, 4.0))
    axes = fig.subplots(1, 2)
    for ax, name, slo in ((axes[0], "ttft", ttft_slo_s), (axes[1], "tpot", tpot_slo_s)):
        for s in stats:
            y = curve[f"{name}_{s}_s"].to_numpy(dtype=float)
            (line,) = ax.plot(
                curve["request_rate"],
                np.where(np.isfinite(y), y, np.nan),
                "-",
                label=s if s in ("mean", "median") else s.upper(),
            )
            if simulated is not None and not simulated.empty:
                first = s == stats[0]
                ax.plot(
                    simulated["request_rate"],
                    simulated[f"{name}_{s}_s"],
                    "o",
                    mfc="none",
                    color=line.get_color(),
                    label="simulated (same colours)" if first else "_simulated",
                )
        if slo is not None:
            ax.axhline(slo, color="tab:red", ls="--", lw=1, label=f"SLO {slo:g} s")
        if np.isfinite(mu):
            ax.axvline(mu, color="black", ls=":", lw=1.2, label=f"service rate {mu:.3g}/s")
        if slo_rate is not None:
            ax.axvline(slo_rate, color="tab:green", ls="-.", lw=1, label=f"SLOs met up to {slo_rate:.3g}/s")
        ax.set(
            yscale="log",
            xlabel="arrival rate (requests/s, one replica)",
            ylabel=f"{SLO_LABELS[name]} (s)",
        )
        if slo is not None:
            shown = [curve[f"{name}_{s}_s"] for s in stats]
            if simulated is not None and not simulated.empty:
                shown += [simulated[f"{name}_{s}_s"] for s in stats]
            values = np.concatenate([np.asarray(v, dtype=float) for v in shown] + [np.array([slo])])
            lowest = float(values[np.isfinite(values) & (values > 0)].min())
            ax.set_ylim(lowest / 1.25, max(SLO_SPAN * slo, 1.25 * lowest))
        if np.isfinite(mu) and mu > 0:
            top = ax.secondary_xaxis("top", functions=(lambda r, m=mu: r / m, lambda u, m=mu: u * m))
            top.set_xlabel("utilization (arrivals / service rate)")
        ax.legend(fontsize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig
