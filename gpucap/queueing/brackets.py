"""Where a monotone condition turns on, per row, by cutting a bracket on a grid.

``first_true(lo, hi, above)`` narrows each row's bracket ``[lo, hi]`` around the point where
``above(t)`` turns from False to True (``above`` False at ``lo``, True at ``hi``, monotone between):
each round evaluates ``above`` at ``points`` evenly spaced interior points of every row at once
(one vectorized call with ``t`` of shape (rows, points)) and keeps the cell where it turns. After
``rounds`` rounds the bracket is ``(points + 1)^-rounds`` of the first; bisection would need
``rounds x log2(points + 1)`` calls of one point each, and in numpy the cost of a call is mostly
its fixed overhead, not its points.

``crossing(lo, hi, g)`` finds where a continuous rising ``g`` crosses zero, per row, by false
position with the Illinois rule (an end that stays put twice has its value halved), which
converges superlinearly: a handful of calls where ``first_true`` needs its rounds of many points.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]


def first_true(
    lo: Array, hi: Array, above: Callable[[Array], Bools], *, points: int = 63, rounds: int = 4
) -> tuple[Array, Array]:
    """The narrowed ``(lo, hi)`` per row: ``above`` False at ``lo`` (or ``lo`` is the first
    bracket's own end) and True at ``hi``; ``above`` takes (rows, points) and returns the same
    shape."""
    lo, hi = np.array(lo, dtype=float), np.array(hi, dtype=float)
    frac = np.arange(1, points + 1, dtype=float) / (points + 1)
    rows = np.arange(lo.size)
    for _ in range(rounds):
        t = lo[:, None] + (hi - lo)[:, None] * frac[None, :]
        k = (~above(t)).sum(axis=1)  # monotone: False at the first k points, True after
        grid = np.concatenate([lo[:, None], t, hi[:, None]], axis=1)
        lo, hi = grid[rows, k], grid[rows, k + 1]
    return lo, hi


CROSSING_TOLERANCE = 1e-12  # relative step at which ``crossing`` stops
CROSSING_CALLS = 100  # at most this many calls of ``g`` (an Illinois step at worst halves the bracket)


def crossing(lo: Array, hi: Array, g: Callable[[Array], Array]) -> Array:
    """The zero of a continuous rising ``g`` in each row's ``[lo, hi]`` (rows of one axis; ``g``
    takes and returns that shape): false position, Illinois rule (module docstring), until every
    row's step is within ``CROSSING_TOLERANCE`` of its point. Where ``g`` does not change sign in
    the bracket (at an end, by rounding), the end nearer to its zero: ``lo`` where ``g(lo) >= 0``,
    ``hi`` where ``g(hi) <= 0``."""
    lo, hi = np.array(lo, dtype=float), np.array(hi, dtype=float)
    g_lo, g_hi = g(lo), g(hi)
    at_end = (g_lo >= 0) | (g_hi <= 0)
    end = np.where(g_lo >= 0, lo, hi)
    # those rows run on as a bracket of one point
    lo, hi = np.where(at_end, end, lo), np.where(at_end, end, hi)
    g_lo, g_hi = np.where(at_end, 0.0, g_lo), np.where(at_end, 0.0, g_hi)
    x = np.where(at_end, end, hi)
    side = np.zeros(lo.shape, dtype=np.int8)  # which end moved last: -1 low, +1 high
    for _ in range(CROSSING_CALLS):
        with np.errstate(divide="ignore", invalid="ignore"):
            guess = hi - g_hi * (hi - lo) / (g_hi - g_lo)
        new = np.where(np.isfinite(guess) & (guess >= lo) & (guess <= hi), guess, 0.5 * (lo + hi))
        done = np.abs(new - x) <= CROSSING_TOLERANCE * np.abs(new)
        x = new
        if np.all(done):
            break
        gx = g(x)
        low = gx <= 0
        g_hi = np.where(low & (side == -1), 0.5 * g_hi, g_hi)
        g_lo = np.where(~low & (side == 1), 0.5 * g_lo, g_lo)
        lo, g_lo = np.where(low, x, lo), np.where(low, gx, g_lo)
        hi, g_hi = np.where(low, hi, x), np.where(low, g_hi, gx)
        side = np.where(low, -1, 1).astype(np.int8)
    return x
