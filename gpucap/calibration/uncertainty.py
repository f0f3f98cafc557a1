"""What the fits to runs (``calibrate``), to a step log (``stepfit``) and to telemetry
(``telemetryfit``) share: the coefficients' physical bounds, the bounded least-squares step
(``fit_least_squares``), and what its Jacobian says of the coefficients: covariance, standard
errors, correlations, and which sit at a bound of their physical range."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.optimize import OptimizeResult, least_squares

from gpucap.calibration.fitresiduals import DIFF_STEP, ROBUST_SCALE
from gpucap.physics.coefficients import COEFFICIENT_INFO, Coefficients


@dataclass(frozen=True)
class Uncertainty:
    """What the Jacobian at the solution says of the fitted coefficients: covariance, standard
    errors (infinite for a coefficient that changes no prediction), correlations, and which sit at
    a bound or are undetermined."""

    covariance: np.ndarray
    stderr: np.ndarray
    correlation: np.ndarray
    at_bound: dict[str, str]


def coefficient_bounds(free: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The physical (lower, upper) bounds of the free coefficients."""
    lower = np.array([COEFFICIENT_INFO[n].lower for n in free])
    upper = np.array([COEFFICIENT_INFO[n].upper for n in free])
    return lower, upper


def uncertainty(
    sol: OptimizeResult, free: tuple[str, ...], bounds: tuple[np.ndarray, np.ndarray] | None = None
) -> Uncertainty:
    """Covariance ``inv(J^T J) x s^2``, ``s^2 = sum(r^2) / (m - n)``, its standard errors and
    correlations, and the coefficients within 1e-4 of their range of a bound (``bounds``, by
    default the coefficients' own) or undetermined."""
    lower, upper = bounds if bounds is not None else coefficient_bounds(free)
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
    return Uncertainty(cov, se, corr, at_bound)


def fit_least_squares(
    residuals: Callable[[np.ndarray], np.ndarray],
    start: Coefficients,
    free: tuple[str, ...],
    loss: str,
    bounds: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[OptimizeResult, np.ndarray]:
    """``scipy.optimize.least_squares`` of ``residuals`` from ``start`` (clipped into ``bounds``,
    by default the free coefficients' bounds) within those bounds; and the residuals at the start."""
    base = start.as_dict()
    lower, upper = bounds if bounds is not None else coefficient_bounds(free)
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
    return sol, r0
