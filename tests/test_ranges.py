"""Ranges on answers (gpucap.calibration.ranges): quantiles, groups, coverage, the SLO concurrency range, and
what the estimate and a calibration do with them. Expected numbers are worked by hand."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

import gpucap
from gpucap.calibration.ranges import (
    Band,
    band_quantiles,
    bands_from_coefficients,
    build_table,
    coverage,
    find_band,
    range_slos,
    read_table,
    weighted_quantile,
)
from gpucap.config import SLO


def test_equal_weights_are_hazen_quantiles():
    # values 1..4 sit at F = 1/8, 3/8, 5/8, 7/8; F = 1/4 is halfway from 1 to 2
    v = np.array([4.0, 1.0, 3.0, 2.0])
    assert weighted_quantile(v, np.ones(4), 0.25) == pytest.approx(1.5)
    assert weighted_quantile(v, np.ones(4), 0.5) == pytest.approx(2.5)
    assert weighted_quantile(v, np.ones(4), 0.05) == 1.0  # below the first position: the smallest


def test_each_source_weighs_the_same():
    # source A: three runs at log ratio 0, weight 1/3 each; B: one run at 1, weight 1.
    # cumulative weights 1/3, 2/3, 1, 2 of 2: F = 1/12, 3/12, 5/12, 9/12, so the median lies
    # (6/12 - 5/12) / (9/12 - 5/12) = 1/4 of the way from 0 to 1
    lo, hi = band_quantiles([0.0, 0.0, 0.0, 1.0], level=0.0, sources=["A", "A", "A", "B"])
    assert math.log(lo) == pytest.approx(0.25) and math.log(hi) == pytest.approx(0.25)
    # counted as runs, the median is 0 (two of four at 0 below F = 1/2 ... 5/8)
    lo, _ = band_quantiles([0.0, 0.0, 0.0, 1.0], level=0.0)
    assert lo == pytest.approx(1.0)


def _runs(rows: list[tuple[str, str, str, str, float]]) -> pd.DataFrame:
    """Runs of (source, engine, load_mode, model_class, measured / predicted) on every metric."""
    out = []
    for source, engine, mode, cls, ratio in rows:
        r = {"source_id": source, "engine": engine, "load_mode": mode, "model_class": cls}
        for m in ("output_tok_s", "ttft_ms", "tpot_ms"):
            r[f"{m}_measured"], r[f"{m}_predicted"] = 100.0 * ratio, 100.0
        out.append(r)
    return pd.DataFrame(out)


def test_groups_need_two_sources_and_fall_back():
    rows = [("A", "vllm", "poisson", "dense", 1.0)] * 8 + [("B", "sglang", "poisson", "dense", 2.0)] * 8
    table = build_table(_runs(rows), min_runs=8)
    # neither engine has two sources, so the first group is the load mode's (16 runs, A and B)
    band = find_band(table, "ttft_ms", engine="vllm", load_mode="poisson", model_class="dense")
    assert band is not None and band.group == "poisson" and band.runs == 16
    # 10% and 90% of the source-weighted distribution: 8 runs at 0 then 8 at log 2, each 1/16
    # of the weight: F runs 1/32 ... 31/32, so the 10% point is log 1 = 0 and the 90% log 2
    assert band.f_low == pytest.approx(1.0) and band.f_high == pytest.approx(2.0)
    # a load mode nobody measured falls back to all runs
    other = find_band(table, "ttft_ms", engine="vllm", load_mode="saturation", model_class="moe")
    assert other is not None and other.group == "all runs"


def test_coverage_leaves_each_source_out():
    # A and B agree (ratio 1), C is twice as slow: built without C, C's runs lie outside;
    # built without A, A's runs lie at the band's low edge (B at 1, C at 2: inside)
    rows = (
        [("A", "vllm", "poisson", "dense", 1.0)] * 4
        + [("B", "vllm", "poisson", "dense", 1.0)] * 4
        + [("C", "vllm", "poisson", "dense", 2.0)] * 4
    )
    cov = coverage(_runs(rows), min_runs=4)
    got = cov[cov["metric"] == "ttft_ms"].set_index("source_id")["inside"].to_dict()
    assert got == {"A": 4, "B": 4, "C": 0}


def test_the_concurrency_ranges_ends_divide_each_slo_by_its_factor():
    band = Band("ttft_ms", 0.5, 1.5, 10, "g")
    flat = Band("tpot_ms", 0.8, 1.25, 10, "g")
    # the low end: latencies 1.5 x (TTFT) and 1.25 x (TPOT) the prediction meet 1.2 s and 50 ms
    # where the predictions meet 0.8 s and 40 ms; the high end: 0.5 x and 0.8 x, 2.4 s and 62.5 ms
    low, high = range_slos(SLO(ttft_s=1.2, tpot_s=0.05), {"ttft_ms": band, "tpot_ms": flat})
    assert (low.ttft_s, low.tpot_s) == pytest.approx((0.8, 0.04))
    assert (high.ttft_s, high.tpot_s) == pytest.approx((2.4, 0.0625))
    assert range_slos(SLO(), {"ttft_ms": band}) is None


def test_bad_tables_name_the_file_and_line(tmp_path):
    cols = "metric,engine,load_mode,model_class,runs,sources,f_low,f_high,level\n"
    p = tmp_path / "ranges.csv"
    p.write_text(cols + "ttft_ms,,,,10,2,-1,2,0.8\n")
    with pytest.raises(ValueError, match=r"ranges.csv: f_low on line 2 is .*not a positive number"):
        read_table(p)
    p.write_text(cols + "ttft_ms,,,,10,2,3,2,0.8\n")
    with pytest.raises(ValueError, match="f_low exceeds f_high on line 2"):
        read_table(p)
    p.write_text("metric,runs\nttft_ms,3\n")
    with pytest.raises(ValueError, match="missing column"):
        read_table(p)
    c = tmp_path / "coef.json"
    c.write_text(
        json.dumps({"coefficients": {}, "ranges": {"ttft_ms": {"f_low": 2, "f_high": 1, "runs": 5, "level": 0.8}}})
    )
    with pytest.raises(ValueError, match=r"coef.json: ranges.ttft_ms has f_low 2"):
        bands_from_coefficients(c)


SETUP = dict(tp=8, input_len=2000, output_len=500, ttft_slo_s=2.0, tpot_slo_s=0.05)


def test_estimate_applies_a_calibrations_bands(tmp_path):
    base = gpucap.estimate("meta-llama/Llama-3.3-70B-Instruct", "H100-SXM-80GB", 8, **SETUP)
    c = tmp_path / "coef.json"
    # factors of exactly 1 on both latencies: the concurrency range collapses onto the recommendation
    one = {"f_low": 1.0, "f_high": 1.0, "runs": 5, "level": 0.8}
    half_double = {"f_low": 0.5, "f_high": 2.0, "runs": 5, "level": 0.8}
    c.write_text(
        json.dumps({"coefficients": {}, "ranges": {"ttft_ms": one, "tpot_ms": one, "output_tok_s": half_double}})
    )
    e = gpucap.estimate("meta-llama/Llama-3.3-70B-Instruct", "H100-SXM-80GB", 8, **SETUP, coefficients=c)
    assert e.recommended_concurrency == base.recommended_concurrency  # same coefficients
    r = e.ranges["recommended_concurrency"]
    assert r.low == r.high == e.recommended_concurrency
    tput = e.ranges["output_tokens_per_s"]
    assert (tput.low, tput.high) == pytest.approx((e.output_tokens_per_s / 2, e.output_tokens_per_s * 2))
    assert "calibration's" in tput.band.basis
    # the shipped table's bands: the range holds the recommendation, and is named in the text
    rc = base.ranges["recommended_concurrency"]
    assert rc.low <= base.recommended_concurrency <= rc.high
    assert "80% range" in str(base) and base.to_dict()["ranges"]["ttft_s"]["level"] == 0.8
