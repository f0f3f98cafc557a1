"""The notebooks' calibration figures draw what their tables hold."""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpucap.report.plots import limits_figure


def test_the_limits_figure_draws_each_sweeps_points_and_intervals() -> None:
    limits = pd.DataFrame(
        {
            "sweep": ["70B, 4 x H200, 509/534 tokens", "405B, 8 x H200, 224/189 tokens"],
            "unit": ["requests/s", "requests/s"],
            "measured": [6.38, np.nan],  # the second measured beyond its highest load
            "default": [9.16, 7.1],
            "fitted": [8.16, 5.52],
            "fitted_low": [7.69, 3.9],
            "fitted_high": [8.67, 7.81],
            "held_out_low": [6.33, 4.28],
            "held_out_high": [12.7, 8.56],
        }
    )
    ax = limits_figure(limits).axes[0]
    assert [t.get_text().replace("\n", " ") for t in ax.get_yticklabels()] == list(limits["sweep"])
    points = {c.get_label(): c.get_offsets() for c in ax.collections if c.get_label() in ("measured", "fitted")}
    assert np.allclose(points["fitted"][:, 0], [8.16, 5.52])
    assert np.isclose(np.ma.filled(points["measured"][0, 0], np.nan), 6.38)
    labels = ax.get_legend_handles_labels()[1]
    assert {"80% out of sample", "95% from the covariance", "default coefficients"} <= set(labels)
    assert ax.get_xlabel() == "SLO-limited requests/s" and ax.get_xscale() == "log"
