"""Where a monotone condition turns on, per row, by cutting a bracket on a grid.

``first_true(lo, hi, above)`` narrows each row's bracket ``[lo, hi]`` around the point where
``above(t)`` turns from False to True (``above`` False at ``lo``, True at ``hi``, monotone between):
each round evaluates ``above`` at ``points`` evenly spaced interior points of every row at once
(one vectorized call with ``t`` of shape (rows, points)) and keeps the cell where it turns. After
``rounds`` rounds the bracket is ``(points + 1)^-rounds`` of the first; bisection would need
``rounds x log2(points + 1)`` calls of one point each, and in numpy the cost of a call is mostly
its fixed overhead, not its points.
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
