"""Checks of a calibration fit: did it make any metric worse than the defaults did, and did it push
a coefficient against its physical bound or far from its start (``sanity_flags``)?

A fit minimizes one loss over every metric and limit together, so it may buy a large gain on one
metric (throughput, TTFT) with a loss on another (TPOT). ``metric_changes`` compares, per metric,
the median absolute relative error ``median_i |p_i / m_i - 1|`` before and after the fit, and
calls a rise *worse* only when it exceeds its own noise: 1.96 standard deviations of the paired
bootstrap of that difference over the runs (Efron & Tibshirani, *An Introduction to the
Bootstrap*, 1993, ch. 6: the bootstrap standard error of a statistic; pairs resampled so that
each run keeps its before and after error).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpucap.physics.coefficients import COEFFICIENT_INFO, Coefficients

Z_95 = 1.959963984540054  # two-sided 95% normal quantile
BOOTSTRAP_SAMPLES = 2000
BOOTSTRAP_SEED = 0  # fixed: the same fit always reports the same noise
# A fitted coefficient this many times its start (or a start this many times it) is flagged.
DRIFT_FLAG = 5.0


def median_abs_error(log_ratio: np.ndarray) -> float:
    """``median |exp(r) - 1|``: the median absolute relative error of log ratios ``r``."""
    return float(np.median(np.abs(np.expm1(log_ratio))))


def change_noise(before: np.ndarray, after: np.ndarray, samples: int = BOOTSTRAP_SAMPLES) -> float:
    """Standard deviation of ``median|after| - median|before|`` (relative errors) over paired
    bootstrap resamples of the runs; 0 for fewer than two runs (no scatter to resample)."""
    n = len(before)
    if n < 2:
        return 0.0
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    idx = rng.integers(0, n, size=(samples, n))
    eb, ea = np.abs(np.expm1(before))[idx], np.abs(np.expm1(after))[idx]
    return float(np.std(np.median(ea, axis=1) - np.median(eb, axis=1)))


def metric_changes(before: pd.DataFrame, after: pd.DataFrame) -> pd.DataFrame:
    """Per metric (columns of ``before``/``after``: log(predicted / measured) per run, NaN where
    the run did not measure it): runs n, median absolute error before and after, the noise of
    the change (1.96 x its bootstrap standard deviation) and ``worse``: the rise exceeds it."""
    rows = []
    for metric in before.columns:
        ok = np.isfinite(before[metric].to_numpy(float)) & np.isfinite(after[metric].to_numpy(float))
        b, a = before[metric].to_numpy(float)[ok], after[metric].to_numpy(float)[ok]
        if not ok.any():
            continue
        eb, ea = median_abs_error(b), median_abs_error(a)
        noise = Z_95 * change_noise(b, a)
        rows.append(
            {"metric": metric, "n": int(ok.sum()), "before": eb, "after": ea, "noise": noise, "worse": ea - eb > noise}
        )
    return pd.DataFrame(rows, columns=["metric", "n", "before", "after", "noise", "worse"])


def worse_flags(changes: pd.DataFrame) -> tuple[str, ...]:
    """One line per metric the fit made worse beyond its noise."""
    return tuple(
        f"{r.metric}: median error {r.before:.1%} -> {r.after:.1%} (noise {r.noise:.1%}): the fit trades it for the "
        "other metrics"
        for r in changes.itertuples()
        if r.worse
    )


def sanity_flags(
    start: Coefficients, fitted: Coefficients, free: tuple[str, ...], at_bound: dict[str, str]
) -> tuple[str, ...]:
    """One line per free coefficient the fit pushed against its physical bound or moved more
    than DRIFT_FLAG times from its start: the data asks for something the model lacks, not for
    hardware that fast or slow."""
    flags = []
    a, b = start.as_dict(), fitted.as_dict()
    for name in free:
        info = COEFFICIENT_INFO[name]
        where = at_bound.get(name, "")
        if where in ("lower", "upper"):
            edge = info.lower if where == "lower" else info.upper
            flags.append(f"{name} = {b[name]:.4g} at its {where} bound {edge:g}")
        elif a[name] > 0 and b[name] > 0 and max(a[name] / b[name], b[name] / a[name]) > DRIFT_FLAG:
            flags.append(f"{name} moved from {a[name]:.4g} to {b[name]:.4g} (more than {DRIFT_FLAG:g}x)")
    return tuple(flags)
