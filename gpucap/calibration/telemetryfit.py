"""Fit the coefficients to what a running engine reports about itself: its ``/metrics`` windows
(``gpucap.telemetry.windows``) and its step log (``gpucap.telemetry.steplog``), with the last
calibration as the prior.

Each steady window becomes a load to simulate (``window_targets``): the deployment as the user
describes it, the window's mean prompt and output lengths (fixed where one bucket of the length
histogram holds ``ONE_BUCKET`` of the requests, else uniform within each bucket, scaled to the
exact mean: ``window_lengths``), and its load: a Poisson arrival stream at the window's arrival rate (production traffic,
``load="poisson"``), or a closed loop at the window's mean requests in the system by Little's law
(``load="closed"``, a load test at fixed concurrency). The engine's latencies start when the
request reaches the engine and end when the token leaves it (vLLM 0.32: ``vllm/v1/metrics/stats.py``,
from ``arrival_time``). Where the HTTP server also times its requests (``http_mean_s``), the
window is simulated with the HTTP server, and compared with what a client next to the server
would see: TTFT ``ttft_mean_s + front_end_s`` (the front end's time before the engine) and E2E
``http_mean_s``; so ``t_frontend_s`` and ``t_request_s`` are fitted too. Without it the window is
simulated without the HTTP server (``front_end="offline"``), and those two stay at the prior.

Residuals (``scipy.optimize.least_squares``, soft-L1, within the physical bounds):

- per window and metric, ``log(predicted / measured)`` of the exact means (``d sum / d count``)
  of TTFT, ITL, TPOT and E2E, and of the output tokens/s in a closed loop (in an open loop the
  arrivals set it);
- per window, for the TTFT and E2E histograms, the predicted share of requests under each bucket
  bound against the measured share, ``F_pred(u) - F_meas(u)``, at the bounds where the measured
  share is between ``CDF_EDGE`` and ``1 - CDF_EDGE`` (never a percentile read off a bucket);
- per bin of tokens a step runs, the mean ``log(predicted / logged)`` of the step log's times
  (``gpucap.calibration.stepfit``);
- per free coefficient, ``(value - prior) / prior sd``: a maximum a posteriori fit whose prior is
  the previous calibration (``prior_from_history``), or a weak one (``weak_prior``: a quarter of the
  coefficient's physical range).

A coefficient the windows identify has a posterior standard error below ``IDENTIFIED`` of its
prior's; the others stay near the prior and are flagged (``TelemetryFit.unidentified``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import OptimizeResult, least_squares

from gpucap.calibration.cases import PreparedCase
from gpucap.calibration.fitchecks import metric_changes, sanity_flags, worse_flags
from gpucap.calibration.fitresiduals import DIFF_STEP, MISSING_PREDICTION_LOG_ERROR, ROBUST_SCALE, solver_fields
from gpucap.calibration.fitresult import FitResult
from gpucap.calibration.history import history_path, read_history
from gpucap.calibration.stepfit import TOKEN_BINS, predicted_logged_s, step_compositions
from gpucap.calibration.uncertainty import Uncertainty, coefficient_bounds, uncertainty
from gpucap.calibration.validate import prepare_case
from gpucap.config import Hardware
from gpucap.physics.coefficients import COEFFICIENT_INFO, Coefficients
from gpucap.queueing.benchmark import BenchmarkRun
from gpucap.queueing.lengths import Lengths
from gpucap.queueing.loads import Load
from gpucap.queueing.simulate import run_benchmark
from gpucap.telemetry.steplog import StepLog
from gpucap.telemetry.windows import Window, Windows
from gpucap.version import __version__

TELEMETRY_FREE = ("u_compute", "u_hbm", "t_layer_s", "t_seq_s", "t_overhead_s", "t_frontend_s", "t_request_s")
METRICS = ("ttft", "itl", "tpot", "e2e", "output_tok_s")
LOADS = ("poisson", "closed")
ONE_BUCKET = 0.95
BUCKET_POINTS = 8
CDF_EDGE = 0.02
IDENTIFIED = 0.5
PRIOR_RANGE_SHARE = 0.25
CLOSED_TURNOVERS = 6  # a closed window simulates this many times its concurrency, the first C left out
MIN_PROMPTS, MAX_PROMPTS = 48, 600


@dataclass(frozen=True)
class Prior:
    """Per coefficient, the prior's centre (``mean``) and width (``sd``, same units), and where it
    came from."""

    mean: Coefficients
    sd: dict[str, float]
    source: str


def weak_prior(start: Coefficients, free: tuple[str, ...]) -> Prior:
    """Centred on ``start``, each width ``PRIOR_RANGE_SHARE`` of the coefficient's physical range:
    enough to keep a coefficient no window informs from wandering, too wide to pull one they do."""
    sd = {n: PRIOR_RANGE_SHARE * (COEFFICIENT_INFO[n].upper - COEFFICIENT_INFO[n].lower) for n in free}
    return Prior(start, sd, "weak prior around the start (a quarter of each physical range)")


def prior_from_history(path: str | Path, start: Coefficients, free: tuple[str, ...]) -> Prior:
    """The last calibration in the history at ``path`` as the prior: its values, and its
    standard errors as widths (a coefficient it did not fit, or fitted without a finite error,
    takes the weak width)."""
    entries = read_history(history_path(path))
    if not entries:
        raise ValueError(f"no calibration in {history_path(path)} to take as the prior")
    last = entries[-1]
    weak = weak_prior(start, free)
    values, sd = start.as_dict(), dict(weak.sd)
    for name, c in last["coefficients"].items():
        if name not in COEFFICIENT_INFO:
            continue
        values[name] = float(c.get("value", values[name]))
        se = c.get("stderr")
        if name in free and c.get("free") and se is not None and math.isfinite(float(se)) and float(se) > 0:
            sd[name] = float(se)
    label = last.get("label") or last.get("fitted_at") or f"entry {last.get('entry')}"
    return Prior(Coefficients(**values), sd, f"calibration {label} ({history_path(path)})")


@dataclass(frozen=True)
class WindowTarget:
    """One steady window as a load to simulate: the case (hardware, load, lengths), what the
    server measured (means in seconds; output tokens/s) and its TTFT and E2E bucket counts."""

    window: Window
    case: PreparedCase
    measured: dict[str, float]
    buckets: dict[str, tuple[np.ndarray, np.ndarray]]
    label: str
    front_end_s: float = 0.0  # the front end's time the buckets leave out (they start at the engine)


def window_lengths(w: Window, name: str, mean: float) -> Lengths:
    """A window's prompt or output lengths (module docstring): fixed at the mean where one bucket
    holds ``ONE_BUCKET`` of the requests, else uniform inside each bucket of the histogram
    (``BUCKET_POINTS`` evenly spaced lengths a bucket, the top bucket taken as wide as the one below
    it), scaled to the exact mean. Points at bucket midpoints would make a closed loop of a few
    distinct lengths, whose requests fall into step like a fixed-length load test's waves."""
    bounds, counts = w.buckets.get(name, (np.zeros(0), np.zeros(0)))
    total = counts.sum()
    if total <= 0 or counts.max() >= ONE_BUCKET * total:
        return Lengths.fixed(max(mean, 1.0), name)
    lows = np.concatenate([[0.0], bounds[:-1]])
    highs = bounds.copy()
    if not np.isfinite(highs[-1]):
        highs[-1] = lows[-1] + max(lows[-1] - (lows[-2] if lows.size > 1 else 0.0), 1.0)
    u = (np.arange(BUCKET_POINTS) + 0.5) / BUCKET_POINTS
    keep = counts > 0
    values = (lows[keep, None] + u[None, :] * (highs[keep] - lows[keep])[:, None]).ravel()
    weights = np.repeat(counts[keep] / total / BUCKET_POINTS, BUCKET_POINTS)
    values = np.maximum(values * mean / float(values @ weights), 1.0)
    return Lengths(tuple(values), tuple(weights / weights.sum()), f"{name} (histogram, mean {mean:.0f})")


def window_targets(
    windows: Windows, deployment: dict[str, Any], load: str = "poisson"
) -> tuple[list[WindowTarget], list[str]]:
    """The steady windows as loads to simulate on ``deployment`` (a row of the cases schema
    without the load and lengths: model, gpu, num_gpus, tp, ..., engine and its knobs), and one
    line per steady window that cannot be simulated."""
    if load not in LOADS:
        raise ValueError(f"load must be one of {', '.join(LOADS)}, got {load!r}")
    out, skipped = [], []
    for w in windows.steady:
        r = w.row
        isl, osl = float(r["prompt_tokens_mean"]), float(r["output_tokens_mean"])
        label = f"window {dt.datetime.fromtimestamp(w.start_s, dt.UTC):%H:%M:%S}+{w.end_s - w.start_s:.0f}s"
        if not (isl >= 1 and osl >= 1):
            skipped.append(f"{label}: no prompt/output length histogram")
            continue
        http = math.isfinite(float(r.get("http_mean_s", math.nan)))
        row = dict(deployment, isl=isl, osl=osl, front_end="http" if http else "offline", length_dist="fixed")
        if load == "closed":
            c = max(int(round(float(r["in_system_little"]))), 1)
            row.update(load_mode="fixed-concurrency", concurrency=c, num_prompts=np.nan)
            n = int(np.clip(CLOSED_TURNOVERS * c, MIN_PROMPTS, MAX_PROMPTS))
            bench = Load.closed_loop(c, n)
            label += f", closed loop at {c}"
        else:
            rate = float(r["arrival_rate_per_s"])
            if not rate > 0:
                skipped.append(f"{label}: no arrivals")
                continue
            row.update(load_mode="poisson", request_rate=rate, num_prompts=np.nan)
            n = int(np.clip(rate * float(r["duration_s"]), MIN_PROMPTS, MAX_PROMPTS))
            bench = Load.open_loop(rate, n)
            label += f", Poisson at {rate:.3g}/s"
        try:
            case = prepare_case(pd.Series(row))
        except ValueError as exc:
            skipped.append(f"{label}: {exc}")
            continue
        case = dataclasses.replace(
            case,
            bench=bench,
            input_dist=window_lengths(w, "prompt_len", isl),
            output_dist=window_lengths(w, "output_len", osl),
        )
        measured = {m: float(r[f"{m}_mean_s"]) for m in ("ttft", "itl", "tpot", "e2e")}
        if http:  # as a client beside the server sees them: the front end's time included
            measured["ttft"] += float(r["front_end_s"])
            measured["e2e"] = float(r["http_mean_s"])
        if load == "closed":
            measured["output_tok_s"] = float(r["generation_tokens_per_s"])
        buckets: dict[str, tuple[np.ndarray, np.ndarray]] = {k: w.buckets[k] for k in ("ttft", "e2e") if k in w.buckets}
        out.append(WindowTarget(w, case, measured, buckets, label, float(r["front_end_s"]) if http else 0.0))
    return out, skipped


def simulate_window(t: WindowTarget, coef: Coefficients, seed: int = 0) -> BenchmarkRun:
    """The window's load simulated with ``coef`` (the first turnover of a closed loop, and the
    first eighth of a Poisson stream, left out of the statistics as warm-up)."""
    c = t.case
    assert c.bench is not None and c.input_dist is not None and c.output_dist is not None
    skip = c.bench.concurrency or 0 if c.bench.mode == "closed-loop" else c.bench.num_prompts // 8
    return run_benchmark(
        c.hw, coef, c.bench, input_len=c.input_dist, output_len=c.output_dist, max_running=c.max_running,
        seed=seed, skip_first=int(skip),
    )  # fmt: skip


def predicted_means(run: BenchmarkRun) -> dict[str, float]:
    """A simulated window's means as the server reports them (seconds; output tokens/s)."""
    s = run.stats
    return {
        "ttft": s["ttft"]["mean"],
        "itl": s["itl"]["mean"],
        "tpot": s["tpot"]["mean"],
        "e2e": s["e2el"]["mean"],
        "output_tok_s": run.output_tokens_per_s,
    }


def cdf_residuals(predicted: np.ndarray, bounds: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``F_pred(u) - F_meas(u)`` at the bucket bounds where the measured share is inside
    ``[CDF_EDGE, 1 - CDF_EDGE]`` (module docstring)."""
    total = counts.sum()
    p = predicted[np.isfinite(predicted)]
    if total <= 0 or p.size == 0:
        return np.zeros(0)
    measured = np.cumsum(counts) / total
    keep = (measured >= CDF_EDGE) & (measured <= 1 - CDF_EDGE) & np.isfinite(bounds)
    u = bounds[keep]
    return np.searchsorted(np.sort(p), u, side="right") / p.size - measured[keep]


def _window_residuals(t: WindowTarget, run: BenchmarkRun) -> np.ndarray:
    pred = predicted_means(run)
    r = []
    for m, v in t.measured.items():
        if math.isfinite(v) and v > 0:
            q = pred[m]
            r.append(math.log(q / v) if math.isfinite(q) and q > 0 else MISSING_PREDICTION_LOG_ERROR)
    arrays = {"ttft": run.ttft_s - t.front_end_s, "e2e": run.e2e_s - t.front_end_s}  # as the engine's buckets
    parts = [np.array(r)] + [cdf_residuals(arrays[k], *t.buckets[k]) for k in t.buckets]
    return np.concatenate(parts)


def _step_residuals(hw: Hardware, coef: Coefficients, comp: pd.DataFrame, bins: np.ndarray) -> np.ndarray:
    """Per bin of tokens a step runs, the mean log(predicted / logged) step time."""
    r = np.log(predicted_logged_s(hw, coef, comp) / comp["logged_s"].to_numpy())
    return np.array([r[bins == b].mean() for b in np.unique(bins)])


@dataclass
class TelemetryFit:
    """The fit (``fit``: a ``FitResult`` with the telemetry's provenance), the prior, the windows
    with what they measured and predicted at the prior and after (``windows``), the coefficients
    the windows did not identify, and the windows left out."""

    fit: FitResult
    prior: Prior
    windows: pd.DataFrame
    unidentified: dict[str, str]
    skipped: list[str]
    steps: pd.DataFrame  # the step log's compositions with logged, start_s and fitted_s times (empty without one)

    def report(self) -> str:
        lines = [self.fit.report(), "[[Telemetry]]", f"    prior: {self.prior.source}"]
        for name, why in self.unidentified.items():
            lines.append(f"    {name}: {why}")
        for s in self.skipped:
            lines.append(f"    skipped: {s}")
        return "\n".join(lines)


def fit_telemetry(
    targets: list[WindowTarget],
    *,
    start: Coefficients,
    free: tuple[str, ...] = TELEMETRY_FREE,
    prior: Prior | None = None,
    steps: StepLog | None = None,
    step_hw: Hardware | None = None,
    kv_cache_tokens: float | None = None,
    skipped: list[str] | None = None,
    span: tuple[float, float] | None = None,
    loss: str = "soft_l1",
) -> TelemetryFit:
    """Fit ``free`` coefficients to the windows ``targets`` and, if given, the step log ``steps``
    of the engine ``step_hw`` (module docstring); the rest stay at the prior's values."""
    if not targets and steps is None:
        raise ValueError("no steady window and no step log: nothing to fit (see the windows' reasons)")
    unknown = [n for n in free if n not in COEFFICIENT_INFO]
    if unknown:
        raise ValueError(f"unknown coefficient(s) {', '.join(unknown)}; known: {', '.join(COEFFICIENT_INFO)}")
    prior = prior or weak_prior(start, free)
    base = dataclasses.replace(start, **{n: getattr(prior.mean, n) for n in COEFFICIENT_INFO})
    comp, bins, hw = None, None, step_hw or (targets[0].case.hw if targets else None)
    if steps is not None:
        if hw is None:
            raise ValueError("a step log alone needs the engine it came from (step_hw)")
        comp = step_compositions(steps, kv_cache_tokens)
        comp = comp[comp["logged_s"] > 0]
        tokens = (comp["decode"] + comp["prefill"]).to_numpy()
        bins = np.digitize(tokens, TOKEN_BINS) + 100 * (comp["prefill"].to_numpy() > 0)
    lower, upper = coefficient_bounds(free)
    mu = np.array([getattr(prior.mean, n) for n in free])
    sd = np.array([prior.sd[n] for n in free])

    def coef_at(x: np.ndarray) -> Coefficients:
        return dataclasses.replace(base, **dict(zip(free, map(float, x), strict=True)))

    def data_residuals(x: np.ndarray) -> np.ndarray:
        co = coef_at(x)
        parts = [_window_residuals(t, simulate_window(t, co)) for t in targets]
        if comp is not None and hw is not None and bins is not None:
            parts.append(_step_residuals(hw, co, comp, bins))
        return np.concatenate(parts) if parts else np.zeros(0)

    def residuals(x: np.ndarray) -> np.ndarray:
        return np.concatenate([data_residuals(x), (x - mu) / sd])

    x0 = np.clip(mu, lower, upper)
    r0 = residuals(x0)
    sol = least_squares(
        residuals, x0, bounds=(lower, upper), x_scale="jac", diff_step=DIFF_STEP, loss=loss, f_scale=ROBUST_SCALE,
        max_nfev=100,
    )  # fmt: skip
    unc = posterior(sol, free, sd)
    fitted = coef_at(sol.x)
    unidentified = {
        n: f"not identified by these windows (posterior sd {unc.stderr[j]:.3g} against the prior's {sd[j]:.3g}): "
        "it stays near the prior"
        for j, n in enumerate(free)
        if not unc.stderr[j] < IDENTIFIED * sd[j]
    }
    table = _window_table(targets, coef_at(x0), fitted)
    before, after = _log_table(table, "prior"), _log_table(table, "fit")
    changes = metric_changes(before, after) if not before.empty else pd.DataFrame()
    provenance = {
        "gpucap_version": __version__,
        "fitted_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "source": "telemetry",
        "window_span": list(span) if span else None,
        "windows": len(targets),
        "steps": 0 if comp is None else len(comp),
        "prior": prior.source,
        "engines": sorted({t.case.hw.engine.engine for t in targets}) or ([hw.engine.engine] if hw else []),
        "method": "simulate",
        "objective": f"{loss} loss of window means, bucket shares, step-log bins and the prior",
        "metrics": list(METRICS),
        "rows_used": len(targets),
    }
    fit = FitResult(
        coefficients=fitted,
        start=coef_at(x0),
        free=tuple(free),
        stderr=dict(zip(free, map(float, unc.stderr), strict=True)),
        at_bound=unc.at_bound,
        correlation=unc.correlation,
        covariance=unc.covariance,
        n_runs=len(targets),
        residuals=sol.fun[: sol.fun.size - len(free)],
        provenance=provenance,
        **solver_fields(sol, r0, loss),
        flags=sanity_flags(coef_at(x0), fitted, tuple(free), unc.at_bound) + worse_flags(changes),
        metric_errors=changes,
    )
    step_table = pd.DataFrame()
    if comp is not None and hw is not None:
        step_table = comp.assign(
            start_s=predicted_logged_s(hw, coef_at(x0), comp), fitted_s=predicted_logged_s(hw, fitted, comp)
        )
    return TelemetryFit(fit, prior, table, unidentified, list(skipped or []), step_table)


def posterior(sol: OptimizeResult, free: tuple[str, ...], prior_sd: np.ndarray) -> Uncertainty:
    """The MAP fit's uncertainty: ``cov = inv(J_d^T J_d / s^2 + diag(1 / sd^2))``, the data's
    information (its Jacobian ``J_d``, scaled by the residual variance ``s^2 = sum(r_d^2) / (m - n)``
    as in ``gpucap.calibration.calibrate.uncertainty``) plus the prior's; a coefficient the data do
    not inform keeps the prior's width. Bounds as ``uncertainty`` reports them."""
    n = len(free)
    jd, rd = sol.jac[:-n], sol.fun[:-n]
    s2 = float(rd @ rd) / max(rd.size - n, 1) if rd.size else 1.0
    info = jd.T @ jd / max(s2, 1e-12) + np.diag(1.0 / prior_sd**2)
    cov = np.linalg.pinv(info)
    se = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    with np.errstate(invalid="ignore", divide="ignore"):
        corr = np.nan_to_num(cov / np.outer(se, se))
    return dataclasses.replace(uncertainty(sol, free), covariance=cov, stderr=se, correlation=corr)


def _window_table(targets: list[WindowTarget], before: Coefficients, after: Coefficients) -> pd.DataFrame:
    """Per window: its load, and measured, prior and fitted mean of each metric."""
    rows = []
    for t in targets:
        row: dict[str, Any] = {"window": t.label, "start_s": t.window.start_s, "end_s": t.window.end_s}
        pb, pa = predicted_means(simulate_window(t, before)), predicted_means(simulate_window(t, after))
        for m in METRICS:
            row[f"{m}_measured"] = t.measured.get(m, np.nan)
            row[f"{m}_prior"] = pb[m]
            row[f"{m}_fit"] = pa[m]
        rows.append(row)
    return pd.DataFrame(rows)


def _log_table(table: pd.DataFrame, which: str) -> pd.DataFrame:
    """log(predicted / measured) per window and metric (NaN where not measured)."""
    if table.empty:
        return pd.DataFrame()
    out = {}
    for m in METRICS:
        with np.errstate(divide="ignore", invalid="ignore"):
            out[m] = np.log(table[f"{m}_{which}"].to_numpy(float) / table[f"{m}_measured"].to_numpy(float))
    return pd.DataFrame(out)
