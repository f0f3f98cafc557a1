"""Calibration: recovers known coefficients from synthetic runs, reports and saves itself, and
reads real load-test files; measured concurrency limits from sweeps."""

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest

from gpucap.calibration.analysis import error_table, leave_one_model_out, lomo_summary, size_bucket
from gpucap.calibration.calibrate import calibrate
from gpucap.calibration.loadtests import cases_from_runs, measured_limit
from gpucap.calibration.results import read_results
from gpucap.calibration.validate import synthetic_cases as make_synthetic_cases
from gpucap.cli.main import main
from gpucap.physics.coefficients import Coefficients

from .conftest import ROOT

TRUTH = Coefficients(u_compute=0.62, u_hbm=0.71, overlap=0.3, t_overhead_s=3e-3, t_seq_s=10e-6, t_request_s=0.01)


def synthetic_cases(noise: float, seed: int = 1) -> pd.DataFrame:
    """Runs generated from TRUTH over three models, five concurrencies and two shapes, with
    multiplicative log-normal noise of ``noise`` on every measured value."""
    setups = (
        ("meta-llama/Llama-3.1-8B", "H100-SXM-80GB", 1),
        ("Qwen/Qwen3-32B", "H100-SXM-80GB", 2),
        ("meta-llama/Llama-3.3-70B-Instruct", "A100-SXM-80GB", 4),
    )
    return make_synthetic_cases(setups, (1, 4, 16, 64, 256), ((1000, 200), (4000, 500)), TRUTH, noise=noise, seed=seed)


@pytest.fixture(scope="module")
def fit():
    return calibrate(synthetic_cases(noise=0.05), start=dataclass_start())


def dataclass_start() -> Coefficients:
    # start away from the truth, with the fixed coefficients at their true values
    return Coefficients(u_compute=0.5, u_hbm=0.8, overlap=0.0, t_overhead_s=2e-3, t_seq_s=10e-6, t_request_s=0.01)


def test_recovers_known_coefficients_within_stated_uncertainty(fit) -> None:
    got = fit.coefficients.as_dict()
    for name in ("u_compute", "u_hbm", "overlap", "t_overhead_s"):
        assert abs(got[name] - getattr(TRUTH, name)) <= 3 * fit.stderr[name], name
    assert fit.stderr["u_compute"] < 0.05 and fit.success


def test_noise_free_fit_is_exact() -> None:
    exact = calibrate(
        synthetic_cases(noise=0.0),
        start=dataclass_start(),
        free=("u_compute", "u_hbm"),
        fixed={"overlap": 0.3, "t_overhead_s": 3e-3},
    )
    assert exact.coefficients.u_compute == pytest.approx(0.62, rel=1e-3)
    assert exact.coefficients.u_hbm == pytest.approx(0.71, rel=1e-3)


def test_report_json_and_html(fit, tmp_path) -> None:
    text = fit.report()
    for section in ("[[Fit statistics]]", "[[Coefficients]]", "[[Correlations]]", "u_compute", "+/-", "(fixed)"):
        assert section in text
    assert "<table>" in fit._repr_html_()
    path = fit.save(tmp_path / "coef.json")
    data = json.loads(path.read_text())
    assert data["coefficients"]["u_compute"]["stderr"] > 0
    assert data["provenance"]["rows_used"] == 30
    assert Coefficients.from_file(path) == fit.coefficients
    with pytest.raises(ValueError, match="exists"):
        fit.save(path)
    fit.save(path, overwrite=True)


def test_prediction_interval_brackets_the_prediction(fit) -> None:
    from gpucap.calibration.validate import prepare_cases

    prepared, _ = prepare_cases(synthetic_cases(0.0).iloc[:3])
    lo, mid, hi = fit.interval(prepared[2], "output_tok_s")
    assert lo < mid < hi and hi / lo < 1.5


def test_coefficient_without_effect_is_undetermined() -> None:
    # single-GPU runs have no communication: overlap changes nothing
    cases = synthetic_cases(0.05)
    single = cases[cases["tp"] == 1]
    result = calibrate(single, start=dataclass_start(), free=("u_compute", "overlap"))
    assert np.isinf(result.stderr["overlap"])
    assert "undetermined" in result.report()


def test_bad_requests() -> None:
    cases = synthetic_cases(0.05)
    with pytest.raises(ValueError, match="unknown coefficient"):
        calibrate(cases, free=("u_magic",))
    with pytest.raises(ValueError, match="every coefficient is fixed"):
        calibrate(cases, free=("u_hbm",), fixed={"u_hbm": 0.8})
    with pytest.raises(ValueError, match="cannot determine"):
        calibrate(cases.iloc[:1], free=("u_compute", "u_hbm", "overlap", "t_overhead_s"))


def test_measured_limit_interpolates_and_says_when_not_found() -> None:
    sweep = pd.DataFrame(
        {
            "concurrency": [1, 2, 4, 8, 16],
            "ttft_mean_s": [0.1, 0.2, 0.5, 1.5, 3.5],  # crosses 2 s between 8 and 16: 8 + (0.5 / 2) x 8 = 10
            "tpot_mean_s": [0.01, 0.02, 0.03, 0.05, 0.08],
        }
    )
    lim = measured_limit(sweep, ttft_slo_s=2.0, tpot_slo_s=0.1)
    assert lim.status == "interpolated" and lim.binding == "ttft" and lim.limit == pytest.approx(10.0)
    assert (lim.below, lim.above) == (8.0, 16.0)
    assert measured_limit(sweep, ttft_slo_s=10, tpot_slo_s=1).status == "not reached"
    assert measured_limit(sweep, ttft_slo_s=0.05, tpot_slo_s=1).status == "already violated"
    with pytest.raises(ValueError, match="tpot_p99_s"):
        measured_limit(sweep, stat="p99")


def test_real_load_tests_calibrate_and_improve_throughput() -> None:
    runs = read_results(ROOT / "data" / "loadtests" / "datacrunch-h200-sglang").runs
    cases = cases_from_runs(runs)
    assert len(cases) == 20 and set(cases["load_mode"]) == {"saturation", "poisson"}
    result = calibrate(cases, free=("u_compute", "t_overhead_s"))
    table = error_table(cases, result.coefficients, by="size")
    tput = table[table["metric"] == "output_tok_s"]
    assert (tput["median_abs_err_after"] <= tput["median_abs_err_before"] + 1e-9).all()
    assert set(table["size"]) == {"40-100B", ">100B"}


def test_leave_one_model_out_holds_each_model_out() -> None:
    cases = synthetic_cases(0.05)
    table = leave_one_model_out(cases, free=("u_compute", "u_hbm"))
    assert set(table["model"]) == set(cases["model"])
    # each held-out prediction comes from a fit without its model, so it differs from in-sample
    assert (table["ratio_held_out"] != table["ratio_in_sample"]).any()
    summary = lomo_summary(table, by=("metric",))
    assert set(summary["metric"]) == {"output_tok_s", "ttft_ms", "tpot_ms"} and (summary["n"] == 30).all()
    assert size_bucket("meta-llama/Llama-3.1-8B") == "<10B"


def test_cli_calibrate(tmp_path, capsys) -> None:
    out = tmp_path / "coef.json"
    folder = ROOT / "data" / "loadtests" / "datacrunch-h200-sglang"
    assert main(["calibrate", str(folder), "--out", str(out), "--free", "u_compute,t_overhead_s"]) == 0
    text = capsys.readouterr().out
    assert "[[Coefficients]]" in text and "median absolute error by model size" in text
    data = json.loads(out.read_text())
    assert {i["path"] for i in data["provenance"]["inputs"]} >= {str(folder / "manifest.json")}
    assert main(["calibrate", str(folder), "--out", str(out)]) == 2  # never overwrites silently
    assert "exists" in capsys.readouterr().err
    assert (
        main(
            [
                "estimate",
                "--model",
                "Qwen/Qwen3-8B",
                "--gpu",
                "H100-SXM-80GB",
                "--input-len",
                "500",
                "--output-len",
                "100",
                "--coefficients",
                str(out),
            ]
        )
        == 0
    )
    assert main(["calibrate", str(folder), "--out", str(tmp_path / "x.json"), "--fix", "u_hbm"]) == 2


def test_cli_checks_out_before_the_fit(tmp_path, capsys) -> None:
    folder = ROOT / "data" / "loadtests" / "datacrunch-h200-sglang"
    cases_csv = tmp_path / "cases.csv"
    cases_from_runs(read_results(folder).runs).to_csv(cases_csv, index=False)
    before = cases_csv.read_text()
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "nowhere.json")
    for out, extra, says in (
        (tmp_path / "missing" / "fit.json", [], "does not exist"),
        (tmp_path, [], "is a folder"),
        (link, [], "symbolic link"),
        (cases_csv, ["--overwrite"], "one of the inputs"),
    ):
        assert main(["calibrate", str(cases_csv), "--out", str(out), *extra]) == 2
        assert says in capsys.readouterr().err
    assert cases_csv.read_text() == before and not (tmp_path / "nowhere.json").exists()


def test_partial_coefficients_file_keeps_the_engines_defaults(tmp_path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"u_compute": 0.4}))
    vllm = Coefficients.from_file(path, "vllm")
    # vLLM's measured front end (engine.HTTP_FRONT_END: 10 ms) stays; only u_compute changes
    assert vllm.t_frontend_s == 0.010 and vllm.u_compute == 0.4
    assert vllm == dataclasses.replace(Coefficients.for_engine("vllm"), u_compute=0.4)
    for bad, says in (({"u_compute": True}, "not a finite number"), ({"u_hbm": 7.0}, "outside its physical range")):
        path.write_text(json.dumps(bad))
        with pytest.raises(ValueError, match=says):
            Coefficients.from_file(path, "vllm")
    with pytest.raises(ValueError, match="is a folder"):
        Coefficients.from_file(tmp_path)


def test_a_fit_from_several_starts_keeps_the_lowest_minimum_and_names_an_equal_one() -> None:
    """Residuals with two minima. ``(u - 0.3)(u - 0.8)`` is zero at both roots: from the default
    u_compute 0.5 the solver reaches 0.3 (Gauss-Newton steps downhill from 0.5), from the second
    start, two thirds of [0.05, 1] = 0.683, it reaches 0.8; as good and apart, 0.8 is named.
    Adding ``0.1 (u - 0.8)`` makes 0.8 the only zero: the start at 0.5 stops near 0.3 (cost
    0.5 x 0.05^2 there), and three starts keep 0.8 and name nothing."""
    from gpucap.calibration.uncertainty import fit_least_squares

    free = ("u_compute",)
    start = Coefficients(u_compute=0.5)

    def two_zeros(x: np.ndarray) -> np.ndarray:
        return np.array([(x[0] - 0.3) * (x[0] - 0.8)])

    best, _, others = fit_least_squares(two_zeros, start, free, "linear", starts=3)
    assert best.x[0] == pytest.approx(0.3, abs=1e-6)
    assert [round(float(o.x[0]), 6) for o in others] == [0.8]

    def one_zero(x: np.ndarray) -> np.ndarray:
        return np.array([(x[0] - 0.3) * (x[0] - 0.8), 0.1 * (x[0] - 0.8)])

    alone, _, _ = fit_least_squares(one_zero, start, free, "linear", starts=1)
    assert alone.x[0] < 0.5 and alone.cost > 1e-4
    best, _, others = fit_least_squares(one_zero, start, free, "linear", starts=3)
    assert best.x[0] == pytest.approx(0.8, abs=1e-6) and best.cost < 1e-12
    assert others == []


def test_a_coefficient_hidden_at_the_start_does_not_slow_the_fit() -> None:
    """As vLLM's host time hides under the GPU's in ``max(t_gpu, t_overhead)``: the residuals
    ``(a + 0.98 b - 1.5)(1 + t / 20) + 100 max(c, 3 ms) - 0.3`` (plus a 1% wiggle) do not
    change with c below 3 ms, and it starts at 2 ms (its Jacobian column is zero), and a and b trade
    off along a valley. The minimum is the line a + 0.98 b = 1.5 (the wiggle moves it by under
    0.01). Trust-region steps by the SVD of the Jacobian zig-zag down the valley for 23
    evaluations; by LSMR (``_solve``) the fit takes 6. c stays where it started."""
    from gpucap.calibration.uncertainty import fit_least_squares

    t = np.linspace(0.0, 1.0, 40)
    free = ("u_compute", "u_hbm", "t_overhead_s")
    bounds = (np.zeros(3), np.array([2.0, 2.0, 0.05]))

    def hidden(x: np.ndarray) -> np.ndarray:
        a, b, c = x
        return (a + 0.98 * b - 1.5) * (1 + 0.05 * t) + 100 * np.maximum(c, 0.003) - 0.3 + 0.01 * np.sin(7 * t)

    start = Coefficients(u_compute=0.2, u_hbm=0.3, t_overhead_s=0.002)
    best, _, _ = fit_least_squares(hidden, start, free, "soft_l1", bounds)
    assert best.x[0] + 0.98 * best.x[1] == pytest.approx(1.5, abs=0.01)
    assert best.x[2] == 0.002
    assert best.nfev <= 12


@pytest.mark.parametrize("starts", [0, -1, 1.5, True])
def test_starts_must_be_a_whole_number_of_at_least_one(starts: object) -> None:
    cases = synthetic_cases(noise=0.0).head(8)
    with pytest.raises(ValueError, match="starts must be a whole number >= 1"):
        calibrate(cases, starts=starts)  # type: ignore[arg-type]


def test_each_coefficient_is_one_record(fit) -> None:
    """A free coefficient's record holds its value, start, stderr, bounds and their source and
    its correlations (symmetric, as the matrix); a fixed one says so; the report prints the
    records and the JSON keeps their bounds. u_compute's bounds are 0.05-1 (COEFFICIENT_INFO:
    a twentieth of the tensor-core peak up to all of it)."""
    recs = fit.records
    assert list(recs) == list(fit.coefficients.as_dict())
    u = recs["u_compute"]
    assert (u.free, u.value, u.init, u.stderr) == (True, fit.coefficients.u_compute, 0.5, fit.stderr["u_compute"])
    assert (u.lower, u.upper) == (0.05, 1.0) and "tensor-core peak" in u.source
    assert u.correlation["u_hbm"] == pytest.approx(recs["u_hbm"].correlation["u_compute"], rel=1e-9)
    fixed = recs["t_seq_s"]
    assert not fixed.free and np.isnan(fixed.stderr) and fixed.line().endswith("(fixed)")
    assert all(rec.line() in fit.report() for rec in recs.values())
    assert fit.to_dict()["coefficients"]["u_compute"]["bounds"] == [0.05, 1.0]


def test_the_starts_are_a_latin_square_over_the_bounds() -> None:
    """Two starts over u_compute [0.05, 1] and u_hbm [0.3, 1] (COEFFICIENT_INFO): thirds of each
    range, u_compute low with u_hbm high, then the other way round: (0.3667, 0.7667) and (0.6833,
    0.5333)."""
    from gpucap.calibration.uncertainty import spread_starts

    a, b = spread_starts((np.array([0.05, 0.3]), np.array([1.0, 1.0])), 2)
    assert a == pytest.approx([0.05 + 0.95 / 3, 0.3 + 0.7 * 2 / 3])
    assert b == pytest.approx([0.05 + 0.95 * 2 / 3, 0.3 + 0.7 / 3])
