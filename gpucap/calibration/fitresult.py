"""The result of a calibration fit (``gpucap.calibration.calibrate``): fitted coefficients with their
uncertainty, residual statistics, limits, flags and provenance. It reports itself (``report``,
``_repr_html_``), saves itself as JSON (``save``), loads back into the estimator
(``Coefficients.from_file``), and gives the interval of one prediction (``interval``).
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpucap.calibration.cases import PreparedCase
from gpucap.calibration.uncertainty import delta_interval
from gpucap.calibration.validate import predict_prepared
from gpucap.physics.coefficients import COEFFICIENT_INFO, Coefficients


@dataclass(frozen=True)
class CoefficientRecord:
    """One coefficient after a fit, everything about it in one place, as lmfit's ``Parameter``
    holds it: its value and where the fit started it, its physical bounds and their source
    (``COEFFICIENT_INFO``), whether it was free, its standard error (NaN when fixed, inf when no
    prediction depends on it), where it sits against its bounds, and its correlation with each
    other free coefficient."""

    name: str
    value: float
    init: float
    lower: float
    upper: float
    source: str
    free: bool
    stderr: float = float("nan")
    at_bound: str = ""  # "lower", "upper", "undetermined (...)" or ""
    correlation: dict[str, float] = field(default_factory=dict)

    def line(self) -> str:
        """The report's line: ``name = value +/- stderr (share) (init = start)`` and where it
        sits, or ``(fixed)``."""
        if not self.free:
            return f"{self.name:<14} = {self.value:.5g} (fixed)"
        se, v = self.stderr, self.value
        pct = f"({se / abs(v):.1%})" if np.isfinite(se) and se < 100 * abs(v) else ""
        where = self.at_bound
        bound = f"  at {where} bound" if where in ("lower", "upper") else f"  {where}" if where else ""
        return f"{self.name:<14} = {v:.5g} +/- {se:.3g} {pct} (init = {self.init:.5g}){bound}"

    def to_dict(self) -> dict[str, Any]:
        """The record in the saved JSON (``value`` is what ``Coefficients.from_file`` reads)."""
        out: dict[str, Any] = {"value": self.value, "free": self.free}
        if self.free:
            out["stderr"] = self.stderr if np.isfinite(self.stderr) else None
            out["at_bound"] = self.at_bound or None
            out["init"] = self.init
        out["bounds"] = [self.lower, self.upper]
        out["source"] = self.source
        return out


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
    # the same fit within the coefficients' physical ranges, when this one left them
    # (gpucap.calibration.physical); None when every free coefficient is inside its range
    bounded: FitResult | None = None

    @property
    def records(self) -> dict[str, CoefficientRecord]:
        """Every coefficient's record (``CoefficientRecord``), in the order of ``Coefficients``."""
        start = self.start.as_dict()
        index = {n: i for i, n in enumerate(self.free)}
        out = {}
        for name, value in self.coefficients.as_dict().items():
            info = COEFFICIENT_INFO[name]
            free = name in index
            corr = {o: float(self.correlation[index[name], j]) for o, j in index.items() if o != name} if free else {}
            out[name] = CoefficientRecord(
                name=name,
                value=value,
                init=start[name],
                lower=info.lower,
                upper=info.upper,
                source=info.source,
                free=free,
                stderr=float(self.stderr[name]) if free else float("nan"),
                at_bound=self.at_bound.get(name, "") if free else "",
                correlation=corr,
            )
        return out

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
        lines.extend(f"    {rec.line()}" for rec in self.records.values())
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
                held = (
                    f"; 80% out of sample [{format_limit(r['held_out_low'])}, {format_limit(r['held_out_high'])}]"
                    if "held_out_low" in r and np.isfinite(r["held_out_low"])
                    else ""
                )
                lines.append(
                    f"        measured {format_limit(r['measured'], r['measured_status'])}, defaults "
                    f"{format_limit(r['default'])}, fitted {format_limit(r['fitted'])} "
                    f"[{format_limit(r['fitted_low'])}, {format_limit(r['fitted_high'])}]{held} {r['unit']}"
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
        if "held_out" in self.provenance:
            text = self.held_out_text()
            lines.append(f"[[Out of sample]] ({text[0]})")
            lines.extend(f"    {x}" for x in text[1:])
        if self.bounded is not None:
            lines.append(
                f"[[Within physical ranges]] (the same fit, each coefficient bounded by its range on {self.device}s)"
            )
            lines.extend(f"    {line}" for line in self.bounded.compared_lines(self))
        return "\n".join(lines)

    def held_out_text(self) -> list[str]:
        """The held-out fits in words: by what, then the coverage of the 80% bands per metric and
        of the limits' intervals, then the notes."""
        h = self.provenance["held_out"]
        lines = [
            f"refitted without each {h['by']} of {h['groups']}; bands and limit intervals from what those fits missed"
        ]
        for metric, c in h["run_coverage"].items():
            lines.append(
                f"{metric:<14} {c['share']:.0%} of {c['runs']} runs inside the {h['level']:.0%} band of the other "
                f"{h['by']}s' errors"
            )
        if h["limit_coverage"]:
            c = h["limit_coverage"]
            lines.append(
                f"limits         {c['share']:.0%} of {c['sweeps']} sweeps inside their {h['level']:.0%} out-of-sample interval"
            )
        return lines + list(h["notes"])

    @property
    def device(self) -> str:
        """The device class the fit's runs ran on, as the report names it (``GPU`` or ``CPU``)."""
        return str(self.provenance.get("device", "gpu")).upper()

    def compared_lines(self, free_fit: FitResult) -> list[str]:
        """This (bounded) fit's coefficients and errors by metric beside ``free_fit``'s."""
        lines = []
        for name in self.free:
            a, b = getattr(free_fit.coefficients, name), getattr(self.coefficients, name)
            lines.append(f"{name:<14} = {b:.5g} +/- {self.stderr[name]:.3g} (free fit {a:.5g})")
        if not self.metric_errors.empty:
            free_err = dict(zip(free_fit.metric_errors["metric"], free_fit.metric_errors["after"], strict=True))
            for r in self.metric_errors.itertuples():
                lines.append(
                    f"{r.metric:<14} median error {r.after:6.1%} (free fit {free_err.get(r.metric, np.nan):.1%})"
                )
        return lines

    def __str__(self) -> str:
        """The report (``report``)."""
        return self.report()

    def __repr__(self) -> str:
        """The free coefficients with their standard errors, and the number of runs."""
        values = ", ".join(f"{n}={getattr(self.coefficients, n):.4g}+/-{self.stderr[n]:.2g}" for n in self.free)
        return f"FitResult({values}; {self.n_runs} runs)"

    def _repr_html_(self) -> str:
        """The report as HTML for notebooks: statistics, coefficients, limits, errors, flags."""
        rows = []
        for rec in self.records.values():
            bounds = f"<td>[{rec.lower:.3g}, {rec.upper:.3g}]</td>"
            if rec.free:
                se, v = rec.stderr, rec.value
                rel = f"{se / abs(v):.1%}" if v and np.isfinite(se) else ""
                rows.append(
                    f"<tr><td>{rec.name}</td><td>{v:.5g}</td><td>{se:.3g}</td><td>{rel}</td>{bounds}"
                    f"<td>{html.escape(rec.at_bound)}</td></tr>"
                )
            else:
                rows.append(
                    f"<tr><td>{rec.name}</td><td>{rec.value:.5g}</td><td colspan=2>fixed</td>{bounds}<td></td></tr>"
                )
        r = self.residuals
        stats = (
            f"<p>{self.n_runs} runs, {self.n_residuals} residuals; rms log error {np.sqrt(np.mean(r**2)):.3f}, "
            f"median |error| {np.median(np.abs(np.expm1(r))):.1%}; {html.escape(self.message)}</p>"
        )
        head = (
            "<tr><th>coefficient</th><th>value</th><th>std error</th><th>relative</th><th>bounds</th>"
            "<th>where</th></tr>"
        )
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
        if self.bounded is not None:
            items = "".join(f"<li><code>{html.escape(x)}</code></li>" for x in self.bounded.compared_lines(self))
            out += f"<h4>Within physical ranges ({self.device}s)</h4><ul>{items}</ul>"
        return out

    # ---- for machines ----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """What the JSON file holds: coefficients, correlations, statistics, limits, flags, errors, provenance."""
        return {
            "coefficients": {name: rec.to_dict() for name, rec in self.records.items()},
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
            "within_ranges": None
            if self.bounded is None
            else {
                "coefficients": {n: getattr(self.bounded.coefficients, n) for n in self.bounded.free},
                "metric_errors": json.loads(self.bounded.metric_errors.to_json(orient="records"))
                if not self.bounded.metric_errors.empty
                else [],
            },
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
        (``gpucap.calibration.uncertainty.delta_interval``)."""
        col = f"{metric}_predicted"
        method = str(self.provenance.get("method", "closed-form"))

        def predict(coef: Coefficients) -> np.ndarray:
            return np.asarray(predict_prepared([case], coef, method)[col].to_numpy(dtype=float))

        low, mid, high = delta_interval(predict, self.coefficients, self.free, self.covariance, level)
        return float(low[0]), float(mid[0]), float(high[0])


def format_limit(value: float, status: str = "interpolated") -> str:
    """A limit for the report: its value, or what a measured status or an infinite value means."""
    if status == "not reached":
        return "beyond the highest load tested"
    if status == "already violated":
        return "below the lowest load tested"
    if value is None or not np.isfinite(value):
        return "beyond the grid" if value == np.inf else "n/a"
    return "0 (misses at the lowest load)" if value == 0 else f"{value:.3g}"
