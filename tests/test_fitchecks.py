"""Did a fit make a metric worse than the defaults did, beyond the noise of the change?"""

import numpy as np
import pandas as pd
import pytest

from gpucap.calibration.calibrate import calibrate
from gpucap.calibration.fitchecks import change_noise, median_abs_error, metric_changes, worse_flags
from gpucap.calibration.validate import synthetic_cases

from .test_limits import LEVELS, TRUTH


def test_median_error_and_change_by_hand() -> None:
    before = pd.DataFrame({"ttft_ms": np.log([1.1, 0.8, 1.3]), "tpot_ms": np.log([1.1, 1.1, np.nan])})
    after = pd.DataFrame({"ttft_ms": np.log([1.0, 1.05, 0.95]), "tpot_ms": np.log([1.3, 1.3, 2.0])})
    table = metric_changes(before, after).set_index("metric")
    # |ratio - 1|: before 0.1, 0.2, 0.3 -> median 0.2; after 0, 0.05, 0.05 -> 0.05
    assert table.loc["ttft_ms", "before"] == pytest.approx(0.2)
    assert table.loc["ttft_ms", "after"] == pytest.approx(0.05)
    assert not table.loc["ttft_ms", "worse"]
    # the third run did not measure TPOT: two runs, every one 10% -> 30% off, a change without scatter
    assert table.loc["tpot_ms", "n"] == 2
    assert table.loc["tpot_ms", "noise"] == pytest.approx(0.0)
    assert table.loc["tpot_ms", "worse"]
    assert worse_flags(metric_changes(before, after)) == (
        "tpot_ms: median error 10.0% -> 30.0% (noise 0.0%): the fit trades it for the other metrics",
    )
    assert median_abs_error(np.log([2.0, 0.5])) == pytest.approx(0.75)  # |2 - 1| = 1, |0.5 - 1| = 0.5
    assert change_noise(np.log([1.1]), np.log([1.5])) == 0.0  # one run: nothing to resample


def test_a_fit_that_trades_one_metric_for_another_is_flagged() -> None:
    """TTFT measured 3x what the physics gives (a mechanism the model lacks): fitting u_compute to
    it from the true coefficients slows prefill, and throughput, exact before, goes wrong."""
    dense = synthetic_cases(
        (("meta-llama/Llama-3.1-8B", "H100-SXM-80GB", 1),), LEVELS, ((2000, 200), (500, 500)), TRUTH, noise=0.0
    )
    broken = dense.assign(ttft_mean_ms=dense["ttft_mean_ms"] * 3)
    fit = calibrate(broken, start=TRUTH, free=("u_compute",))
    table = fit.metric_errors.set_index("metric")
    assert table.loc["ttft_ms", "before"] == pytest.approx(2 / 3)  # predicted / measured = 1/3
    assert table.loc["output_tok_s", "before"] == pytest.approx(0.0, abs=1e-9)
    assert table.loc["output_tok_s", "worse"]
    assert any(f.startswith("output_tok_s: median error 0.0% ->") for f in fit.flags)
    assert "WORSE" in fit.report() and "Errors by metric" in fit._repr_html_()
    assert fit.to_dict()["metric_errors"][0]["metric"] == "output_tok_s"
