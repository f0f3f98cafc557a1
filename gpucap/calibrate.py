"""Fit the efficiency coefficients to measured runs (DESIGN.md section 6).

``calibrate`` minimizes, with ``scipy.optimize.least_squares`` inside each coefficient's physical
bounds, the sum of squared log-ratio residuals

    r = log(predicted / measured)

over every run and every measured metric (output tokens/s, TTFT, TPOT). Standard errors come from
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

from . import __version__
from .engine import COEFFICIENT_INFO, Coefficients
from .validate import METRICS, PreparedCase, measured_metrics, predict_prepared, prepare_cases

DEFAULT_FREE = ("u_compute", "u_hbm", "overlap", "t_overhead_s")
# A run the model calls unstable (infinite TTFT) or cannot predict counts as this log error.
MISSING_PREDICTION_LOG_ERROR = float(np.log(10.0))
# Relative finite-difference step: the model has ceilings (prefill chunks) that a tiny step misses.
DIFF_STEP = 1e-3
ROBUST_SCALE = 0.3  # log error where the soft-L1 loss turns from squared to linear (~35%)


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
    cost_before: float
    cost_after: float
    residuals: np.ndarray
    success: bool
    message: str
    provenance: dict[str, Any] = field(default_factory=dict)

    # ---- for people ------------------------------------------------------------------------
    def report(self) -> str:
        """Fixed sections, as lmfit's fit_report: statistics, coefficients, correlations."""
        r = self.residuals
        lines = [
            "[[Fit statistics]]",
            f"    runs                 = {self.n_runs}",
            f"    residuals            = {self.n_residuals} (log predicted/measured)",
            f"    free coefficients    = {len(self.free)}",
            f"    sum of squares       = {2 * self.cost_before:.4g} -> {2 * self.cost_after:.4g}",
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
                rows.append(
                    f"<tr><td>{name}</td><td>{value:.5g}</td><td>{se:.3g}</td><td>{se / abs(value):.1%}</td><td>{note}</td></tr>"
                    if value
                    else ""
                )
            else:
                rows.append(f"<tr><td>{name}</td><td>{value:.5g}</td><td colspan=3>fixed</td></tr>")
        r = self.residuals
        stats = (
            f"<p>{self.n_runs} runs, {self.n_residuals} residuals; rms log error {np.sqrt(np.mean(r**2)):.3f}, "
            f"median |error| {np.median(np.abs(np.expm1(r))):.1%}; {html.escape(self.message)}</p>"
        )
        head = "<tr><th>coefficient</th><th>value</th><th>std error</th><th>relative</th><th>bound</th></tr>"
        return f"<h4>Calibration</h4>{stats}<table>{head}{''.join(rows)}</table>"

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
                "sum_of_squares_before": 2 * self.cost_before,
                "sum_of_squares_after": 2 * self.cost_after,
                "rms_log_error": float(np.sqrt(np.mean(self.residuals**2))),
                "converged": self.success,
                "message": self.message,
            },
            "provenance": self.provenance,
        }

    def save(self, path: str | Path, overwrite: bool = False) -> Path:
        """Write the JSON; an existing file is kept unless ``overwrite``."""
        path = Path(path)
        if path.exists() and not overwrite:
            raise ValueError(f"{path} exists; choose another name or pass overwrite=True (--overwrite)")
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
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
    p = pred[[f"{m}_predicted" for m in metrics]].to_numpy()
    mask = np.isfinite(measured) & (measured > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.log(p / measured)
    r = np.where(np.isfinite(r), r, MISSING_PREDICTION_LOG_ERROR)
    return np.asarray(r[mask], dtype=float)


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
) -> FitResult:
    """Fit ``free`` coefficients to the measured ``cases`` (the schema of measured-public.csv,
    or ``cases_from_runs`` of load-test results); the others stay at ``start`` or ``fixed``.

    ``start`` defaults to the engine defaults of the most common engine in ``cases``. Rows that
    cannot be predicted are left out and counted in ``provenance["rows_skipped"]``.
    ``loss="soft_l1"`` (default) keeps a few runs the model cannot describe from dragging every
    coefficient (errors beyond ~30% count linearly, not squared); ``"linear"`` is plain least
    squares. A coefficient that does not change any prediction (overlap on runs without
    communication) is reported as undetermined, with an infinite standard error.
    ``method``: how each run is predicted (``gpucap.validate.predict_prepared``):
    ``closed-form`` (the default: fast, for many runs; a fixed-length closed-loop sweep runs in
    waves, ``gpucap.waves``) or ``simulate`` (each benchmark run step by step, as it ran: seconds
    per evaluation for a sweep of a few small runs, minutes for large ones).
    """
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
    measured = measured_metrics(cases.iloc[ok])[[f"{m}_measured" for m in metrics]].to_numpy()
    if not prepared or not np.isfinite(measured).any():
        raise ValueError("no run can be predicted and compared; check the models, GPUs and measured columns")
    n_res = int((np.isfinite(measured) & (measured > 0)).sum())
    if n_res <= len(free):
        raise ValueError(f"{n_res} measured values cannot determine {len(free)} coefficients; fix some or add runs")

    base = start.as_dict()

    def coefs(x: np.ndarray) -> Coefficients:
        return Coefficients(**{**base, **dict(zip(free, map(float, x), strict=True))})

    def residuals(x: np.ndarray) -> np.ndarray:
        return _log_residuals(predict_prepared(prepared, coefs(x), method), measured, metrics)

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
        "rows_skipped": {str(cases.iloc[pos].get("case_id", pos)): why for pos, why in errors.items()},
        "metrics": list(metrics),
        "method": method,
        "objective": "sum of log(predicted / measured)^2 over runs and metrics",
    }
    return FitResult(
        coefficients=coefs(sol.x),
        start=start,
        free=free,
        stderr=dict(zip(free, map(float, se), strict=True)),
        at_bound=at_bound,
        correlation=corr,
        covariance=cov,
        n_runs=len(prepared),
        n_residuals=m,
        cost_before=0.5 * float(r0 @ r0),
        cost_after=float(sol.cost),
        residuals=sol.fun,
        success=bool(sol.success),
        message=str(sol.message),
        provenance=provenance,
    )
