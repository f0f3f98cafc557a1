"""How far predictions are from measurements: ``validate``'s table summarized per metric (and per
group), and one testbed speed factor per source fitted on its throughput alone.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpucap.calibration.cases import at_speed, testbed_keys
from gpucap.calibration.validate import ALL_METRICS, measured_metrics, predict_prepared, prepare_cases


def source_speeds(
    cases: pd.DataFrame, method: str = "simulate", passes: int = 3, by: str = "source_id", part: str = "compute"
) -> dict[str, float]:
    """One testbed speed factor per ``source_id`` (or per value of ``by``), fitted on that
    source's output tokens/s only (what a user's own calibration of their testbed does): ``k``
    such that the median predicted / measured throughput of the source's rows is 1, by
    ``k <- k / median ratio`` (``passes`` times)."""
    prepared, errors = prepare_cases(cases)
    ok = [pos for pos in range(len(cases)) if pos not in errors]
    src = np.asarray(testbed_keys(cases, by))[ok]
    measured = measured_metrics(cases.iloc[ok])["output_tok_s_measured"].to_numpy()
    speeds: dict[str, float] = {}
    for source in sorted(set(src)):
        idx = [k for k in range(len(ok)) if src[k] == source and np.isfinite(measured[k]) and measured[k] > 0]
        if not idx:
            continue
        k_speed = 1.0
        for _ in range(passes):
            cases_k = [at_speed(prepared[k], k_speed, part) for k in idx]
            pred = predict_prepared(cases_k, None, method)["output_tok_s_predicted"].to_numpy()
            ratio = float(np.nanmedian(pred / measured[idx]))
            if not (np.isfinite(ratio) and ratio > 0):
                break
            k_speed /= ratio
        speeds[source] = k_speed
    return speeds


def abs_error(ratio: pd.Series) -> pd.Series:
    """|predicted / measured - 1|."""
    return (ratio.astype(float) - 1.0).abs()


def error_summary(result: pd.DataFrame, by: str | None = None) -> pd.DataFrame:
    """Rows compared, median and 90th-percentile absolute error, and median signed bias, per metric
    (and per value of ``by``)."""
    rows = []
    groups = [("all", result)] if by is None else list(result.groupby(by))
    for key, g in groups:
        for m in ALL_METRICS:
            if f"{m}_ratio" not in g:
                continue
            r = g[f"{m}_ratio"].dropna().astype(float)
            if r.empty:
                continue
            e = abs_error(r)
            rows.append(
                {
                    **({by: key} if by else {}),
                    "metric": m,
                    "n": len(r),
                    "median_abs_err": float(e.median()),
                    "p90_abs_err": float(e.quantile(0.9)),
                    "median_ratio": float(r.median()),
                }
            )
    return pd.DataFrame(rows)
