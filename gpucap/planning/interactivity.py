"""The throughput-interactivity frontier: what a GPU delivers against what each user gets.

For each option (GPU, tensor parallelism, weight format) the load grows from one request in
flight to what its KV cache holds, and each load gives one point:

- interactivity, output tokens/s per user: ``1 / TPOT`` (how fast one user's answer streams);
- output tokens/s per GPU: the replica's output rate over its GPUs;
- $ per million output tokens: ``$/GPU-hour / (tokens/s per GPU x 3600) x 1e6``.

More load raises the per-GPU rate and lowers the per-user rate; the frontier is the set of
points no other option beats on both (the Pareto front, ``pareto``), after dropping points whose
TTFT misses the SLO; ``pareto_cost`` is the same front on $ per million tokens (lower is better)
among priced GPUs. Each point is the closed loop of ``gpucap.physics.concurrency.loop_point`` (steady state of varied
traffic, or the waves of a fixed-length load test), the same model the estimator answers with.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpucap.catalog.gpus import get_gpu
from gpucap.catalog.models import ModelSpec
from gpucap.catalog.prices import Prices, read_prices
from gpucap.config import EngineConfig, Hardware, Workload, hardware
from gpucap.errors import DoesNotFit
from gpucap.physics.coefficients import Coefficients
from gpucap.physics.concurrency import loop_point
from gpucap.physics.memory import batch_slots, memory_limit

COLUMNS = [
    "gpu",
    "tp",
    "weight_dtype",
    "concurrency",
    "tokens_per_s_per_user",
    "tokens_per_s_per_gpu",
    "ttft_s",
    "tpot_s",
    "output_tokens_per_s",
    "usd_per_million_output_tokens",
    "meets_ttft_slo",
    "pareto",
    "pareto_cost",
]
POINTS_PER_OPTION = 40  # concurrencies per option, geometric from 1 to what memory holds


def option_points(
    hw: Hardware, coef: Coefficients, wl: Workload, concurrency: Sequence[float] | None = None
) -> pd.DataFrame:
    """One option's curve: per concurrency (default ``POINTS_PER_OPTION`` geometric steps from
    1 to what the KV cache holds), the closed loop's rates and latencies."""
    _, holds = memory_limit(hw, wl.max_context)
    if holds < 1:
        raise DoesNotFit(f"{hw.spec.name} on {hw.gpu.key} at tp={hw.layout.tp} holds no whole request")
    if concurrency is None:
        grid = np.unique(np.round(np.geomspace(1.0, max(holds, 1.0), POINTS_PER_OPTION)))
    else:
        grid = np.asarray(concurrency, dtype=float)
    pt = loop_point(hw, coef, wl, grid, max_running=batch_slots(hw, holds))
    gpus = hw.layout.gpus_per_replica
    out = np.asarray(pt.output_tokens_per_s, dtype=float)
    tpot = np.asarray(pt.tpot_s, dtype=float)
    return pd.DataFrame(
        {
            "concurrency": grid,
            "tokens_per_s_per_user": 1.0 / tpot,
            "tokens_per_s_per_gpu": out / gpus,
            "ttft_s": np.asarray(pt.ttft_s, dtype=float),
            "tpot_s": tpot,
            "output_tokens_per_s": out,
        }
    )


def pareto(per_user: np.ndarray, per_gpu: np.ndarray, eligible: np.ndarray) -> np.ndarray:
    """True for each eligible point that no other eligible point beats on both axes (at least as
    good on each, better on one)."""
    flags = np.zeros(per_user.size, dtype=bool)
    best = -math.inf
    # most interactive first; a point is on the front when it delivers more per GPU than every
    # more interactive point (ties in interactivity: the higher per-GPU one only)
    order = np.lexsort((-per_gpu, -per_user))
    for i in order:
        if eligible[i] and per_gpu[i] > best:
            flags[i] = True
            best = per_gpu[i]
    return flags


def interactivity_frontier(
    model: str | Path | ModelSpec,
    gpus: Sequence[str],
    *,
    input_len: float,
    output_len: float,
    tp: Sequence[int] = (1, 2, 4, 8),
    weight_dtypes: Sequence[str | None] = (None,),
    engine: str | EngineConfig = "vllm",
    ttft_slo_s: float = math.inf,
    lengths: str = "varied",
    coefficients: Coefficients | None = None,
    prices: Prices | str | Path | None = None,
    gpu_file: str | Path | None = None,
) -> tuple[pd.DataFrame, list[str]]:
    """Every option's curve (``COLUMNS``) with its Pareto front, and the options left out with why
    (does not fit, a split the model refuses). ``weight_dtypes`` None: the checkpoint's format.
    ``ttft_slo_s``: points above it are kept but not on the front. ``prices``: a price file or
    ``gpucap.catalog.prices.Prices`` (default: the shipped list); an unpriced GPU has no $ column."""
    if not gpus:
        raise ValueError("give at least one GPU")
    if not (ttft_slo_s > 0):
        raise ValueError(f"ttft_slo_s must be positive, got {ttft_slo_s!r}")
    price_list = prices if isinstance(prices, Prices) else read_prices(prices)
    wl = Workload(float(input_len), float(output_len), lengths=lengths)  # the SLO filters points below
    parts: list[pd.DataFrame] = []
    skipped: list[str] = []
    for key in gpus:
        gpu = get_gpu(key, gpu_file)
        usd = price_list.usd_per_gpu_hour(gpu)
        for t in tp:
            for wd in weight_dtypes:
                try:
                    hw = hardware(model, gpu, tp=t, weight_dtype=wd, engine=engine)
                    coef = coefficients or Coefficients.for_engine(hw.engine.engine)
                    part = option_points(hw, coef, wl)
                except (DoesNotFit, ValueError) as exc:
                    skipped.append(f"{gpu.key} tp={t} {wd or 'checkpoint format'}: {exc}")
                    continue
                part.insert(0, "weight_dtype", hw.weight_dtype)
                part.insert(0, "tp", t)
                part.insert(0, "gpu", gpu.key)
                part["usd_per_million_output_tokens"] = (
                    usd / (part["tokens_per_s_per_gpu"] * 3600.0) * 1e6 if usd is not None else np.nan
                )
                parts.append(part)
    if not parts:
        raise ValueError("no option fits: " + "; ".join(skipped))
    table = pd.concat(parts, ignore_index=True)
    table["meets_ttft_slo"] = table["ttft_s"] <= ttft_slo_s
    user, ok = table["tokens_per_s_per_user"].to_numpy(), table["meets_ttft_slo"].to_numpy()
    table["pareto"] = pareto(user, table["tokens_per_s_per_gpu"].to_numpy(), ok)
    cost = table["usd_per_million_output_tokens"].to_numpy(dtype=float)
    table["pareto_cost"] = pareto(user, -np.nan_to_num(cost, nan=np.inf), ok & np.isfinite(cost))
    return table[COLUMNS], skipped


def describe_point(row: pd.Series | dict[str, Any]) -> str:
    """One frontier point in words: 'H200-SXM-141GB tp=8 fp8, 64 requests in flight'."""
    return f"{row['gpu']} tp={row['tp']} {row['weight_dtype']}, {row['concurrency']:,.0f} requests in flight"


def interactivity_figure(table: pd.DataFrame, *, title: str = "") -> Any:
    """Tokens/s per GPU (y) against tokens/s per user (x), one line per option and the Pareto
    front drawn thick; beside it, $ per million output tokens against the same x where priced.
    Points that miss the TTFT SLO are hollow."""
    from matplotlib.figure import Figure

    priced = table["usd_per_million_output_tokens"].notna().any()
    fig = Figure(figsize=(12.4 if priced else 6.6, 4.4))
    axes = np.atleast_1d(np.asarray(fig.subplots(1, 2 if priced else 1), dtype=object))
    views = [("tokens_per_s_per_gpu", "pareto", "output tokens/s per GPU")]
    if priced:
        views.append(("usd_per_million_output_tokens", "pareto_cost", "$ per million output tokens"))
    options = list(table.groupby(["gpu", "tp", "weight_dtype"], sort=True))
    for ax, (col, front, label) in zip(axes, views, strict=True):
        for k, ((gpu, tp, wd), part) in enumerate(options):
            part = part.sort_values("tokens_per_s_per_user")
            color = f"C{k % 10}"
            ax.plot(part["tokens_per_s_per_user"], part[col], "-", color=color, lw=1, label=f"{gpu} tp={tp} {wd}")
            ok = part["meets_ttft_slo"]
            ax.plot(part.loc[ok, "tokens_per_s_per_user"], part.loc[ok, col], "o", ms=3, color=color)
            ax.plot(part.loc[~ok, "tokens_per_s_per_user"], part.loc[~ok, col], "o", ms=3, mfc="none", color=color)
        best = table[table[front]].sort_values("tokens_per_s_per_user")
        ax.plot(
            best["tokens_per_s_per_user"],
            best[col],
            "-",
            color="0.45",
            lw=8,
            alpha=0.35,
            zorder=0,
            label="Pareto front",
        )
        ax.set(
            xlabel="output tokens/s per user (1 / TPOT)",
            ylabel=label,
            yscale="log" if front == "pareto_cost" else "linear",
        )
        ax.set_title(f"{title} {label} against interactivity".strip(), fontsize=10)
    axes[0].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig
