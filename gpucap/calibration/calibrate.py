"""Fit the efficiency coefficients to measured runs (DESIGN.md section 6).

``calibrate`` minimizes, with ``scipy.optimize.least_squares`` inside each coefficient's physical
bounds, the sum of squared log-ratio residuals

    r = log(predicted / measured)

over every run and every measured metric (output tokens/s, TTFT, TPOT), and, with
``targets=("runs", "limits")``, over every sweep's SLO-limited concurrency or rate
(``gpucap.calibration.limits``): ``r = sqrt(n) log(predicted limit / measured limit)``, n the sweep's
per-run residuals, so one limit weighs as much as its sweep's runs. Standard errors come from
the Jacobian at the solution, ``cov = inv(J^T J) x s^2`` with ``s^2 = sum(r^2) / (m - n)`` (as
lmfit does), so they are the uncertainty of the coefficients given the scatter of this data.
The result (``gpucap.calibration.fitresult.FitResult``) reports itself, saves itself as JSON with
provenance, and loads back into the estimator (``Coefficients.from_file``).

``calibrate`` runs in steps: the arguments checked and the start chosen; the cases prepared and
their measured metrics (``FitCases``); the sweeps whose limits are targets (``FitTargets``,
``gpucap.calibration.fitlimits``); the least-squares problem (residuals:
``gpucap.calibration.fitresiduals``); the fit's checks (``gpucap.calibration.uncertainty``, ``gpucap.calibration.fitchecks``);
and the result.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpucap.calibration.cases import PreparedCase
from gpucap.calibration.fitchecks import metric_changes, sanity_flags, worse_flags
from gpucap.calibration.fitlimits import limit_table, limit_targets
from gpucap.calibration.fitresiduals import (
    limit_residuals,
    log_ratios,
    log_residuals,
    solver_fields,
)
from gpucap.calibration.fitresult import FitResult
from gpucap.calibration.heldout import (
    HELD_OUT_BY,
    MIN_GROUPS,
    HeldOut,
    held_out,
    limit_coverage,
    limit_intervals,
    run_coverage,
)
from gpucap.calibration.limits import Sweep, find_sweeps, predicted_limits
from gpucap.calibration.physical import (
    Ranges,
    cases_device,
    driving_mode,
    missing_mechanism_flags,
    outside_ranges,
    physical_bounds,
    read_physical_ranges,
)
from gpucap.calibration.ranges import LEVEL, fit_bands
from gpucap.calibration.uncertainty import (
    NEAR_APART,
    OtherMinimum,
    apart_scale,
    coefficient_bounds,
    fit_least_squares,
    uncertainty,
)
from gpucap.calibration.validate import METRICS, measured_metrics, predict_prepared, prepare_cases
from gpucap.config import SLO
from gpucap.parallel import Runner, as_runner, progress_bar
from gpucap.physics.coefficients import COEFFICIENT_INFO, Coefficients
from gpucap.version import __version__

DEFAULT_FREE = ("u_compute", "u_hbm", "overlap", "t_overhead_s")
TARGETS = ("runs", "limits")


@dataclass(frozen=True)
class FitCases:
    """The runs a fit uses: the prepared cases (in row order), {row position: reason} for the rows
    left out, the metrics some run measured, and the measured values (runs x metrics)."""

    prepared: list[PreparedCase]
    errors: dict[int, str]
    metrics: tuple[str, ...]
    measured: np.ndarray


@dataclass(frozen=True)
class FitTargets:
    """The sweeps of a fit: every sweep found (for the limits table), those whose limit is a
    target (``usable``) with their weights, and why other runs make no sweep."""

    sweeps: list[Sweep]
    usable: list[Sweep]
    weights: np.ndarray
    not_sweeps: list[str]


def _file_hash(path: str | Path) -> str:
    """The SHA-256 of a file's bytes, in hex, read in 1 MiB pieces (memory stays flat whatever
    the file's size)."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as f:
        for piece in iter(lambda: f.read(1 << 20), b""):
            digest.update(piece)
    return digest.hexdigest()


def _checked_arguments(
    targets: tuple[str, ...], slo: SLO | None, free: tuple[str, ...], fixed: dict[str, float] | None
) -> tuple[str, ...]:
    """The free coefficients less the fixed ones; raises on unknown targets or coefficients, limits
    without SLOs, or nothing left to fit."""
    bad = [t for t in targets if t not in TARGETS]
    if bad or not targets:
        raise ValueError(f"targets must be one or more of {', '.join(TARGETS)}, got {', '.join(targets) or 'none'}")
    if "limits" in targets and slo is None:
        raise ValueError(
            "limits as targets need the SLOs they are measured at (slo=gpucap.SLO(ttft_s, tpot_s, statistic))"
        )
    unknown = [n for n in (*free, *(fixed or {})) if n not in COEFFICIENT_INFO]
    if unknown:
        raise ValueError(f"unknown coefficient(s) {', '.join(unknown)}; known: {', '.join(COEFFICIENT_INFO)}")
    free = tuple(n for n in free if n not in (fixed or {}))
    if not free:
        raise ValueError("nothing to fit: every coefficient is fixed")
    return free


def _default_start(cases: pd.DataFrame) -> Coefficients:
    """The engine defaults of the most common engine in ``cases`` (vLLM's when none is modelled)."""
    engines = cases["engine"].dropna().astype(str).str.lower() if "engine" in cases else pd.Series(dtype=str)
    engine = engines.mode().iloc[0] if not engines.empty else "vllm"
    return Coefficients.for_engine(
        {"nim": "trtllm"}.get(engine, engine if engine in ("vllm", "sglang", "trtllm") else "vllm")
    )


def _fit_cases(cases: pd.DataFrame, metrics: tuple[str, ...]) -> FitCases:
    """The rows prepared for prediction and their measured ``metrics``, less the metrics no run
    measured; raises when no row can be predicted or no metric was measured."""
    prepared, errors = prepare_cases(cases)
    ok = [pos for pos in range(len(cases)) if pos not in errors]
    table = measured_metrics(cases.iloc[ok])
    given = (table > 0) & np.isfinite(table)
    metrics = tuple(m for m in metrics if given[f"{m}_measured"].any())  # never fit what nobody measured
    measured = table[[f"{m}_measured" for m in metrics]].to_numpy()
    if not prepared:
        reasons = sorted(set(errors.values()))
        more = f" (and {len(reasons) - 2} more reasons)" if len(reasons) > 2 else ""
        raise ValueError(f"no run can be predicted: {'; '.join(reasons[:2])}{more}")
    if not metrics:
        raise ValueError("no run measured throughput, TTFT or TPOT; check the measured columns")
    return FitCases(prepared, errors, metrics, measured)


def _fit_targets(
    cases: pd.DataFrame, targets: tuple[str, ...], slo: SLO | None, metrics: tuple[str, ...]
) -> FitTargets:
    """The sweeps at ``slo`` and, with limits among the targets, those whose limits are fitted,
    each weighted by the square root of its runs' measured values (at least 1)."""
    sweeps: list[Sweep] = []
    usable: list[Sweep] = []
    skipped: list[str] = []
    if "limits" in targets:
        assert slo is not None
        sweeps, usable, skipped = limit_targets(cases, slo)
    elif slo is not None:
        sweeps, skipped = find_sweeps(cases, slo)
    all_measured = measured_metrics(cases)[[f"{m}_measured" for m in metrics]].to_numpy()
    per_run = ((all_measured > 0) & np.isfinite(all_measured)).sum(axis=1)
    weights = np.sqrt([max(int(per_run[list(s.positions)].sum()), 1) for s in usable])
    return FitTargets(sweeps, usable, weights, skipped)


def _with_values(start: Coefficients, free: tuple[str, ...], x: np.ndarray) -> Coefficients:
    """``start`` with the ``free`` coefficients set to ``x``."""
    return Coefficients(**{**start.as_dict(), **dict(zip(free, map(float, x), strict=True))})


def _residual_function(
    data: FitCases,
    sweeps: FitTargets,
    start: Coefficients,
    free: tuple[str, ...],
    targets: tuple[str, ...],
    slo: SLO | None,
    method: str,
    run: Runner | None = None,
    bar: Any = None,
) -> Callable[[np.ndarray], np.ndarray]:
    """The residual vector as a function of the free coefficients' values: the runs' log ratios
    (with "runs" among the targets; simulated runs on ``run``), then the weighted limits' log
    ratios. ``bar``: a progress bar counting the evaluations."""

    def residuals(x: np.ndarray) -> np.ndarray:
        """The fit's residuals at free-coefficient values ``x``."""
        coef = _with_values(start, free, x)
        parts = []
        if bar is not None:
            bar.update(1)
        if "runs" in targets:
            pred = predict_prepared(data.prepared, coef, method, run)
            parts.append(log_residuals(pred, data.measured, data.metrics))
        if sweeps.usable:
            assert slo is not None
            parts.append(limit_residuals(predicted_limits(sweeps.usable, coef, slo), sweeps.usable, sweeps.weights))
        return np.concatenate(parts)

    return residuals


def _other_minima(
    others: list[OtherMinimum], free: tuple[str, ...], best: Any, bounds: tuple[np.ndarray, np.ndarray]
) -> tuple[str, ...]:
    """One flag naming the coefficients on which the minima as good as the fit's (from other
    starts, ``fit_least_squares``) disagree, with the span of their values."""
    if not others:
        return ()
    xs = np.array([best.x, *(o.x for o in others)])
    lo, hi = xs.min(axis=0), xs.max(axis=0)
    scale = apart_scale(best.x, bounds)
    spans = [f"{n} {lo[j]:.3g} to {hi[j]:.3g}" for j, n in enumerate(free) if hi[j] - lo[j] > NEAR_APART * scale[j]]
    worst = max(o.cost for o in others)
    return (
        f"another minimum: fits from other starts as good as this one (cost {float(best.cost):.4g} to {worst:.4g}) "
        f"put {', '.join(spans)}: these runs do not tell them apart",
    )


def _held_out(
    cases: pd.DataFrame,
    data: FitCases,
    sweeps: FitTargets,
    by: str,
    slo: SLO | None,
    method: str,
    refit: Callable[[pd.DataFrame], Coefficients],
    run: Runner,
) -> HeldOut:
    """``gpucap.calibration.heldout.held_out`` of this fit: its rows regrouped by ``by``, each
    group predicted (only the rows ``calibrate`` could prepare) by ``refit`` on the rest."""
    ok = np.array([p for p in range(len(cases)) if p not in data.errors], dtype=int)

    def predict(coef: Coefficients, held: np.ndarray) -> pd.DataFrame:
        pick = np.flatnonzero(held[ok])
        out = pd.DataFrame(np.nan, index=range(len(cases)), columns=list(data.metrics))
        if pick.size:
            pred = predict_prepared([data.prepared[k] for k in pick], coef, method, run)
            out.iloc[ok[pick]] = log_ratios(pred, data.measured[pick], data.metrics).to_numpy()
        return out

    return held_out(cases.reset_index(drop=True), by, refit, predict, sweeps.sweeps, slo, run)


def held_summary(h: HeldOut) -> dict[str, Any]:
    """What the provenance keeps of the held-out fits: by what, how many groups, the coverage of
    the 80% bands per metric and of the limits' intervals, and the notes."""
    cover, n = limit_coverage(h)
    notes = list(h.notes)
    if not np.isfinite(cover) and h.groups >= MIN_GROUPS:
        notes.append(
            f"limit coverage: {n} sweep(s) with a measured and a held-out limit; {MIN_GROUPS + 1} or more needed"
        )
    return {
        "by": h.by,
        "groups": h.groups,
        "level": LEVEL,
        "run_coverage": {m: {"share": c, "runs": k} for m, (c, k) in run_coverage(h).items()},
        "limit_coverage": None if not np.isfinite(cover) else {"share": cover, "sweeps": n},
        "notes": notes,
    }


def _provenance(
    cases: pd.DataFrame,
    data: FitCases,
    sweeps: FitTargets,
    *,
    targets: tuple[str, ...],
    slo: SLO | None,
    method: str,
    loss: str,
    sources: list[str] | None,
) -> dict[str, Any]:
    """Where the fit came from: version, time, input files and their hashes, rows used and
    skipped, engines, metrics, targets, SLOs, method and objective."""
    return {
        "gpucap_version": __version__,
        "fitted_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "inputs": [{"path": str(p), "sha256": _file_hash(p)} for p in (sources or []) if Path(p).is_file()],
        "rows_used": len(data.prepared),
        "engines": sorted(cases["engine"].dropna().astype(str).unique()) if "engine" in cases else [],
        "engine_versions": sorted(cases["engine_version"].dropna().astype(str).unique())
        if "engine_version" in cases
        else [],
        "rows_skipped": {str(cases.iloc[pos].get("case_id", pos)): why for pos, why in data.errors.items()},
        "metrics": list(data.metrics) if "runs" in targets else [],
        "targets": list(targets),
        "limits_fitted": len(sweeps.usable),
        "slo": str(slo) if slo is not None else None,
        "not_sweeps": sweeps.not_sweeps,
        "method": method,
        "objective": f"{loss} loss of log(predicted / measured) over "
        + " and ".join(
            {"runs": "runs and metrics", "limits": "sweep limits (weight sqrt(runs' residuals))"}[t] for t in targets
        ),
    }


def calibrate(
    cases: pd.DataFrame,
    *,
    start: Coefficients | None = None,
    free: tuple[str, ...] | list[str] = DEFAULT_FREE,
    fixed: dict[str, float] | None = None,
    metrics: tuple[str, ...] = METRICS,
    loss: str = "soft_l1",
    sources: list[str] | None = None,
    method: str = "closed-form",
    targets: tuple[str, ...] | list[str] = ("runs",),
    slo: SLO | None = None,
    within_ranges: bool = False,
    ranges: str | Path | Ranges | None = None,
    compare_within: bool = True,
    intervals: str = "covariance",
    starts: int | None = None,
    n_jobs: int | Runner | None = None,
    dask: Any = None,
    progress: bool = False,
) -> FitResult:
    """Fit ``free`` coefficients to the measured ``cases`` (the schema of measured-public.csv,
    or ``cases_from_runs`` of load-test results); the others stay at ``start`` or ``fixed``.

    ``start`` defaults to the engine defaults of the most common engine in ``cases``. Rows that
    cannot be predicted are left out and counted in ``provenance["rows_skipped"]``.
    ``loss="soft_l1"`` (default) keeps a few runs the model cannot describe from dragging every
    coefficient (errors beyond ~30% count linearly, not squared); ``"linear"`` is plain least
    squares. A coefficient that does not change any prediction (overlap on runs without
    communication) is reported as undetermined, with an infinite standard error.
    ``method``: how each run is predicted (``gpucap.calibration.validate.predict_prepared``):
    ``closed-form`` (the default: fast, for many runs; a fixed-length closed-loop sweep runs in
    waves, ``gpucap.physics.waves``) or ``simulate`` (each benchmark run step by step, as it ran: seconds
    per evaluation for a sweep of a few small runs, minutes for large ones).
    ``targets``: ``"runs"`` (every run's metrics) and/or ``"limits"`` (every sweep's measured
    SLO-limited concurrency or rate at ``slo``, module docstring; sweeps whose limit lies outside
    the loads tested are shown, not fitted). With ``slo`` the result's ``limits`` table shows
    every sweep's measured limit, the default and the fitted prediction, whatever the targets.
    A metric no run measured is not fitted and not listed as fitted; the fit flags coefficients
    it pushes to a bound or more than DRIFT_FLAG times from their start (``flags``).
    ``ranges``: each coefficient's physical range per device class (``gpucap.calibration.physical``;
    a CSV path, a mapping, or None for ``data/coefficient-ranges.csv``). A free coefficient fitted
    outside its range is flagged "missing mechanism" with the load mode driving it, and the fit is
    repeated within the ranges (``FitResult.bounded``; not with ``compare_within=False``, which
    saves that second fit where only the coefficients are wanted). ``within_ranges=True``: fit
    within the ranges only.
    ``intervals``: ``covariance`` (the coefficients' uncertainty alone), or ``sweep`` / ``model``:
    the fit repeated once per sweep or model without it, and the bands of every estimate
    (``ranges``) and the limits' 80% intervals taken from how far those fits miss what they left
    out, with the coverage of both measured on held-out data (``gpucap.calibration.heldout``).
    ``starts``: how many starts the fit is made from (``gpucap.calibration.uncertainty.fit_least_squares``:
    the engine defaults, then points spread over the coefficients' bounds); the lowest minimum is
    kept, and another as good with other values is flagged ("another minimum"): the runs do not
    tell those coefficients apart. Default 3 with the closed forms, 1 by simulation (each start
    costs a fit); the held-out refits make one.
    ``n_jobs`` / ``dask``: where simulated runs and the held-out refits run (``gpucap.parallel``:
    None every core, 1 serially, or a Dask cluster); ``progress``: a bar counting evaluations.
    """
    targets = tuple(targets)
    free = _checked_arguments(targets, slo, tuple(free), fixed)
    if intervals not in ("covariance", *HELD_OUT_BY):
        raise ValueError(f"intervals {intervals!r}: use covariance, {' or '.join(HELD_OUT_BY)}")
    if starts is None:
        starts = 3 if method == "closed-form" else 1
    if isinstance(starts, bool) or not isinstance(starts, int) or starts < 1:
        raise ValueError(f"starts must be a whole number >= 1, got {starts!r}")
    if start is None:
        start = _default_start(cases)
    start = dataclasses.replace(start, **(fixed or {}))

    data = _fit_cases(cases, metrics)
    sweeps = _fit_targets(cases, targets, slo, data.metrics)
    measured = data.measured
    n_res = int((np.isfinite(measured) & (measured > 0)).sum()) * ("runs" in targets) + len(sweeps.usable)
    if n_res <= len(free):
        raise ValueError(f"{n_res} measured values cannot determine {len(free)} coefficients; fix some or add runs")

    table = ranges if isinstance(ranges, Mapping) else read_physical_ranges(ranges)
    device = cases_device(c.hw for c in data.prepared)
    bounds = coefficient_bounds(free)
    if within_ranges:
        physical = physical_bounds(free, device, table)
        bounds = (np.maximum(bounds[0], physical[0]), np.minimum(bounds[1], physical[1]))
    run = dataclasses.replace(as_runner(n_jobs, dask), progress=False)
    with progress_bar(None, "fit", progress, unit="evaluation") as bar:
        residuals = _residual_function(data, sweeps, start, free, targets, slo, method, run, bar)
        sol, r0, others = fit_least_squares(residuals, start, free, loss, bounds, starts)
    fit = uncertainty(sol, free, bounds)
    provenance = _provenance(cases, data, sweeps, targets=targets, slo=slo, method=method, loss=loss, sources=sources)

    fitted = _with_values(start, free, sol.x)
    after = log_ratios(predict_prepared(data.prepared, fitted, method, run), measured, data.metrics)
    before = log_ratios(predict_prepared(data.prepared, start, method, run), measured, data.metrics)
    changes = metric_changes(before, after)
    limits = pd.DataFrame()
    if slo is not None and sweeps.sweeps:
        limits = limit_table(sweeps.sweeps, slo, start, fitted, free, fit.covariance)
    provenance["device"] = device
    provenance["within_ranges"] = within_ranges
    bands = fit_bands(-after)
    if intervals != "covariance":
        # each refit starts from this fit's coefficients: the same minimum less one group's pull
        held = _held_out(cases, data, sweeps, intervals, slo, method, lambda rest: calibrate(
            rest, start=fitted, free=free, fixed=fixed, metrics=metrics, loss=loss, method=method, targets=targets,
            slo=slo, within_ranges=within_ranges, ranges=table, compare_within=False, starts=1, n_jobs=1,
        ).coefficients, run)  # fmt: skip
        provenance["held_out"] = held_summary(held)
        if not held.run_log_ratios.empty:
            bands = fit_bands(held.run_log_ratios)
        if not limits.empty:
            low, high = limit_intervals(limits["fitted"].to_numpy(float), held)
            limits = limits.assign(held_out_low=low, held_out_high=high)
    flags = (
        sanity_flags(start, fitted, free, fit.at_bound)
        + worse_flags(changes)
        + _other_minima(others, free, sol, bounds)
    )
    outside = {} if within_ranges else outside_ranges(fitted, free, device, table)
    bounded = None
    if outside and not compare_within:
        flags = missing_mechanism_flags(fitted, outside, None) + flags
    elif outside:
        bounded = calibrate(
            cases, start=start, free=free, fixed=fixed, metrics=metrics, loss=loss, sources=sources,
            method=method, targets=targets, slo=slo, within_ranges=True, ranges=table, starts=starts, n_jobs=run,
        )  # fmt: skip
        within = log_ratios(predict_prepared(data.prepared, bounded.coefficients, method, run), measured, data.metrics)
        driver = driving_mode([c.mode for c in data.prepared], after, within)
        flags = missing_mechanism_flags(fitted, outside, driver) + flags
    return FitResult(
        coefficients=fitted,
        start=start,
        free=free,
        stderr=dict(zip(free, map(float, fit.stderr), strict=True)),
        at_bound=fit.at_bound,
        correlation=fit.correlation,
        covariance=fit.covariance,
        n_runs=len(data.prepared),
        residuals=sol.fun,
        provenance=provenance,
        **solver_fields(sol, r0, loss),
        limits=limits,
        flags=flags,
        metric_errors=changes,
        ranges=bands,
        bounded=bounded,
    )
