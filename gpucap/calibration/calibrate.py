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
The result reports itself (``report``, ``_repr_html_``), saves itself as JSON with provenance
(``save``), and loads back into the estimator (``Coefficients.from_file``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import html
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from gpucap.calibration.fitchecks import metric_changes, worse_flags
from gpucap.calibration.limits import LIMIT_STATS, Slo, Sweep, find_sweeps, predicted_limits
from gpucap.calibration.ranges import fit_bands
from gpucap.calibration.validate import METRICS, PreparedCase, measured_metrics, predict_prepared, prepare_cases
from gpucap.physics.coefficients import COEFFICIENT_INFO, Coefficients
from gpucap.version import __version__

DEFAULT_FREE = ("u_compute", "u_hbm", "overlap", "t_overhead_s")
# A run the model calls unstable (infinite TTFT) or cannot predict counts as this log error.
MISSING_PREDICTION_LOG_ERROR = float(np.log(10.0))
# Relative finite-difference step: the model has ceilings (prefill chunks) that a tiny step misses.
DIFF_STEP = 1e-3
ROBUST_SCALE = 0.3  # log error where the soft-L1 loss turns from squared to linear (~35%)
TARGETS = ("runs", "limits")
# A fitted coefficient this many times its start (or a start this many times it) is flagged.
DRIFT_FLAG = 5.0


@dataclass
class FitResult:
    """Fitted coefficients with their uncertainty, the residual statistics and the provenance."""

    coefficients: Coefficients
    start: Coefficients
    free: tuple[str, ...]
    stderr: dict[str, float]
    at_bound: dict[str, str]
    correlation: np.ndarray
    covariance: np.ndarray
    n_runs: int
    n_residuals: int
    cost_before: float  # the fit's loss (``loss``) at the start and at the solution: like with like
    cost_after: float
    residuals: np.ndarray
    success: bool
    message: str
    provenance: dict[str, Any] = field(default_factory=dict)
    loss: str = "soft_l1"
    sum_squares_before: float = float("nan")  # plain sum of squared residuals, start and solution
    sum_squares_after: float = float("nan")
    limits: pd.DataFrame = field(default_factory=pd.DataFrame)  # per sweep (``limit_table``)
    flags: tuple[str, ...] = ()  # coefficients out of range (``sanity_flags``), metrics made worse
    metric_errors: pd.DataFrame = field(default_factory=pd.DataFrame)  # per metric (fitchecks.metric_changes)
    # per metric, the fitted runs' measured / predicted quantiles (gpucap.calibration.ranges.fit_bands):
    # the range an estimate made with these coefficients carries
    ranges: dict[str, dict[str, float]] = field(default_factory=dict)

    # ---- for people ------------------------------------------------------------------------
    def report(self) -> str:
        """Fixed sections, as lmfit's fit_report: statistics, coefficients, correlations."""
        r = self.residuals
        lines = [
            "[[Fit statistics]]",
            f"    runs                 = {self.n_runs}",
            f"    residuals            = {self.n_residuals} (log predicted/measured)",
            f"    free coefficients    = {len(self.free)}",
            f"    {'loss (' + self.loss + ')':<21}= {self.cost_before:.4g} -> {self.cost_after:.4g}",
            f"    sum of squares       = {self.sum_squares_before:.4g} -> {self.sum_squares_after:.4g}",
            f"    rms log error        = {np.sqrt(np.mean(r**2)):.3f} (x{np.exp(np.sqrt(np.mean(r**2))):.2f})",
            f"    median |error|       = {np.median(np.abs(np.expm1(r))):.1%}",
            f"    converged            = {self.success} ({self.message})",
            "[[Coefficients]]",
        ]
        start = self.start.as_dict()
        for name, value in self.coefficients.as_dict().items():
            if name in self.free:
                se = self.stderr[name]
                pct = f"({se / abs(value):.1%})" if np.isfinite(se) and se < 100 * abs(value) else ""
                where = self.at_bound.get(name, "")
                bound = f"  at {where} bound" if where in ("lower", "upper") else f"  {where}" if where else ""
                lines.append(f"    {name:<14} = {value:.5g} +/- {se:.3g} {pct} (init = {start[name]:.5g}){bound}")
            else:
                lines.append(f"    {name:<14} = {value:.5g} (fixed)")
        pairs = [
            (self.free[i], self.free[j], self.correlation[i, j])
            for i in range(len(self.free))
            for j in range(i + 1, len(self.free))
            if abs(self.correlation[i, j]) >= 0.1
        ]
        if pairs:
            lines.append("[[Correlations]] (|C| >= 0.1)")
            for a, b, c in sorted(pairs, key=lambda p: -abs(p[2])):
                lines.append(f"    C({a}, {b}) = {c:+.3f}")
        if not self.limits.empty:
            lines.append(f"[[Limits]] ({self.provenance.get('slo', '')}; 95% interval of the fitted limit)")
            for _, r in self.limits.iterrows():
                lines.append(f"    {r['sweep']}")
                lines.append(
                    f"        measured {_fmt_limit(r['measured'], r['measured_status'])}, defaults "
                    f"{_fmt_limit(r['default'])}, fitted {_fmt_limit(r['fitted'])} "
                    f"[{_fmt_limit(r['fitted_low'])}, {_fmt_limit(r['fitted_high'])}] {r['unit']}"
                )
        if not self.metric_errors.empty:
            lines.append("[[Errors by metric]] (median |predicted / measured - 1| over the runs, start -> fit)")
            for r in self.metric_errors.itertuples():
                mark = "  WORSE" if r.worse else ""
                lines.append(
                    f"    {r.metric:<14} {r.before:6.1%} -> {r.after:6.1%}  (n {r.n}, noise of the change {r.noise:.1%}){mark}"
                )
        if self.flags:
            lines.append("[[Flags]] (the model is missing something for these runs)")
            lines.extend(f"    {f}" for f in self.flags)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.report()

    def __repr__(self) -> str:
        values = ", ".join(f"{n}={getattr(self.coefficients, n):.4g}+/-{self.stderr[n]:.2g}" for n in self.free)
        return f"FitResult({values}; {self.n_runs} runs)"

    def _repr_html_(self) -> str:
        rows = []
        for name, value in self.coefficients.as_dict().items():
            if name in self.free:
                se = self.stderr[name]
                note = self.at_bound.get(name, "")
                rel = f"{se / abs(value):.1%}" if value and np.isfinite(se) else ""
                rows.append(
                    f"<tr><td>{name}</td><td>{value:.5g}</td><td>{se:.3g}</td><td>{rel}</td>"
                    f"<td>{html.escape(note)}</td></tr>"
                )
            else:
                rows.append(f"<tr><td>{name}</td><td>{value:.5g}</td><td colspan=3>fixed</td></tr>")
        r = self.residuals
        stats = (
            f"<p>{self.n_runs} runs, {self.n_residuals} residuals; rms log error {np.sqrt(np.mean(r**2)):.3f}, "
            f"median |error| {np.median(np.abs(np.expm1(r))):.1%}; {html.escape(self.message)}</p>"
        )
        head = "<tr><th>coefficient</th><th>value</th><th>std error</th><th>relative</th><th>bound</th></tr>"
        out = f"<h4>Calibration</h4>{stats}<table>{head}{''.join(rows)}</table>"
        if not self.limits.empty:
            out += f"<h4>Limits ({html.escape(str(self.provenance.get('slo', '')))})</h4>" + self.limits.to_html(
                index=False, float_format=lambda v: f"{v:.3g}", na_rep=""
            )
        if not self.metric_errors.empty:
            out += "<h4>Errors by metric (median |predicted / measured - 1|, start and fit)</h4>"
            out += self.metric_errors.to_html(index=False, float_format=lambda v: f"{v:.1%}")
        if self.flags:
            items = "".join(f"<li>{html.escape(f)}</li>" for f in self.flags)
            out += f"<p><b>The model is missing something for these runs:</b></p><ul>{items}</ul>"
        return out

    # ---- for machines ----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        coeffs = {}
        for name, value in self.coefficients.as_dict().items():
            entry: dict[str, Any] = {"value": value, "free": name in self.free}
            if name in self.free:
                se = self.stderr[name]
                entry["stderr"] = se if np.isfinite(se) else None
                entry["at_bound"] = self.at_bound.get(name)
            coeffs[name] = entry
        return {
            "coefficients": coeffs,
            "correlation": {"names": list(self.free), "matrix": self.correlation.tolist()},
            "statistics": {
                "runs": self.n_runs,
                "residuals": self.n_residuals,
                "loss": self.loss,
                "cost_before": self.cost_before,
                "cost_after": self.cost_after,
                "sum_of_squares_before": self.sum_squares_before,
                "sum_of_squares_after": self.sum_squares_after,
                "rms_log_error": float(np.sqrt(np.mean(self.residuals**2))),
                "converged": self.success,
                "message": self.message,
            },
            "limits": json.loads(self.limits.to_json(orient="records")) if not self.limits.empty else [],
            "flags": list(self.flags),
            "metric_errors": json.loads(self.metric_errors.to_json(orient="records"))
            if not self.metric_errors.empty
            else [],
            "ranges": self.ranges,
            "provenance": self.provenance,
        }

    def save(self, path: str | Path, overwrite: bool = False) -> Path:
        """Write the JSON; an existing file is kept unless ``overwrite``."""
        path = Path(path)
        if path.exists() and not overwrite:
            raise ValueError(f"{path} exists; choose another name or pass overwrite=True (--overwrite)")
        try:
            path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        except OSError as exc:
            raise ValueError(f"cannot write {path} ({exc.strerror or exc})") from None
        return path

    def interval(
        self, case: PreparedCase, metric: str = "output_tok_s", level: float = 0.95
    ) -> tuple[float, float, float]:
        """(low, predicted, high) for one prepared case from the coefficients' covariance alone
        (delta method on log prediction: ``var = g^T cov g``, g = d log(pred) / d coefficient)."""
        from scipy.stats import norm

        col = f"{metric}_predicted"
        base = self.coefficients.as_dict()
        method = str(self.provenance.get("method", "closed-form"))
        mid = float(predict_prepared([case], self.coefficients, method)[col].iloc[0])
        g = np.zeros(len(self.free))
        for j, name in enumerate(self.free):
            info = COEFFICIENT_INFO[name]
            h = max(abs(base[name]) * DIFF_STEP, 1e-9)
            up = min(base[name] + h, info.upper)
            shifted = Coefficients(**{**base, name: up})
            val = float(predict_prepared([case], shifted, method)[col].iloc[0])
            g[j] = (np.log(val) - np.log(mid)) / (up - base[name]) if up != base[name] else 0.0
        sd = float(np.sqrt(max(g @ self.covariance @ g, 0.0)))
        z = float(norm.ppf(0.5 + level / 2))
        return mid * np.exp(-z * sd), mid, mid * np.exp(z * sd)


def _file_hash(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _log_residuals(pred: pd.DataFrame, measured: np.ndarray, metrics: tuple[str, ...]) -> np.ndarray:
    """The measured values' log ratios, run by run (row-major), as the fit's residual vector."""
    r = _log_ratios(pred, measured, metrics).to_numpy()
    return np.asarray(r[np.isfinite(r)], dtype=float)


def _log_ratios(pred: pd.DataFrame, measured: np.ndarray, metrics: tuple[str, ...]) -> pd.DataFrame:
    """log(predicted / measured) per run and metric; NaN where the run did not measure it."""
    p = pred[[f"{m}_predicted" for m in metrics]].to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.log(p / measured)
    r = np.where(np.isfinite(r), r, MISSING_PREDICTION_LOG_ERROR)
    r = np.where(np.isfinite(measured) & (measured > 0), r, np.nan)
    return pd.DataFrame(r, columns=list(metrics))


def _fmt_limit(value: float, status: str = "interpolated") -> str:
    if status == "not reached":
        return "beyond the highest load tested"
    if status == "already violated":
        return "below the lowest load tested"
    if value is None or not np.isfinite(value):
        return "beyond the grid" if value == np.inf else "n/a"
    return "0 (misses at the lowest load)" if value == 0 else f"{value:.3g}"


def robust_cost(r: np.ndarray, loss: str, f_scale: float = ROBUST_SCALE) -> float:
    """The cost ``scipy.optimize.least_squares`` minimizes, ``0.5 f^2 sum rho((r / f)^2)``, with
    its loss functions rho(z) (scipy documentation): linear z; soft_l1 2 (sqrt(1 + z) - 1);
    huber z if z <= 1 else 2 sqrt(z) - 1; cauchy ln(1 + z); arctan arctan(z)."""
    z = (np.asarray(r, dtype=float) / f_scale) ** 2
    rho = {
        "linear": lambda: z,
        "soft_l1": lambda: 2.0 * (np.sqrt(1.0 + z) - 1.0),
        "huber": lambda: np.where(z <= 1.0, z, 2.0 * np.sqrt(z) - 1.0),
        "cauchy": lambda: np.log1p(z),
        "arctan": lambda: np.arctan(z),
    }
    if loss not in rho:
        raise ValueError(f"loss must be one of {', '.join(rho)}, got {loss!r}")
    return 0.5 * f_scale**2 * float(np.sum(rho[loss]()))


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


def _limit_residuals(pred: np.ndarray, sweeps: list[Sweep], weights: np.ndarray) -> np.ndarray:
    measured = np.array([s.measured.limit for s in sweeps], dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.log(pred / measured)
    r = np.clip(
        np.nan_to_num(r, nan=MISSING_PREDICTION_LOG_ERROR), -MISSING_PREDICTION_LOG_ERROR, MISSING_PREDICTION_LOG_ERROR
    )
    return np.asarray(r * weights, dtype=float)


def limit_table(
    sweeps: list[Sweep],
    slo: Slo,
    default: Coefficients,
    fitted: Coefficients,
    free: tuple[str, ...] = (),
    covariance: np.ndarray | None = None,
    level: float = 0.95,
) -> pd.DataFrame:
    """Per sweep: the measured limit, the limit predicted with ``default`` and with ``fitted``
    coefficients, and the fitted limit's interval at ``level`` from the coefficients' covariance
    (delta method on log limit: ``var = g^T cov g``, g by forward differences)."""
    from scipy.stats import norm

    before = predicted_limits(sweeps, default, slo)
    after = predicted_limits(sweeps, fitted, slo)
    low, high = np.full(len(sweeps), np.nan), np.full(len(sweeps), np.nan)
    if free and covariance is not None and len(sweeps):
        base = fitted.as_dict()
        g = np.zeros((len(sweeps), len(free)))
        for j, name in enumerate(free):
            info = COEFFICIENT_INFO[name]
            h = max(abs(base[name]) * DIFF_STEP, 1e-9)
            up = min(base[name] + h, info.upper)
            if up == base[name]:
                up = base[name] - h
            shifted = predicted_limits(sweeps, Coefficients(**{**base, name: up}), slo)
            with np.errstate(divide="ignore", invalid="ignore"):
                g[:, j] = (np.log(shifted) - np.log(after)) / (up - base[name])
        cov = np.where(np.isfinite(covariance), covariance, 0.0)
        sd = np.sqrt(np.clip(np.einsum("ij,jk,ik->i", g, cov, g), 0.0, None))
        z = float(norm.ppf(0.5 + level / 2))
        ok = np.isfinite(sd) & np.isfinite(after) & (after > 0)
        low[ok], high[ok] = after[ok] * np.exp(-z * sd[ok]), after[ok] * np.exp(z * sd[ok])
    return pd.DataFrame(
        {
            "sweep": [s.label for s in sweeps],
            "unit": [s.unit for s in sweeps],
            "loads": [f"{min(s.loads):g}-{max(s.loads):g} ({len(s.loads)} levels)" for s in sweeps],
            "measured": [np.nan if s.measured.limit is None else s.measured.limit for s in sweeps],
            "measured_status": [s.measured.status for s in sweeps],
            "binding": [s.measured.binding for s in sweeps],
            "default": before,
            "fitted": after,
            "fitted_low": low,
            "fitted_high": high,
        }
    )


def _limit_sweeps(cases: pd.DataFrame, slo: Slo) -> tuple[list[Sweep], list[Sweep], list[str]]:
    """All sweeps, those with an interpolated measured limit (the fit's targets), and why others
    are not sweeps; raises when the limits cannot be targets."""
    given = [
        s
        for s in LIMIT_STATS
        if all(f"{m}_{s}_ms" in cases and cases[f"{m}_{s}_ms"].notna().any() for m in ("ttft", "tpot"))
    ]
    if slo.stat not in given:
        has = f"they give the {' and the '.join(given)}" if given else "they give neither a mean nor a median of both"
        raise ValueError(
            f"the runs report no {slo.stat} TTFT and TPOT ({has}); take the limits at a statistic they report"
        )
    sweeps, skipped = find_sweeps(cases, slo)
    if not sweeps:
        why = "; ".join(skipped) or "no closed-loop or Poisson runs"
        raise ValueError(
            f"no sweep to take a limit from ({why}): run the load test at several loads, or fit on the runs alone"
        )
    usable = [s for s in sweeps if s.measured.status == "interpolated"]
    if not usable:
        if all(s.measured.status == "already violated" for s in sweeps):
            raise ValueError(
                f"no run meets {slo}: every limit is below the lowest load tested; loosen the SLOs or test lower loads"
            )
        top = ", ".join(
            f"{s.label}: beyond {max(s.loads):g} {s.unit}" for s in sweeps if s.measured.status == "not reached"
        )
        raise ValueError(
            f"no sweep crosses {slo}: each limit is beyond the highest load tested, a lower bound only ({top}); "
            "fit on the runs alone, or test higher loads"
        )
    return sweeps, usable, skipped


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
    slo: Slo | None = None,
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
    """
    targets = tuple(targets)
    bad = [t for t in targets if t not in TARGETS]
    if bad or not targets:
        raise ValueError(f"targets must be one or more of {', '.join(TARGETS)}, got {', '.join(targets) or 'none'}")
    if "limits" in targets and slo is None:
        raise ValueError("limits as targets need the SLOs they are measured at (slo=Slo(ttft_s, tpot_s, stat))")
    free = tuple(free)
    unknown = [n for n in (*free, *(fixed or {})) if n not in COEFFICIENT_INFO]
    if unknown:
        raise ValueError(f"unknown coefficient(s) {', '.join(unknown)}; known: {', '.join(COEFFICIENT_INFO)}")
    free = tuple(n for n in free if n not in (fixed or {}))
    if not free:
        raise ValueError("nothing to fit: every coefficient is fixed")
    if start is None:
        engines = cases["engine"].dropna().astype(str).str.lower() if "engine" in cases else pd.Series(dtype=str)
        engine = engines.mode().iloc[0] if not engines.empty else "vllm"
        start = Coefficients.for_engine(
            {"nim": "trtllm"}.get(engine, engine if engine in ("vllm", "sglang", "trtllm") else "vllm")
        )
    start = dataclasses.replace(start, **(fixed or {}))

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
    sweeps: list[Sweep] = []
    usable: list[Sweep] = []
    skipped: list[str] = []
    if "limits" in targets:
        assert slo is not None
        sweeps, usable, skipped = _limit_sweeps(cases, slo)
    elif slo is not None:
        sweeps, skipped = find_sweeps(cases, slo)
    all_measured = measured_metrics(cases)[[f"{m}_measured" for m in metrics]].to_numpy()
    per_run = ((all_measured > 0) & np.isfinite(all_measured)).sum(axis=1)
    weights = np.sqrt([max(int(per_run[list(s.positions)].sum()), 1) for s in usable])
    n_res = int((np.isfinite(measured) & (measured > 0)).sum()) * ("runs" in targets) + len(usable)
    if n_res <= len(free):
        raise ValueError(f"{n_res} measured values cannot determine {len(free)} coefficients; fix some or add runs")

    base = start.as_dict()

    def coefs(x: np.ndarray) -> Coefficients:
        return Coefficients(**{**base, **dict(zip(free, map(float, x), strict=True))})

    def residuals(x: np.ndarray) -> np.ndarray:
        parts = []
        if "runs" in targets:
            parts.append(_log_residuals(predict_prepared(prepared, coefs(x), method), measured, metrics))
        if usable:
            assert slo is not None
            parts.append(_limit_residuals(predicted_limits(usable, coefs(x), slo), usable, weights))
        return np.concatenate(parts)

    lower = np.array([COEFFICIENT_INFO[n].lower for n in free])
    upper = np.array([COEFFICIENT_INFO[n].upper for n in free])
    x0 = np.clip([base[n] for n in free], lower, upper)
    r0 = residuals(x0)
    sol = least_squares(
        residuals,
        x0,
        bounds=(lower, upper),
        x_scale="jac",
        diff_step=DIFF_STEP,
        max_nfev=200,
        loss=loss,
        f_scale=ROBUST_SCALE,
    )
    m, n = sol.fun.size, len(free)
    s2 = float(sol.fun @ sol.fun) / max(m - n, 1)
    cov = np.linalg.pinv(sol.jac.T @ sol.jac) * s2
    se = np.sqrt(np.clip(np.diag(cov), 0, None))
    undetermined = np.linalg.norm(sol.jac, axis=0) < 1e-9
    se[undetermined] = np.inf
    with np.errstate(invalid="ignore", divide="ignore"):
        corr = cov / np.outer(se, se)
    corr = np.nan_to_num(corr)
    span = upper - lower
    at_bound = {}
    for j, name in enumerate(free):
        if undetermined[j]:
            at_bound[name] = "undetermined (changes no prediction of these runs)"
        elif sol.x[j] - lower[j] <= 1e-4 * span[j]:
            at_bound[name] = "lower"
        elif upper[j] - sol.x[j] <= 1e-4 * span[j]:
            at_bound[name] = "upper"
    provenance = {
        "gpucap_version": __version__,
        "fitted_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "inputs": [{"path": str(p), "sha256": _file_hash(p)} for p in (sources or []) if Path(p).is_file()],
        "rows_used": len(prepared),
        "engines": sorted(cases["engine"].dropna().astype(str).unique()) if "engine" in cases else [],
        "engine_versions": sorted(cases["engine_version"].dropna().astype(str).unique())
        if "engine_version" in cases
        else [],
        "rows_skipped": {str(cases.iloc[pos].get("case_id", pos)): why for pos, why in errors.items()},
        "metrics": list(metrics) if "runs" in targets else [],
        "targets": list(targets),
        "limits_fitted": len(usable),
        "slo": str(slo) if slo is not None else None,
        "not_sweeps": skipped,
        "method": method,
        "objective": f"{loss} loss of log(predicted / measured) over "
        + " and ".join(
            {"runs": "runs and metrics", "limits": "sweep limits (weight sqrt(runs' residuals))"}[t] for t in targets
        ),
    }
    fitted = coefs(sol.x)
    after = _log_ratios(predict_prepared(prepared, fitted, method), measured, metrics)
    changes = metric_changes(_log_ratios(predict_prepared(prepared, start, method), measured, metrics), after)
    limits = pd.DataFrame()
    if slo is not None and sweeps:
        limits = limit_table(sweeps, slo, start, fitted, free, cov)
    return FitResult(
        coefficients=fitted,
        start=start,
        free=free,
        stderr=dict(zip(free, map(float, se), strict=True)),
        at_bound=at_bound,
        correlation=corr,
        covariance=cov,
        n_runs=len(prepared),
        n_residuals=m,
        cost_before=robust_cost(r0, loss),
        cost_after=float(sol.cost),
        residuals=sol.fun,
        success=bool(sol.success),
        message=str(sol.message),
        provenance=provenance,
        loss=loss,
        sum_squares_before=float(r0 @ r0),
        sum_squares_after=float(sol.fun @ sol.fun),
        limits=limits,
        flags=sanity_flags(start, fitted, free, at_bound) + worse_flags(changes),
        metric_errors=changes,
        ranges=fit_bands(-after),
    )
