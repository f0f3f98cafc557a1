"""Calibration history: appended after each load test, read back as a tidy table, and what
changed since the last calibration, with the corrupt-file cases."""

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest

from gpucap.calibration.calibrate import calibrate
from gpucap.calibration.history import HISTORY_NAME, append_history, calibration_history, history_limits, what_changed
from gpucap.calibration.validate import synthetic_cases
from gpucap.cli.main import main
from gpucap.config import SLO
from gpucap.physics.coefficients import Coefficients
from gpucap.report.plots import history_figure

TRUTH = Coefficients(u_compute=0.62, u_hbm=0.71, overlap=0.3, t_overhead_s=3e-3, t_seq_s=10e-6, t_request_s=0.01)
SLOWER = dataclasses.replace(TRUTH, u_compute=0.45)  # the same box after, say, a power cap
LEVELS = np.unique(np.round(np.geomspace(1, 256, 16)))
SLO = SLO(1.0, 0.05)


def runs(truth: Coefficients, seed: int) -> pd.DataFrame:
    setup = (("meta-llama/Llama-3.1-8B", "H100-SXM-80GB", 1),)
    return synthetic_cases(setup, LEVELS, ((2000, 200), (500, 500)), truth, noise=0.02, seed=seed)


@pytest.fixture(scope="module")
def fits():
    # fitted to the runs (the limits are shown, not fitted): with the limits as targets too, read
    # off each noisy sweep by interpolation, u_compute scatters by 0.006 over five seeds against a
    # standard error of 0.002 (the covariance misses it); on the runs alone the two agree
    kw = dict(start=TRUTH, free=("u_compute", "u_hbm"), targets=("runs",), slo=SLO)
    return calibrate(runs(TRUTH, 1), **kw), calibrate(runs(TRUTH, 2), **kw), calibrate(runs(SLOWER, 3), **kw)


def test_history_appends_and_reads_back(fits, tmp_path) -> None:
    first, again, _ = fits
    path = append_history(first, tmp_path, label="week 1")
    assert path == tmp_path / HISTORY_NAME
    append_history(again, tmp_path, label="week 2")
    table = calibration_history(tmp_path)
    assert list(table["entry"].unique()) == [1, 2] and list(table["label"].unique()) == ["week 1", "week 2"]
    u = table[(table["coefficient"] == "u_compute") & (table["entry"] == 2)].iloc[0]
    assert u["value"] == again.coefficients.u_compute and u["stderr"] == again.stderr["u_compute"] and u["free"]
    assert not table[table["coefficient"] == "t_seq_s"]["free"].any()
    assert len(history_limits(tmp_path)) == 4  # two sweeps per calibration


def test_what_changed_tells_noise_from_a_slower_box(fits, tmp_path) -> None:
    first, again, slower = fits
    same, moved = tmp_path / "same.jsonl", tmp_path / "moved.jsonl"
    for fit in (first, again):
        append_history(fit, same)
    for fit in (first, slower):
        append_history(fit, moved)
    coef, limits = what_changed(same)
    # two load tests of the same box differ by their 2% noise only: nothing moved
    assert not coef["moved"].any() and not limits["moved"].any()
    coef, limits = what_changed(moved)
    row = coef.set_index("coefficient").loc["u_compute"]
    assert row["moved"] and row["after"] == pytest.approx(0.45, rel=0.05)
    assert limits["moved"].all() and (limits["fitted_after"] < limits["fitted_before"]).all()
    fig = history_figure(calibration_history(moved))
    assert len(fig.axes) == 2


def test_corrupt_history_is_named_and_never_written(fits, tmp_path) -> None:
    path = tmp_path / "h.jsonl"
    append_history(fits[0], path)
    with path.open("a") as f:
        f.write("{not json\n")
    text = path.read_text()
    with pytest.raises(ValueError, match=r"h.jsonl, line 2: not JSON"):
        calibration_history(path)
    with pytest.raises(ValueError, match="line 2"):
        append_history(fits[1], path)
    assert path.read_text() == text
    other = tmp_path / "list.jsonl"
    other.write_text(json.dumps([1, 2]) + "\n")
    with pytest.raises(ValueError, match="line 1: not a calibration"):
        calibration_history(other)
    one = tmp_path / "one.jsonl"
    append_history(fits[0], one)
    with pytest.raises(ValueError, match="nothing to compare"):
        what_changed(one)
    with pytest.raises(ValueError, match="no calibration history"):
        calibration_history(tmp_path / "missing.jsonl")


def test_cli_appends_to_the_history(tmp_path, capsys) -> None:
    from .test_limits import small_cases_csv

    history = tmp_path / "history.jsonl"
    args = ["calibrate", small_cases_csv(tmp_path), "--free", "u_compute", "--history", str(history)]
    assert main([*args, "--out", str(tmp_path / "a.json"), "--label", "first"]) == 0
    assert calibration_history(history)["label"].unique().tolist() == ["first"]
    history.write_text(history.read_text() + "oops\n")
    capsys.readouterr()
    assert main([*args, "--out", str(tmp_path / "b.json")]) == 2
    assert "line 2" in capsys.readouterr().err and not (tmp_path / "b.json").exists()
