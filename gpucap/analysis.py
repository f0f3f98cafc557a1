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
    """For each model: fit on every other model's runs, predict this model's, so the error quoted
    is for a model the fit did not see. One row per case and metric with the ratio predicted /
    measured under the defaults, under one fit on all runs (in sample), and held out;
    ``lomo_summary`` turns it into median errors."""
    all_fit = calibrate(cases, free=free, **fit).coefficients
    cases = cases.reset_index(drop=True)
    defaults, in_sample = validate(cases), validate(cases, all_fit)
    held_out = defaults.copy()
    for model in sorted(cases["model"].astype(str).unique()):
        held = (cases["model"].astype(str) == model).to_numpy()
        if held.all():
            continue
        coef = calibrate(cases[~held], free=free, **fit).coefficients
        held_out.loc[held, [f"{m}_ratio" for m in METRICS]] = validate(cases[held], coef)[
            [f"{m}_ratio" for m in METRICS]
        ].to_numpy()
    rows = []
    for m in METRICS:
        for k in range(len(cases)):
            if pd.notna(defaults.loc[k, f"{m}_ratio"]):
                rows.append(
                    {
                        "case_id": cases.loc[k, "case_id"] if "case_id" in cases else k,
                        "model": str(cases.loc[k, "model"]),
                        "size": size_bucket(str(cases.loc[k, "model"])),
                        "metric": m,
                        "ratio_default": defaults.loc[k, f"{m}_ratio"],
                        "ratio_in_sample": in_sample.loc[k, f"{m}_ratio"],
                        "ratio_held_out": held_out.loc[k, f"{m}_ratio"],
                    }
                )
    return pd.DataFrame(rows)


def lomo_summary(lomo: pd.DataFrame, by: tuple[str, ...] = ("metric", "size")) -> pd.DataFrame:
    """Median absolute error |ratio - 1| per group: defaults, in sample, held out."""
    cols = {
        "ratio_default": "median_abs_err_default",
        "ratio_in_sample": "median_abs_err_in_sample",
        "ratio_held_out": "median_abs_err_held_out",
    }
    err = lomo.assign(**{v: (lomo[k].astype(float) - 1).abs() for k, v in cols.items()})
    table = err.groupby(list(by))[list(cols.values())].median()
    table.insert(0, "n", err.groupby(list(by)).size())
    return table.reset_index()
