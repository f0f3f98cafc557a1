"""``gpucap.queueing.brackets.first_true``: where a monotone condition turns on, per row."""

import math

import numpy as np

from gpucap.queueing.brackets import first_true


def test_square_roots_to_the_stated_precision() -> None:
    # t^2 >= c turns on at sqrt(c); the bracket [0, 4] shrinks to 4 / 64^4 after four rounds of 63
    c = np.array([2.0, 3.0, 9.0, 0.25])
    lo, hi = first_true(np.zeros(4), np.full(4, 4.0), lambda t: t**2 >= c[:, None])
    assert np.all(lo < np.sqrt(c)) and np.all(np.sqrt(c) <= hi)
    assert np.all(hi - lo <= 4.0 / 64**4 * (1 + 1e-9))
    assert hi[2] == 3.0  # a grid point at the root: the first point where it is on


def test_condition_never_on_inside_keeps_the_top_cell() -> None:
    lo, hi = first_true(np.array([0.0]), np.array([1.0]), lambda t: np.zeros_like(t, dtype=bool), rounds=2)
    assert hi[0] == 1.0 and math.isclose(lo[0], 1.0 - 1.0 / 64**2)
