"""Error tables: measured vs predicted by model size, GPU and engine, with the default
coefficients, after calibration, and leave-one-model-out (fit without a model, predict it)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from .calibrate import DEFAULT_FREE, calibrate
from .catalog import load_model
from .engine import Coefficients
from .validate import METRICS, validate

SIZE_BUCKETS = ((10e9, "<10B"), (40e9, "10-40B"), (100e9, "40-100B"), (np.inf, ">100B"))


def size_bucket(model: str) -> str:
    """Active parameters per token, bucketed: what sets decode cost."""
    try:
        active = load_model(model).active_params
    except ValueError:
        return "unknown"
    return next(name for top, name in SIZE_BUCKETS if active < top)


def _summary(result: pd.DataFrame, by: str, label: str) -> pd.DataFrame:
    rows = []
    for key, g in result.groupby(by):
        for m in METRICS:
            r = g[f"{m}_ratio"].dropna().astype(float)
            if not r.empty:
                rows.append(
                    {
                        by: key,
                        "metric": m,
                        f"n_{label}": len(r),
                        f"median_abs_err_{label}": float((r - 1).abs().median()),
                    }
                )
    return pd.DataFrame(rows)


def error_table(
    cases: pd.DataFrame,
    after: Coefficients | dict[str, Coefficients] | None,
    *,
    by: str = "size",
    before: Coefficients | dict[str, Coefficients] | None = None,
) -> pd.DataFrame:
    """Median absolute error per group of ``by`` ("size", "gpu", "engine", "model") and metric,
    with ``before`` (default: each engine's defaults) and ``after`` coefficients side by side."""
    res_before, res_after = validate(cases, before), validate(cases, after)
    for res in (res_before, res_after):
        res["size"] = [size_bucket(str(m)) for m in res["model"]]
    table = _summary(res_before, by, "before").merge(_summary(res_after, by, "after"), on=[by, "metric"], how="outer")
    return table[[by, "metric", "n_before", "median_abs_err_before", "median_abs_err_after"]].rename(
        columns={"n_before": "n"}
    )


def leave_one_model_out(cases: pd.DataFrame, *, free: tuple[str, ...] = DEFAULT_FREE, **fit: Any) -> pd.DataFrame:
    """For each model: fit on every other model's runs, predict this model's. The error quoted is
    for a model the fit did not see. Also the in-sample error of one fit on all runs, and the
    defaults', for comparison."""
    all_fit = calibrate(cases, free=free, **fit).coefficients
    defaults = validate(cases)
    in_sample = validate(cases, all_fit)
    rows = []
    for model in sorted(cases["model"].astype(str).unique()):
        held = (cases["model"].astype(str) == model).to_numpy()
        if held.all():
            continue
        coef = calibrate(cases[~held], free=free, **fit).coefficients
        out = validate(cases[held], coef)
        for m in METRICS:
            r_out = out[f"{m}_ratio"].dropna()
            if r_out.empty:
                continue
            rows.append(
                {
                    "model": model,
                    "size": size_bucket(model),
                    "metric": m,
                    "n": len(r_out),
                    "median_abs_err_default": float((defaults.loc[held, f"{m}_ratio"].dropna() - 1).abs().median()),
                    "median_abs_err_in_sample": float((in_sample.loc[held, f"{m}_ratio"].dropna() - 1).abs().median()),
                    "median_abs_err_held_out": float((r_out - 1).abs().median()),
                }
            )
    return pd.DataFrame(rows)
