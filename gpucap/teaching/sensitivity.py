"""Which assumption moves an answer, and by how much: one estimate per change of an input,
coefficient or mechanism, side by side, and a figure against a measured band.

Used by the notebooks to face a measurement gpucap disagrees with (seed 1's load test:
``SEED1_MEASURED``) without choosing a default to fit it: each row is a what-if, and the answer
that settles it is a load test's own results fitted in notebook 03.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from gpucap.estimate import estimate
from gpucap.report.text import PLAIN_NAMES

# Seed 1, section 5.1: "实测 ... 稳定并发在 60 到 70 之间" (measured: stable at 60 to 70 concurrent
# requests) for Llama 3 70B on 8 x A100-80GB, tp 8, 4,096-token context, TTFT 2 s, TPOT 100 ms.
SEED1_MEASURED = (60.0, 70.0)


def what_moves(base: Mapping[str, Any], changes: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """``gpucap.estimate(**base)`` and, for each named change, ``estimate(**{**base, **change})``:
    the recommendation, what binds, and TTFT/TPOT at the recommendation, one row each."""
    rows = []
    for label, change in {"as given": {}, **changes}.items():
        est = estimate(**{**base, **change})
        r = est.ranges.get("recommended_concurrency")
        rows.append(
            {
                "change": label,
                "recommended": est.recommended_concurrency,
                "80% range": f"{r.low:,.0f}-{r.high:,.0f}" if r else "",
                "low": r.low if r else float("nan"),
                "high": r.high if r else float("nan"),
                "what binds": est.binding or PLAIN_NAMES.get(est.bottleneck, est.bottleneck),
                "bottleneck": PLAIN_NAMES.get(est.bottleneck, est.bottleneck),
                "ttft_s": est.ttft_s,
                "tpot_ms": est.tpot_s * 1e3,
            }
        )
    return pd.DataFrame(rows)


def against_band(table: pd.DataFrame, band: tuple[float, float], what: str = "the measurement") -> str:
    """A sentence per row of ``what_moves``: whether ``band`` (low, high) lies inside its
    recommendation's 80% range, overlaps it or falls outside it, said plainly."""
    lo, hi = band
    lines = []
    for row in table.itertuples(index=False):
        rng = f"80% range {row.low:,.0f}-{row.high:,.0f}"
        if math.isnan(row.low):  # no range
            lines.append(f"{row.change}: {row.recommended:,}, no range to compare {what} with")
        elif lo >= row.low and hi <= row.high:
            lines.append(f"{row.change}: {row.recommended:,} ({rng}) holds {what} {lo:g}-{hi:g}")
        elif hi < row.low or lo > row.high:
            lines.append(f"{row.change}: {row.recommended:,} ({rng}): {what} {lo:g}-{hi:g} falls outside it")
        else:
            lines.append(f"{row.change}: {row.recommended:,} ({rng}) overlaps {what} {lo:g}-{hi:g} only in part")
    return "\n".join(lines)


def band_figure(table: pd.DataFrame, band: tuple[float, float], *, band_label: str, title: str = "") -> Figure:
    """The recommendation of each row of ``what_moves`` as a horizontal bar with its 80% range as
    a whisker, and a measured ``band`` (low, high) shaded across them."""
    fig = Figure(figsize=(8, 0.45 * len(table) + 1.4))
    ax = fig.subplots()
    y = list(range(len(table)))[::-1]
    ax.axvspan(*band, color="tab:green", alpha=0.25, label=band_label)
    ax.barh(y, table["recommended"], color="tab:blue", height=0.6)
    if {"low", "high"} <= set(table.columns):  # each recommendation's 80% range as a whisker
        rec = table["recommended"].astype(float)
        err = [(rec - table["low"]).clip(lower=0).fillna(0), (table["high"] - rec).clip(lower=0).fillna(0)]
        ax.errorbar(rec, y, xerr=err, fmt="none", ecolor="black", capsize=3, lw=1, label="80% range")
    for yi, v in zip(y, table["recommended"], strict=True):
        ax.text(v, yi, f" {v:,}", va="center", fontsize=9)
    ax.set_yticks(y, table["change"])
    ax.set_xlabel("recommended concurrency (requests in flight)")
    top = max(float(table["recommended"].max()), float(table.get("high", table["recommended"]).max()), band[1])
    ax.set_xlim(0, top * 1.15)
    ax.legend(loc="lower right", fontsize=9)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig
