"""Which assumption moves an answer, and by how much: one estimate per change of an input,
coefficient or mechanism, side by side, and a figure against a measured band.

Used by the notebooks to face a measurement gpucap disagrees with (seed 1's load test:
``SEED1_MEASURED``) without choosing a default to fit it: each row is a what-if, and the answer
that settles it is a load test's own results fitted in notebook 03.
"""

from __future__ import annotations

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
        rows.append(
            {
                "change": label,
                "recommended": est.recommended_concurrency,
                "bottleneck": PLAIN_NAMES.get(est.bottleneck, est.bottleneck),
                "ttft_s": est.ttft_s,
                "tpot_ms": est.tpot_s * 1e3,
            }
        )
    return pd.DataFrame(rows)


def band_figure(table: pd.DataFrame, band: tuple[float, float], *, band_label: str, title: str = "") -> Figure:
    """The recommendation of each row of ``what_moves`` as a horizontal bar, with a measured
    ``band`` (low, high) shaded across them."""
    fig = Figure(figsize=(8, 0.45 * len(table) + 1.4))
    ax = fig.subplots()
    y = list(range(len(table)))[::-1]
    ax.axvspan(*band, color="tab:green", alpha=0.25, label=band_label)
    ax.barh(y, table["recommended"], color="tab:blue", height=0.6)
    for yi, v in zip(y, table["recommended"], strict=True):
        ax.text(v, yi, f" {v:,}", va="center", fontsize=9)
    ax.set_yticks(y, table["change"])
    ax.set_xlabel("recommended concurrency (requests in flight)")
    ax.set_xlim(0, max(float(table["recommended"].max()), band[1]) * 1.15)
    ax.legend(loc="lower right", fontsize=9)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig
