"""Intervals that include the model's own error: from out-of-sample residuals, with their coverage.

The covariance of a fit says how well the runs pin the coefficients; it says nothing of what the
model lacks. A fit to a 70B sweep had a fitted limit of [7.69, 8.67] requests/s by the covariance
and measured 6.38. The honest spread of a prediction is how far the model misses a run it was not
fitted to. ``held_out`` refits ``calibrate`` once per group (``by``: each sweep, or each model),
without that group, and predicts the group's runs and its sweeps' SLO-limited loads:

    r_run = log(measured / predicted without its group)        per run and metric
    r_lim = log(measured limit / predicted limit without it)   per sweep

The bands of every estimate made with the fitted coefficients (``FitResult.ranges``) are then the
80% quantiles of ``r_run`` instead of the in-sample residuals, and each sweep's fitted limit gets
the interval ``fitted x exp(q_10(r_lim)), fitted x exp(q_90(r_lim))``. Its coverage is measured the
same way it will be used, on data the interval did not see (the jackknife+ of Barber, Candes,
Ramdas and Tibshirani, "Predictive inference with the jackknife+", Ann. Statist. 49(1), 2021): for
each sweep i, the interval around its held-out prediction from the other sweeps' ``r_lim``; the
share of sweeps whose measured limit lies in it is the coverage reported beside the level.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np
import pandas as pd

from gpucap.calibration.limits import Sweep, predicted_limits, sweep_labels
from gpucap.calibration.ranges import LEVEL, band_quantiles
from gpucap.config import SLO
from gpucap.parallel import Runner
from gpucap.physics.coefficients import Coefficients

HELD_OUT_BY = ("sweep", "model")
MIN_GROUPS = 3  # fewer groups give no out-of-sample spread worth the name


@dataclass(frozen=True)
class HeldOut:
    """Out-of-sample residuals of a fit: per run and metric, ``log(measured / predicted)`` by a
    fit without the run's group (NaN where not measured or not held out); per sweep, the same for
    its limit; and why groups were not held out."""

    by: str
    groups: int
    run_groups: np.ndarray  # each row's group label
    run_log_ratios: pd.DataFrame
    limit_log_ratios: np.ndarray
    limit_groups: np.ndarray  # each sweep's group (that of its first run)
    notes: tuple[str, ...] = ()


def group_labels(cases: pd.DataFrame, by: str) -> list[str]:
    """Each row's group: its sweep (``sweep_labels``) or its model."""
    if by not in HELD_OUT_BY:
        raise ValueError(f"held out by {by!r}: use one of {', '.join(HELD_OUT_BY)}")
    return sweep_labels(cases) if by == "sweep" else cases["model"].astype(str).tolist()


def _refit_or_why(refit: Callable[[pd.DataFrame], Coefficients], rest: pd.DataFrame) -> Coefficients | str:
    """``refit(rest)``, or why it cannot be fitted."""
    try:
        return refit(rest)
    except ValueError as exc:
        return str(exc)


def held_out(
    cases: pd.DataFrame,
    by: str,
    refit: Callable[[pd.DataFrame], Coefficients],
    predict_log_ratios: Callable[[Coefficients, np.ndarray], pd.DataFrame],
    sweeps: list[Sweep],
    slo: SLO | None,
    run: Runner | None = None,
) -> HeldOut:
    """Refit without each group of ``cases`` (``refit``: the cases to fit -> coefficients; one
    task per group on ``run``, ``gpucap.parallel``) and predict it (``predict_log_ratios``:
    coefficients and a row mask -> ``log(predicted / measured)`` of every row, metrics as
    columns). ``sweeps`` (with ``slo``): the sweeps whose limits are compared, each held out
    with the group its first run belongs to."""
    cases = cases.reset_index(drop=True)
    labels = np.array(group_labels(cases, by))
    groups = sorted(set(labels))
    notes: list[str] = []
    runs: pd.DataFrame | None = None
    lim = np.full(len(sweeps), np.nan)
    lim_groups = np.array([labels[s.positions[0]] for s in sweeps], dtype=object)
    if len(groups) < MIN_GROUPS:
        notes.append(
            f"held out by {by}: {len(groups)} {by}(s); out-of-sample intervals need {MIN_GROUPS} or more "
            "(the covariance's intervals stand)"
        )
        return HeldOut(by, len(groups), labels, pd.DataFrame(), lim, lim_groups, tuple(notes))
    fits = (run or Runner()).map(
        partial(_refit_or_why, refit), [cases[labels != g] for g in groups], desc=f"refits without each {by}",
        label=lambda k, _: f"the fit without {by} {groups[k][:60]}",
    )  # fmt: skip
    for g, coef in zip(groups, fits, strict=True):
        held = labels == g
        if isinstance(coef, str):
            notes.append(f"held out by {by}: {g[:60]}: the other runs cannot be fitted ({coef})")
            continue
        r = predict_log_ratios(coef, held)
        if runs is None:
            runs = pd.DataFrame(np.nan, index=range(len(cases)), columns=r.columns)
        runs.loc[held] = -r.loc[held].to_numpy()
        mine = [k for k, s in enumerate(sweeps) if held[s.positions[0]]]
        if mine and slo is not None:
            pred = predicted_limits([sweeps[k] for k in mine], coef, slo)
            for k, p in zip(mine, pred, strict=True):
                m = sweeps[k].measured.limit
                if m is not None and np.isfinite(p) and p > 0 and m > 0:
                    lim[k] = float(np.log(m / p))
    return HeldOut(by, len(groups), labels, runs if runs is not None else pd.DataFrame(), lim, lim_groups, tuple(notes))


def limit_intervals(fitted: np.ndarray, h: HeldOut, level: float = LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """Each sweep's fitted limit times the ``level`` quantile factors of the held-out limit
    residuals (NaN without three or more of them)."""
    r = h.limit_log_ratios[np.isfinite(h.limit_log_ratios)]
    if r.size < MIN_GROUPS:
        nan = np.full(len(fitted), np.nan)
        return nan, nan
    f_low, f_high = band_quantiles(r, level)
    ok = np.isfinite(fitted) & (fitted > 0)  # a limit of 0 or beyond the grid has no interval
    return np.where(ok, fitted * f_low, np.nan), np.where(ok, fitted * f_high, np.nan)


def limit_coverage(h: HeldOut, level: float = LEVEL) -> tuple[float, int]:
    """(share of sweeps whose measured limit lies in the ``level`` interval around its held-out
    prediction built from the other groups' sweeps' residuals, sweeps counted); NaN where fewer
    than MIN_GROUPS + 1 finite residuals, or none from another group, are left."""
    r = h.limit_log_ratios
    ok = np.isfinite(r)
    if ok.sum() < MIN_GROUPS + 1:
        return float("nan"), int(ok.sum())
    hits, counted = 0, 0
    for i in np.flatnonzero(ok):
        others = r[ok & (h.limit_groups != h.limit_groups[i])]
        if others.size < MIN_GROUPS:
            continue
        f_low, f_high = band_quantiles(others, level)
        hits += int(np.log(f_low) <= r[i] <= np.log(f_high))
        counted += 1
    return (hits / counted if counted else float("nan")), counted


def run_coverage(h: HeldOut, level: float = LEVEL) -> dict[str, tuple[float, int]]:
    """Per metric: (share of runs whose measured value lies in the ``level`` band of the other
    groups' held-out residuals, runs counted); a metric whose runs span fewer than MIN_GROUPS + 1
    groups is left out."""
    out: dict[str, tuple[float, int]] = {}
    if h.run_log_ratios.empty:
        return out
    for metric in h.run_log_ratios.columns:
        r = h.run_log_ratios[metric].to_numpy(float)
        ok = np.isfinite(r)
        if len(set(h.run_groups[ok])) < MIN_GROUPS + 1:
            continue
        hits = 0
        for i in np.flatnonzero(ok):
            f_low, f_high = band_quantiles(r[ok & (h.run_groups != h.run_groups[i])], level)
            hits += int(np.log(f_low) <= r[i] <= np.log(f_high))
        out[str(metric)] = (hits / int(ok.sum()), int(ok.sum()))
    return out
