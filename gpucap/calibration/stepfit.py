"""Fit the step time's coefficients to the engine's own log of its steps.

A load test's TTFT and TPOT mix the engine's steps with the HTTP server, the client and the
queue; vLLM's step log (``gpucap.telemetry.steplog``) times the steps alone. Fitting the device
coefficients of ``gpucap.physics.steptime.step_time`` (``STEP_FREE``: u_compute, u_hbm, t_layer_s,
t_seq_s; u_link and overlap too where the steps cross GPUs) to it leaves the load test's
residuals to what is outside the engine's step.

Each logged step is one composition: ``decode`` sequences at mean context ``context`` and
``prefill`` prompt tokens carrying ``pairs`` causal (query, key) pairs per layer
(``step_compositions``). The log gives the counts; the context comes from the KV cache usage
(``StepLog.mean_context``: the tokens the running requests hold, less the prompt tokens this step
adds), and the pairs from taking each prompt request's chunk as ``prompt_tokens / prompt_requests``
starting at its first token (``c (c + 1) / 2`` pairs a chunk of c: exact for prompts within the
token budget, an underestimate for later chunks of longer ones).

What the log's time is (``gpucap.telemetry.steplog``): the device time less the host work done
before the engine core waits for it when the host runs beside the device (vLLM's async
scheduling, ``EngineConfig.overlap_host``), else the device time:

    ``logged = device_s - t_overhead``  (overlapped host), ``logged = device_s``  (otherwise)

so t_overhead_s is not identified by the log alone (it shifts every step by the same amount as
t_layer_s does): it stays at its start, flagged as such; the wall time per step
(``gpucap.telemetry`` windows: steps per second) identifies it.

The fit minimizes ``sum soft_l1(log(predicted / logged))`` over the steps with
``scipy.optimize.least_squares`` within the coefficients' physical bounds, with standard errors
from the Jacobian (as ``gpucap.calibration.calibrate``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.optimize import brentq

from gpucap.calibration.fitresiduals import robust_cost
from gpucap.calibration.physical import device_class, physical_bounds, read_physical_ranges
from gpucap.calibration.uncertainty import fit_least_squares, uncertainty
from gpucap.config import Hardware
from gpucap.physics.coefficients import Coefficients
from gpucap.physics.step import step_work
from gpucap.physics.steptime import step_time
from gpucap.telemetry.steplog import StepLog

STEP_FREE = ("u_compute", "u_hbm", "t_layer_s", "t_seq_s")
MIN_STEP_S = 1e-5  # a predicted logged time below this (host longer than the step) counts as this
# Bins of the tokens a step runs, for the predicted-against-logged table.
TOKEN_BINS = (0, 1, 2, 8, 32, 128, 512, 2048, 8192, np.inf)


def step_compositions(log: StepLog, kv_cache_tokens: float | None = None) -> pd.DataFrame:
    """Per real step of ``log``: ``decode`` sequences, their mean ``context`` (tokens), ``prefill``
    prompt tokens, their ``pairs`` per layer, and the ``logged_s`` time (see the module docstring
    for how context and pairs are taken)."""
    s = log.real
    held = log.mean_context(kv_cache_tokens)[s.index.to_numpy()] * (
        s["prompt_requests"] + s["decode_requests"]
    ).to_numpy(float)
    decode = s["decode_requests"].to_numpy(float)
    prefill = s["prompt_tokens"].to_numpy(float)
    chunk = np.where(s["prompt_requests"] > 0, prefill / s["prompt_requests"].clip(lower=1), 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        context = np.where(decode > 0, np.maximum((held - prefill) / decode, 1.0), 0.0)
    return pd.DataFrame(
        {
            "decode": decode,
            "context": context,
            "prefill": prefill,
            "pairs": s["prompt_requests"].to_numpy(float) * chunk * (chunk + 1.0) / 2.0,
            "logged_s": s["elapsed_s"].to_numpy(float),
        },
        index=s.index,
    )


def predicted_logged_s(hw: Hardware, coef: Coefficients, comp: pd.DataFrame) -> np.ndarray:
    """The time vLLM's step log would show for each composition (module docstring):
    ``device_s - t_overhead`` where the host runs beside the device, else ``device_s``."""
    work = step_work(
        hw,
        decode_tokens=comp["decode"].to_numpy(),
        decode_context=comp["context"].to_numpy(),
        prefill_tokens=comp["prefill"].to_numpy(),
        prefill_pairs=comp["pairs"].to_numpy(),
    )
    device = np.asarray(step_time(hw, work, coef).device_s, dtype=float)
    host = coef.t_overhead_s if hw.engine.overlap_host else 0.0
    return np.maximum(device - host, MIN_STEP_S)


def prompt_compute_share(
    hw: Hardware, coef: Coefficients, comp: pd.DataFrame, bounds: tuple[float, float] | None = None
) -> float:
    """The ``u_compute`` at which the steps that carry a prompt chunk are timed right in the median,
    every other coefficient held at ``coef``:

        ``median_i log(predicted_i(u) / logged_i) = 0``,  i over the steps of ``comp`` with prefill > 0

    (``predicted_logged_s``; solved by Brent's method, the median falls as u rises). A prompt step
    is mostly multiplies, so it measures the rate the engine's compute runs at, from the engine's
    own clock; a load test's TTFT mixes that rate with the queue, the waves and the HTTP server,
    which a fit of u_compute to it absorbs. ``bounds``: u_compute's physical range on ``hw``
    (``data/coefficient-ranges.csv``) when None. A log with no prompt step, or whose prompt steps
    need a u outside the range, is an error that says so."""
    steps = comp[comp["prefill"] > 0]
    if steps.empty:
        raise ValueError("the step log has no step that carries a prompt chunk: it cannot time the compute")
    if bounds is None:
        lo, hi = physical_bounds(("u_compute",), device_class(hw), read_physical_ranges())
        bounds = (float(lo[0]), float(hi[0]))
    logged = steps["logged_s"].to_numpy()

    def median_log_ratio(u: float) -> float:
        predicted = predicted_logged_s(hw, dataclasses.replace(coef, u_compute=u), steps)
        return float(np.median(np.log(predicted / logged)))

    at_lo, at_hi = median_log_ratio(bounds[0]), median_log_ratio(bounds[1])
    if at_lo < 0 or at_hi > 0:
        side = "below" if at_lo < 0 else "above"
        raise ValueError(
            f"the {len(steps)} prompt steps need a u_compute {side} its physical range [{bounds[0]:g}, {bounds[1]:g}] "
            f"on {hw.gpu.key} with the other coefficients given (median log ratio {at_lo:+.3f} at the lower bound, "
            f"{at_hi:+.3f} at the upper): the device row or the other coefficients are wrong"
        )
    return float(brentq(median_log_ratio, bounds[0], bounds[1], xtol=1e-6))


@dataclass(frozen=True)
class StepFit:
    """Coefficients fitted to a step log: values, standard errors, which sit at a bound, the
    compositions with their logged and fitted times, and the notes a report prints."""

    coefficients: Coefficients
    start: Coefficients
    free: tuple[str, ...]
    stderr: dict[str, float]
    at_bound: dict[str, str]
    steps: pd.DataFrame  # step_compositions + start_s + fitted_s
    cost_before: float
    cost_after: float
    success: bool
    notes: tuple[str, ...]

    def by_tokens(self) -> pd.DataFrame:
        """Median logged, start and fitted step time (ms) per bin of tokens a step runs, decode-only
        steps and steps with a prompt chunk apart."""
        s = self.steps.assign(tokens=self.steps["decode"] + self.steps["prefill"])
        s["kind"] = np.where(s["prefill"] > 0, "with prompt", "decode only")
        s["bin"] = pd.cut(s["tokens"], list(TOKEN_BINS), right=False)
        g = s.groupby(["kind", "bin"], observed=True)
        out = g.agg(
            steps=("logged_s", "size"),
            tokens=("tokens", "median"),
            logged_ms=("logged_s", "median"),
            start_ms=("start_s", "median"),
            fitted_ms=("fitted_s", "median"),
        ).reset_index()
        for c in ("logged_ms", "start_ms", "fitted_ms"):
            out[c] = out[c] * 1e3
        return out

    def error(self, which: str = "fitted") -> float:
        """Median ``|predicted / logged - 1|`` over the steps (``which``: "start" or "fitted")."""
        return float(np.median(np.abs(self.steps[f"{which}_s"] / self.steps["logged_s"] - 1.0)))

    def report(self) -> str:
        """Coefficients with standard errors, the error before and after, and the notes."""
        lines = [
            f"[[Step fit]] {len(self.steps)} steps; median |predicted / logged - 1| "
            f"{self.error('start'):.1%} (start) -> {self.error('fitted'):.1%} (fit)"
        ]
        start = self.start.as_dict()
        for name in self.free:
            v, se = getattr(self.coefficients, name), self.stderr[name]
            where = self.at_bound.get(name, "")
            lines.append(
                f"    {name:<14} = {v:.5g} +/- {se:.3g} (init = {start[name]:.5g}){'  at ' + where + ' bound' if where in ('lower', 'upper') else ''}"
            )
        lines.extend(f"    note: {n}" for n in self.notes)
        return "\n".join(lines)


def fit_steps(
    log: StepLog,
    hw: Hardware,
    *,
    start: Coefficients | None = None,
    free: tuple[str, ...] = STEP_FREE,
    kv_cache_tokens: float | None = None,
    loss: str = "soft_l1",
) -> StepFit:
    """Fit ``free`` device coefficients of ``hw``'s step time to the steps of ``log`` (module
    docstring); the others stay at ``start`` (``hw``'s engine defaults when None).
    ``kv_cache_tokens``: the KV cache's size when the log does not state it."""
    start = start or Coefficients.for_engine(hw.engine.engine)
    if "t_overhead_s" in free and hw.engine.overlap_host:
        raise ValueError(
            "t_overhead_s is not identified by a step log of an engine that runs its host work beside the device; "
            "fit it from the wall time per step (telemetry windows)"
        )
    comp = step_compositions(log, kv_cache_tokens)
    if len(comp) <= len(free):
        raise ValueError(f"{log.path}: {len(comp)} steps cannot determine {len(free)} coefficients")
    logged = comp["logged_s"].to_numpy()
    if not (logged > 0).all():
        comp = comp[logged > 0]
        logged = comp["logged_s"].to_numpy()

    def coef_at(x: np.ndarray) -> Coefficients:
        return dataclasses.replace(start, **dict(zip(free, map(float, x), strict=True)))

    def residuals(x: np.ndarray) -> np.ndarray:
        return np.log(predicted_logged_s(hw, coef_at(x), comp) / logged)

    sol, r0, _ = fit_least_squares(residuals, start, free, loss)
    unc = uncertainty(sol, free)
    fitted = coef_at(sol.x)
    notes = []
    if hw.engine.overlap_host:
        notes.append(
            f"t_overhead_s stays at {start.t_overhead_s * 1e3:.3g} ms: the log times the device less the host's "
            "work beside it, so the host's time per step needs the wall clock (steps per second)"
        )
    if (comp["prefill"] == 0).all():
        notes.append("no step carried a prompt chunk: u_compute is set by decode steps alone")
    if comp["decode"].nunique() < 3:
        notes.append("fewer than three batch sizes: t_seq_s and the constant terms are hard to tell apart")
    steps = comp.assign(start_s=predicted_logged_s(hw, start, comp), fitted_s=predicted_logged_s(hw, fitted, comp))
    return StepFit(
        coefficients=fitted,
        start=start,
        free=tuple(free),
        stderr=dict(zip(free, map(float, unc.stderr), strict=True)),
        at_bound=unc.at_bound,
        steps=steps,
        cost_before=robust_cost(r0, loss),
        cost_after=float(sol.cost),
        success=bool(sol.success),
        notes=tuple(notes),
    )
