"""SLO-limited concurrency as a calibration target: sweeps found in cases, measured limits as
the load tests define them, predicted limits, and a fit that recovers a known coefficient from
limits alone."""

import json

import numpy as np
import pandas as pd
import pytest

from gpucap.calibration.calibrate import calibrate
from gpucap.calibration.fitchecks import sanity_flags
from gpucap.calibration.fitresiduals import robust_cost
from gpucap.calibration.limits import crossing, find_sweeps, predicted_limits, sweep_table
from gpucap.calibration.loadtests import cases_from_runs
from gpucap.calibration.results import read_results
from gpucap.calibration.validate import synthetic_cases
from gpucap.cli.main import main
from gpucap.config import SLO
from gpucap.physics.coefficients import Coefficients

from .conftest import ROOT

TRUTH = Coefficients(u_compute=0.62, u_hbm=0.71, overlap=0.3, t_overhead_s=3e-3, t_seq_s=10e-6, t_request_s=0.01)
START = Coefficients(u_compute=0.4, u_hbm=0.71, overlap=0.3, t_overhead_s=3e-3, t_seq_s=10e-6, t_request_s=0.01)
LEVELS = np.unique(np.round(np.geomspace(1, 512, 28)))
DATACRUNCH = ROOT / "data" / "loadtests" / "datacrunch-h200-sglang"


@pytest.fixture(scope="module")
def dense() -> pd.DataFrame:
    """Noise-free closed-loop sweeps generated from TRUTH: two shapes, 25 concurrencies each."""
    setup = (("meta-llama/Llama-3.1-8B", "H100-SXM-80GB", 1),)
    return synthetic_cases(setup, LEVELS, ((2000, 200), (500, 500)), TRUTH, noise=0.0)


def test_crossing_interpolates_like_a_load_test() -> None:
    x = np.array([1.0, 2.0, 4.0, 8.0])
    y = np.array([0.1, 0.3, 0.9, 2.5])
    # 0.5 is crossed between 2 (0.3) and 4 (0.9): 2 + (0.5 - 0.3) / (0.9 - 0.3) x 2 = 2.667
    assert crossing(x, y, 0.5) == pytest.approx(2 + 0.2 / 0.6 * 2)
    assert crossing(x, y, 0.05) == 0.0 and crossing(x, y, 3.0) == np.inf
    # no finite value beyond 2: the last load that met it
    assert crossing(x, np.array([0.1, 0.3, np.inf, np.inf]), 0.5) == 2.0


def test_sweeps_are_one_configuration_at_several_loads(dense) -> None:
    extra = dense.iloc[[0]].assign(model="Qwen/Qwen3-8B")  # one load level: not a sweep
    sweeps, skipped = find_sweeps(pd.concat([dense, extra]), SLO(1.0, 0.05))
    assert len(sweeps) == 2 and all(len(s.loads) == len(LEVELS) for s in sweeps)
    assert len(skipped) == 1 and "one load level" in skipped[0] and "Qwen3-8B" in skipped[0]
    for s in sweeps:
        assert list(s.loads) == sorted(s.loads) and s.x == "concurrency"


def test_sweep_table_has_a_row_per_sweep_with_its_measured_limit(dense) -> None:
    sweeps, _ = find_sweeps(dense, SLO(1.0, 0.05))
    table = sweep_table(sweeps)
    assert list(table.columns) == ["sweep", "loads", "measured limit", "status", "binds"]
    assert list(table["sweep"]) == [s.label for s in sweeps]
    # the loads as typed: 1, 2, 3, ... 512 (LEVELS, 28 log-spaced concurrencies rounded)
    assert table["loads"].iloc[0].startswith("1, 2, 3") and table["loads"].iloc[0].endswith(", 512")
    for row, s in zip(table.itertuples(), sweeps, strict=True):
        assert row.status == s.measured.status and row.binds == s.measured.binding
        if s.measured.limit is not None:
            assert row[3] == round(s.measured.limit, 2)


def test_measured_limit_from_cases_uses_itl_where_tpot_is_missing() -> None:
    runs = read_results(DATACRUNCH).runs
    cases = cases_from_runs(runs)
    online = cases[cases["load_mode"] == "poisson"]
    assert (online["tpot_from"] == "itl").all()
    assert np.allclose(online["tpot_median_ms"], online["itl_median_ms"])
    sweeps, _ = find_sweeps(cases, SLO(0.5, 0.05, "median"))
    assert len(sweeps) == 4 and {s.x for s in sweeps} == {"request_rate"}
    # Llama-3.3-70B at ~510/510 tokens: ITL median 19.4 ms at 4 req/s, 70.8 ms at 8 (the files);
    # 50 ms is crossed at 4 + (50 - 19.42) / (70.76 - 19.42) x 4 = 6.38 req/s
    s = next(s for s in sweeps if "70B" in s.label and "509" in s.label)
    assert s.measured.binding == "tpot"
    assert s.measured.limit == pytest.approx(4 + (50 - 19.419891) / (70.763247 - 19.419891) * 4, rel=1e-6)


def test_fit_to_limits_alone_recovers_the_coefficient(dense) -> None:
    slo = SLO(1.0, 0.05)
    sweeps, _ = find_sweeps(dense, slo)
    assert (predicted_limits(sweeps, START, slo) < [s.measured.limit for s in sweeps]).all()  # slower start
    fit = calibrate(dense, start=START, free=("u_compute",), targets=("limits",), slo=slo)
    assert fit.coefficients.u_compute == pytest.approx(TRUTH.u_compute, rel=1e-3)
    assert fit.n_residuals == 2 and fit.provenance["metrics"] == []
    table = fit.limits
    assert np.allclose(table["fitted"], table["measured"], rtol=0.02)
    assert (table["fitted_low"] <= table["fitted"]).all() and (table["fitted"] <= table["fitted_high"]).all()


def test_limits_weigh_like_their_sweeps(dense) -> None:
    fit = calibrate(dense, start=START, free=("u_compute", "u_hbm"), targets=("runs", "limits"), slo=SLO(1.0, 0.05))
    runs = 2 * len(LEVELS) * 3  # every run gives throughput, TTFT and TPOT
    assert fit.n_residuals == runs + 2
    # the last two residuals are the limits, each times sqrt(its sweep's 75 run residuals)
    assert fit.provenance["targets"] == ["runs", "limits"] and fit.provenance["limits_fitted"] == 2
    assert fit.coefficients.u_compute == pytest.approx(TRUTH.u_compute, rel=1e-3)


def test_bad_limit_requests(dense) -> None:
    with pytest.raises(ValueError, match="targets must be"):
        calibrate(dense, targets=("limitz",), slo=SLO(1.0, 0.05))
    with pytest.raises(ValueError, match="need the SLOs"):
        calibrate(dense, targets=("limits",))
    with pytest.raises(ValueError, match="no run meets"):
        calibrate(dense, targets=("limits",), slo=SLO(0.001, 0.001))
    with pytest.raises(ValueError, match="beyond the highest load tested"):
        calibrate(dense, targets=("limits",), slo=SLO(1000.0, 10.0))
    with pytest.raises(ValueError, match="one load level"):
        calibrate(dense[dense["concurrency"] == 8], targets=("runs", "limits"), slo=SLO(1.0, 0.05))
    with pytest.raises(ValueError, match="no mean TTFT and TPOT.*median"):
        calibrate(cases_from_runs(read_results(DATACRUNCH).runs), targets=("limits",), slo=SLO(0.5, 0.05))
    with pytest.raises(ValueError, match="mean or median"):
        find_sweeps(dense, SLO(1.0, 0.05, "p99"))
    with pytest.raises(ValueError, match="positive"):
        SLO(0.0, 0.05)


def test_unmeasured_metric_is_not_fitted_and_report_is_like_with_like(dense) -> None:
    no_tpot = dense.drop(columns=["tpot_mean_ms"])
    fit = calibrate(no_tpot, start=START, free=("u_compute",))
    assert fit.provenance["metrics"] == ["output_tok_s", "ttft_ms"]
    assert fit.n_residuals == 2 * 2 * len(LEVELS)
    # the loss before and after are the same function (scipy's soft-L1 cost)
    assert fit.cost_after == pytest.approx(robust_cost(fit.residuals, "soft_l1"), rel=1e-9)
    r = np.array([0.1, -0.5, 2.0])
    assert robust_cost(r, "linear") == pytest.approx(0.5 * (0.01 + 0.25 + 4.0))
    # soft-L1, f = 0.3: 0.5 f^2 sum 2 (sqrt(1 + (r/f)^2) - 1)
    assert robust_cost(r, "soft_l1") == pytest.approx(0.09 * sum(np.sqrt(1 + (r / 0.3) ** 2) - 1))


def test_flags_fire_when_the_model_is_missing_something(dense) -> None:
    broken = dense.assign(output_tok_s=dense["output_tok_s"] * 20)  # 20x the throughput physics allows
    fit = calibrate(broken, start=START, free=("u_compute", "u_hbm"))
    assert any("at its upper bound" in f for f in fit.flags)
    assert "[[Flags]]" in fit.report() and "missing something" in fit._repr_html_()
    assert sanity_flags(START, Coefficients(**{**START.as_dict(), "t_overhead_s": 0.04}), ("t_overhead_s",), {}) == (
        "t_overhead_s moved from 0.003 to 0.04 (more than 5x)",
    )
    assert sanity_flags(START, START, ("u_compute",), {}) == ()


def test_zero_coefficient_shows_in_the_html_table(dense) -> None:
    fit = calibrate(dense, start=dense_start_zero_overlap(), free=("u_compute", "overlap"))
    assert fit.coefficients.overlap == 0.0 or "overlap" in fit.at_bound
    assert "<td>overlap</td>" in fit._repr_html_()


def dense_start_zero_overlap() -> Coefficients:
    return Coefficients(**{**START.as_dict(), "overlap": 0.0})


def small_cases_csv(tmp_path) -> str:
    """The 405B Poisson sweeps of the SGLang files as a cases CSV (six runs: a quick fit)."""
    cases = cases_from_runs(
        read_results(DATACRUNCH / "llama_405b_online_output.jsonl", manifest=DATACRUNCH / "manifest.json").runs
    )
    path = tmp_path / "cases.csv"
    cases.to_csv(path, index=False)
    return str(path)


def test_cli_fits_limits_and_writes_nothing_on_bad_input(tmp_path, capsys) -> None:
    out = tmp_path / "coef.json"
    args = ["calibrate", small_cases_csv(tmp_path), "--free", "u_compute", "--slo-ttft", "0.5", "--slo-tpot", "0.05"]
    assert main([*args, "--out", str(out), "--targets", "runs,limits", "--stat", "median"]) == 0
    text = capsys.readouterr().out
    assert "[[Limits]]" in text and "measured 2.15" in text  # 405B at 509/534 tokens (see the 70B case above)
    saved = json.loads(out.read_text())
    assert saved["provenance"]["targets"] == ["runs", "limits"] and len(saved["limits"]) == 2
    bad = tmp_path / "bad.json"
    assert main([*args, "--out", str(bad), "--targets", "limits"]) == 2  # the files give medians only
    assert "no mean TTFT" in capsys.readouterr().err and not bad.exists()


def test_cli_saves_no_unconverged_fit_unless_asked(tmp_path, capsys, monkeypatch) -> None:
    import dataclasses

    import gpucap.calibration.calibrate as cal

    real = cal.calibrate

    def stalled(*args, **kwargs):
        return dataclasses.replace(real(*args, **kwargs), success=False, message="max_nfev reached")

    monkeypatch.setattr(cal, "calibrate", stalled)
    out = tmp_path / "coef.json"
    args = ["calibrate", small_cases_csv(tmp_path), "--free", "u_compute", "--out", str(out)]
    assert main(args) == 2
    assert "did not converge (max_nfev reached); nothing written" in capsys.readouterr().err and not out.exists()
    assert main([*args, "--save-unconverged"]) == 0 and out.exists()


def test_a_run_that_spikes_is_left_out_of_the_limit(dense) -> None:
    """One run of a sweep with its TTFT 100x its neighbours' (a cold start, a stalled client):
    with it, the TTFT SLO is crossed at that run's load; left out (and named), the limit is the
    sweep's own."""
    slo = SLO(1.0, 0.05)
    clean, _ = find_sweeps(dense, slo)
    first = clean[0]
    at = first.positions[3]  # an early run, far below the limit
    spiked = dense.copy()
    spiked.loc[spiked.index[at], "ttft_mean_ms"] *= 100.0
    sweeps, skipped = find_sweeps(spiked, slo)
    same = next(s for s in sweeps if s.label == first.label)
    assert same.measured.limit == pytest.approx(first.measured.limit)
    assert at not in same.positions
    [line] = [ln for ln in skipped if "left out" in ln]
    assert first.label in line and "TTFT" in line and f"concurrency {dense.iloc[at]['concurrency']:g}" in line
