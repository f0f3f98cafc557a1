"""The residuals and loss of the calibration fit (``gpucap.calibration.calibrate``): log ratios of
predicted to measured run metrics and sweep limits, and the robust cost ``least_squares``
minimizes with them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from gpucap.calibration.limits import Sweep

# A run the model calls unstable (infinite TTFT) or cannot predict counts as this log error.
MISSING_PREDICTION_LOG_ERROR = float(np.log(10.0))
# Relative finite-difference step: the model has ceilings (prefill chunks) that a tiny step misses.
DIFF_STEP = 1e-3
ROBUST_SCALE = 0.3  # log error where the soft-L1 loss turns from squared to linear (~35%)


def log_residuals(pred: pd.DataFrame, measured: np.ndarray, metrics: tuple[str, ...]) -> np.ndarray:
    """The measured values' log ratios, run by run (row-major), as the fit's residual vector."""
    r = log_ratios(pred, measured, metrics).to_numpy()
    return np.asarray(r[np.isfinite(r)], dtype=float)


def log_ratios(pred: pd.DataFrame, measured: np.ndarray, metrics: tuple[str, ...]) -> pd.DataFrame:
    """log(predicted / measured) per run and metric; NaN where the run did not measure it."""
    p = pred[[f"{m}_predicted" for m in metrics]].to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.log(p / measured)
    r = np.where(np.isfinite(r), r, MISSING_PREDICTION_LOG_ERROR)
    r = np.where(np.isfinite(measured) & (measured > 0), r, np.nan)
    return pd.DataFrame(r, columns=list(metrics))


def limit_residuals(pred: np.ndarray, sweeps: list[Sweep], weights: np.ndarray) -> np.ndarray:
    """``weights x log(predicted / measured limit)`` per sweep, a missing prediction counted as
    MISSING_PREDICTION_LOG_ERROR and every value clipped to within it."""
    measured = np.array([s.measured.limit for s in sweeps], dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.log(pred / measured)
    r = np.clip(
        np.nan_to_num(r, nan=MISSING_PREDICTION_LOG_ERROR), -MISSING_PREDICTION_LOG_ERROR, MISSING_PREDICTION_LOG_ERROR
    )
    return np.asarray(r * weights, dtype=float)


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


def solver_fields(sol: Any, r0: np.ndarray, loss: str) -> dict[str, Any]:
    """What a ``FitResult`` records of a ``scipy.optimize.least_squares`` solution ``sol``
    started where the residuals were ``r0``: the robust cost before and after (``robust_cost``),
    the plain sums of squares, the solver's verdict and its residual count."""
    return {
        "n_residuals": sol.fun.size,
        "cost_before": robust_cost(r0, loss),
        "cost_after": float(sol.cost),
        "success": bool(sol.success),
        "message": str(sol.message),
        "loss": loss,
        "sum_squares_before": float(r0 @ r0),
        "sum_squares_after": float(sol.fun @ sol.fun),
    }
