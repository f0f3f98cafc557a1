"""Length distributions: means, quantiles and the longest request, by hand."""

import pytest

from gpucap.queueing.lengths import Lengths


def test_fixed() -> None:
    d = Lengths.fixed(2000)
    assert d.mean == 2000 and d.longest == 2000 and d.quantile(0.99) == 2000 and d.is_fixed


def test_histogram_mean_from_midpoints() -> None:
    # bins [0, 1000) x 3, [1000, 3000) x 1: midpoints 500 and 2000; mean = (3 x 500 + 2000) / 4 = 875
    d = Lengths.histogram([0, 1000, 3000], [3, 1])
    assert d.mean == pytest.approx(875.0)
    assert d.quantile(0.75) == 500 and d.quantile(0.76) == 2000
    assert d.longest == 3000  # the last bin's top edge: a request that long must fit the KV cache


def test_percentiles_linear_between_points() -> None:
    # p10 = 100, p90 = 900: 10% at 100, 80% uniform on [100, 900] (mean 500), 10% at 900
    # mean = 0.1 x 100 + 0.8 x 500 + 0.1 x 900 = 500
    d = Lengths.percentiles({10: 100, 90: 900})
    assert d.mean == pytest.approx(500.0)
    assert d.longest == 900
    assert d.quantile(0.5) == pytest.approx(500.0)  # halfway between p10 and p90 on a linear CDF
    # the given points are the quantiles themselves
    e = Lengths.percentiles({50: 800, 90: 2000, 99: 6000})
    assert (e.quantile(0.9), e.quantile(0.99)) == (pytest.approx(2000.0), pytest.approx(6000.0))


def test_parse_and_errors() -> None:
    assert Lengths.parse("300", "--output-len").mean == 300
    d = Lengths.parse("p10=100,p90=900", "--input-len")
    assert d.mean == pytest.approx(500.0)
    with pytest.raises(ValueError, match="--input-len: cannot read 'p50=lots'"):
        Lengths.parse("p50=lots", "--input-len")
    with pytest.raises(ValueError, match="must not decrease"):
        Lengths.percentiles({50: 900, 90: 100})
    with pytest.raises(ValueError, match="one more than counts"):
        Lengths.histogram([0, 10], [1, 2])
