"""What a least-squares fit's Jacobian says of its coefficients, shared by the fits to runs
(``calibrate``), to a step log (``stepfit``) and to telemetry (``telemetryfit``): covariance,
standard errors, correlations, and which coefficients sit at a bound of their physical range."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import OptimizeResult

from gpucap.physics.coefficients import COEFFICIENT_INFO


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
