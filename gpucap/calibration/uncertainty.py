"""What the fits to runs (``calibrate``), to a step log (``stepfit``) and to telemetry
(``telemetryfit``) share: the coefficients' physical bounds, the bounded least-squares step
(``fit_least_squares``, from one start or several), and what its Jacobian says of the
coefficients: covariance, standard errors, correlations, and which sit at a bound of their
physical range.

The step time is a sum of maxima of rooflines, so the cost of a fit is only piecewise smooth and
may have more than one minimum: the vLLM runs of the public set have two, 0.7% apart in cost, at
(u_compute, u_hbm) = (0.351, 0.322) and (0.322, 0.362), and rounding decided which one a solver
started from the defaults reached (benchmarks/README.md, "Every core"). ``fit_least_squares`` keeps
the lowest minimum of several starts (``spread_starts``) and names the others whose cost is within
``NEAR_COST`` of it: the runs do not tell those coefficients apart."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.optimize import OptimizeResult, least_squares

from gpucap.calibration.fitresiduals import DIFF_STEP, ROBUST_SCALE
from gpucap.physics.coefficients import COEFFICIENT_INFO, Coefficients

# Another minimum whose cost is within this share of the best one fits the runs as well ...
NEAR_COST = 0.02
# ... and is another answer where a coefficient differs by more than this share of its value
# (or of 1% of its range, for a value near zero).
NEAR_APART = 0.05


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


def delta_interval(
    predict: Callable[[Coefficients], np.ndarray],
    coef: Coefficients,
    free: tuple[str, ...],
    covariance: np.ndarray,
    level: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(low, mid, high)`` of the predictions ``predict(coef)`` at ``level`` from the free
    coefficients' covariance alone, by the delta method on the log prediction:

        var(log y) = g^T cov g,   g_j = d log y / d x_j,   y x exp(-+ z sd),  z = Phi^-1(1/2 + level/2),

    g by forward differences of relative step ``DIFF_STEP`` (backward at a coefficient's upper
    bound); an undetermined coefficient's infinite covariance counts as 0 (it moves no
    prediction of the runs), and a prediction that is not positive and finite gets NaN bounds."""
    from scipy.stats import norm

    base = coef.as_dict()
    mid = np.asarray(predict(coef), dtype=float)
    g = np.zeros((mid.size, len(free)))
    for j, name in enumerate(free):
        h = max(abs(base[name]) * DIFF_STEP, 1e-9)
        up = min(base[name] + h, COEFFICIENT_INFO[name].upper)
        if up == base[name]:
            up = base[name] - h
        shifted = np.asarray(predict(Coefficients(**{**base, name: up})), dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            g[:, j] = (np.log(shifted) - np.log(mid)) / (up - base[name])
    cov = np.where(np.isfinite(covariance), covariance, 0.0)
    with np.errstate(invalid="ignore"):
        sd = np.sqrt(np.clip(np.einsum("ij,jk,ik->i", g, cov, g), 0.0, None))
    z = float(norm.ppf(0.5 + level / 2))
    ok = np.isfinite(sd) & np.isfinite(mid) & (mid > 0)
    low, high = np.full(mid.size, np.nan), np.full(mid.size, np.nan)
    low[ok], high[ok] = mid[ok] * np.exp(-z * sd[ok]), mid[ok] * np.exp(z * sd[ok])
    return low, mid, high


def _solve(
    residuals: Callable[[np.ndarray], np.ndarray], x0: np.ndarray, bounds: tuple[np.ndarray, np.ndarray], loss: str
) -> OptimizeResult:
    """``scipy.optimize.least_squares`` of ``residuals`` from ``x0`` within ``bounds``, its trust-region
    steps solved by LSMR with regularization (``tr_solver="lsmr"``) rather than by the SVD of the
    Jacobian (``"exact"``).

    The Jacobian is singular wherever a coefficient changes no prediction, and that is common: an
    engine that runs its host work beside the GPU steps in ``max(t_gpu, t_overhead)``, so a
    ``t_overhead_s`` below every step's GPU time has a zero column. There the exact solver zig-zags
    along the valley of the other coefficients: 100 synthetic runs started from vLLM's defaults
    (2 ms below every step) took 76 evaluations to a point that LSMR reaches in 7, and 7 with
    ``t_overhead_s`` held fixed (benchmarks/README.md, "Speed"). One free coefficient has no valley,
    and scipy's LSMR steps need two dimensions, so it keeps the exact solver."""
    return least_squares(
        residuals,
        x0,
        bounds=bounds,
        x_scale="jac",
        tr_solver="lsmr" if np.size(x0) > 1 else "exact",
        diff_step=DIFF_STEP,
        max_nfev=200,
        loss=loss,
        f_scale=ROBUST_SCALE,
    )


def spread_starts(bounds: tuple[np.ndarray, np.ndarray], n: int) -> list[np.ndarray]:
    """``n`` starting points spread over the bounds, as a Latin square: the levels ``lower + k /
    (n + 1) x span``, k = 1..n, and point p puts coefficient i at level ``(i + p) mod n + 1``, so
    that each coefficient takes every level once and neighbours in the list differ. With two
    points and u_compute, u_hbm first: one at a third of u_compute's range and two thirds of
    u_hbm's, the other the other way round: a compute-bound start and a memory-bound one, the two
    basins of the rooflines' max."""
    lower, upper = bounds
    i = np.arange(lower.size)
    return [lower + ((i + p) % n + 1) / (n + 1) * (upper - lower) for p in range(n)]


@dataclass(frozen=True)
class OtherMinimum:
    """A minimum of the cost besides the best one, from another start."""

    x: np.ndarray
    cost: float


def fit_least_squares(
    residuals: Callable[[np.ndarray], np.ndarray],
    start: Coefficients,
    free: tuple[str, ...],
    loss: str,
    bounds: tuple[np.ndarray, np.ndarray] | None = None,
    starts: int = 1,
) -> tuple[OptimizeResult, np.ndarray, list[OtherMinimum]]:
    """``scipy.optimize.least_squares`` of ``residuals`` within ``bounds`` (by default the free
    coefficients' bounds) from ``start`` (clipped into them) and, with ``starts`` > 1, again from
    ``starts - 1`` points spread over the bounds (``spread_starts``); the solution of lowest
    cost, the residuals at ``start``, and the other minima as good as it (cost within
    ``NEAR_COST``) with a coefficient more than ``NEAR_APART`` away (``distinct_minima``)."""
    lower, upper = bounds if bounds is not None else coefficient_bounds(free)
    base = start.as_dict()
    x0 = np.clip([base[n] for n in free], lower, upper)
    r0 = residuals(x0)
    sols = [_solve(residuals, x, (lower, upper), loss) for x in (x0, *spread_starts((lower, upper), starts - 1))]
    best = min(sols, key=lambda s: float(s.cost))
    return best, r0, distinct_minima(best, sols, (lower, upper))


def apart_scale(x: np.ndarray, bounds: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """What a coefficient's distance from ``x`` is measured against when minima are told apart:
    ``max(|x|, 1% of its range)`` (a value near zero is compared with its range)."""
    return np.maximum(np.abs(x), 0.01 * (bounds[1] - bounds[0]))


def distinct_minima(
    best: OptimizeResult, sols: list[OptimizeResult], bounds: tuple[np.ndarray, np.ndarray]
) -> list[OtherMinimum]:
    """The solutions of ``sols`` whose cost is within ``NEAR_COST`` of ``best``'s and whose
    coefficients differ from it by more than ``NEAR_APART`` of ``max(|best|, 1% of the range)``
    in some coefficient, one per place (a minimum reached twice is listed once)."""
    scale = apart_scale(best.x, bounds)
    out: list[OtherMinimum] = []
    for s in sols:
        near = float(s.cost) <= float(best.cost) * (1.0 + NEAR_COST) + 1e-12
        apart = np.any(np.abs(s.x - best.x) > NEAR_APART * scale)
        seen = any(np.all(np.abs(s.x - o.x) <= NEAR_APART * scale) for o in out)
        if near and apart and not seen:
            out.append(OtherMinimum(np.asarray(s.x, dtype=float), float(s.cost)))
    return out
