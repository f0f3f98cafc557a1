"""``gpucap.queueing.brackets.first_true``: where a monotone condition turns on, per row."""

import math

import numpy as np

from gpucap.queueing.brackets import crossing, first_true


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


def test_crossing_finds_square_roots_to_its_tolerance() -> None:
    # x^2 - c rises on [0, 4] and crosses zero at sqrt(c); the last row's root is the bracket's end
    c = np.array([2.0, 3.0, 9.0, 0.25, 16.0])
    x = crossing(np.zeros(5), np.full(5, 4.0), lambda t: t**2 - c)
    np.testing.assert_allclose(x, np.sqrt(c), rtol=1e-11)


def test_crossing_of_a_kinked_function() -> None:
    # max(t - 1, 10 (t - 1)) - 0.5: steep past t = 1, shallow before; the zero is at t = 1.05
    x = crossing(np.array([0.0]), np.array([100.0]), lambda t: np.maximum(t - 1.0, 10.0 * (t - 1.0)) - 0.5)
    assert math.isclose(x[0], 1.05, rel_tol=1e-11)


def test_crossing_without_a_sign_change_keeps_the_nearer_end() -> None:
    # t - 5 is below zero on all of [0, 4] (the zero is past hi) and above it on [6, 8]
    x = crossing(np.array([0.0, 6.0]), np.array([4.0, 8.0]), lambda t: t - 5.0)
    assert x.tolist() == [4.0, 6.0]
