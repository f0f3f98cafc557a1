"""Load-test statistics as vllm bench serve computes them (gpucap.queueing.benchstats)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucap.queueing.benchstats import stats, weighted_stats


def test_stats_are_numpys() -> None:
    v = np.array([3.0, 1.0, 2.0, 10.0])
    s = stats(v)
    assert s["mean"] == 4.0 and s["median"] == 2.5
    assert s["p99"] == pytest.approx(np.percentile(v, 99))  # linear interpolation: 9.76
    assert s["p99"] == pytest.approx(3 + 0.97 * 7)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(0.001, 10.0), min_size=1, max_size=8),
    st.lists(st.integers(0, 40), min_size=8, max_size=8),
)
def test_weighted_stats_equal_the_expanded_sample(values: list[float], counts: list[int]) -> None:
    c = np.array(counts[: len(values)])
    if c.sum() == 0:
        c[0] = 1
    expanded = np.repeat(np.array(values), c)
    w, plain = weighted_stats(np.array(values), c), stats(expanded)
    for k in plain:
        assert w[k] == pytest.approx(plain[k], rel=1e-9, abs=1e-12), k
