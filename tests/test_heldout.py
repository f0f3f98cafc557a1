"""Out-of-sample intervals: refits without each sweep or model, the bands and limit intervals from
what they missed, and the coverage of both on data they did not see."""

import math

import numpy as np
import pandas as pd
import pytest

from gpucap.calibration.calibrate import calibrate
from gpucap.calibration.heldout import HeldOut, limit_coverage, limit_intervals, run_coverage
from gpucap.calibration.validate import synthetic_cases
from gpucap.config import SLO
from gpucap.physics.coefficients import Coefficients

TRUTH = Coefficients(u_compute=0.62, u_hbm=0.71, overlap=0.0, t_overhead_s=2e-3, t_seq_s=10e-6)
SETUPS = (
    ("meta-llama/Llama-3.1-8B", "H100-SXM-80GB", 1),
    ("Qwen/Qwen3-32B", "H100-SXM-80GB", 2),
    ("meta-llama/Llama-3.3-70B-Instruct", "A100-SXM-80GB", 4),
)


def held(limit_residuals: list[float], runs: pd.DataFrame | None = None, groups: list[str] | None = None) -> HeldOut:
    r = np.array(limit_residuals, dtype=float)
    sweeps = np.array([f"s{k}" for k in range(r.size)], dtype=object)  # a group a sweep
    return HeldOut("sweep", len(r), np.array(groups or []), runs if runs is not None else pd.DataFrame(), r, sweeps)


def test_limit_coverage_leaves_each_sweep_out_of_its_own_interval() -> None:
    # four sweeps missed by nothing, one by a factor e^5: each zero lies in the band of the other
    # residuals (their 10% quantile is 0), the outlier in no band built from four zeros: 4 of 5
    assert limit_coverage(held([0.0, 0.0, 0.0, 0.0, 5.0])) == (pytest.approx(0.8), 5)
    share, n = limit_coverage(held([0.0, 0.1, math.nan]))  # two finite residuals: too few
    assert math.isnan(share) and n == 2


def test_limit_intervals_scale_the_fitted_limit_by_the_held_out_spread() -> None:
    low, high = limit_intervals(np.array([10.0, 0.0, np.inf]), held([-0.1, 0.0, 0.1]))
    # the 10% and 90% quantiles of (-0.1, 0, 0.1) lie within [-0.1, 0.1]
    assert 10 * math.exp(-0.1) <= low[0] < 10 < high[0] <= 10 * math.exp(0.1)
    assert np.isnan(low[1:]).all() and np.isnan(high[1:]).all()  # no interval for 0 or beyond the grid
    assert np.isnan(limit_intervals(np.array([10.0]), held([0.0, 0.1]))[0]).all()


def test_run_coverage_leaves_out_the_runs_own_group() -> None:
    # groups a-e, two runs each; group e is missed by e^3, the rest by nothing: the eight runs of
    # a-d lie in the band of the others' errors (its 10% quantile is 0), e's two in no band of zeros
    runs = pd.DataFrame({"ttft_ms": [0.0] * 8 + [3.0, 3.0]})
    groups = [g for g in "abcde" for _ in range(2)]
    assert run_coverage(held([], runs, groups)) == {"ttft_ms": (pytest.approx(0.8), 10)}


@pytest.fixture(scope="module")
def cases() -> pd.DataFrame:
    return synthetic_cases(SETUPS, (1, 4, 16, 64), ((1000, 200), (4000, 500)), TRUTH, noise=0.1, seed=3)


def test_calibrate_takes_bands_and_limit_intervals_out_of_sample(cases) -> None:
    slo = SLO(ttft_s=0.5, tpot_s=0.05, statistic="mean")
    fit = calibrate(cases, start=TRUTH, free=("u_compute", "u_hbm"), slo=slo, intervals="sweep")
    h = fit.provenance["held_out"]
    assert h["by"] == "sweep" and h["groups"] == 6  # three setups x two shapes, four levels each
    assert set(h["run_coverage"]) == {"output_tok_s", "ttft_ms", "tpot_ms"}
    assert all(c["runs"] == 24 and 0 <= c["share"] <= 1 for c in h["run_coverage"].values())
    assert {"held_out_low", "held_out_high"} <= set(fit.limits.columns)
    ok = fit.limits["held_out_low"].notna()
    assert ok.any() and (fit.limits.loc[ok, "held_out_low"] <= fit.limits.loc[ok, "fitted"]).all()
    assert "[[Out of sample]] (refitted without each sweep of 6" in fit.report()
    assert fit.ranges["ttft_ms"]["runs"] == 24


def test_too_few_groups_keep_the_covariance_and_say_so(cases) -> None:
    two = cases[~cases["model"].str.contains("70B")]
    fit = calibrate(two, start=TRUTH, free=("u_compute",), intervals="model")
    assert fit.provenance["held_out"]["notes"] == [
        "held out by model: 2 model(s); out-of-sample intervals need 3 or more (the covariance's intervals stand)"
    ]
    with pytest.raises(ValueError, match="intervals 'runs': use covariance, sweep or model"):
        calibrate(two, start=TRUTH, free=("u_compute",), intervals="runs")
