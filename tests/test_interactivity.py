"""The throughput-interactivity frontier (gpucap.planning.interactivity)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gpucap.catalog.prices import Prices
from gpucap.cli.main import main
from gpucap.planning.interactivity import interactivity_frontier, pareto

LLAMA_70B = "meta-llama/Llama-3.3-70B-Instruct"


def test_pareto_by_hand():
    # (per user, per GPU): E beats B (more of both) and C; A, D and E trade one for the other
    user = np.array([10.0, 20.0, 15.0, 5.0, 20.0])
    gpu = np.array([100.0, 90.0, 80.0, 150.0, 95.0])
    assert pareto(user, gpu, np.ones(5, bool)).tolist() == [True, False, False, True, True]
    # a point that misses the TTFT SLO is not on the front, and does not push others off it
    assert pareto(user, gpu, np.array([True, True, True, True, False])).tolist() == [True, True, False, True, False]


def test_curves_trade_interactivity_for_throughput():
    prices = Prices({"H200-SXM-141GB": 4.0})
    table, skipped = interactivity_frontier(
        LLAMA_70B,
        ["H200-SXM-141GB"],
        input_len=2000,
        output_len=500,
        tp=(1, 4, 8),
        weight_dtypes=("fp8",),
        prices=prices,
    )
    assert table["tp"].unique().tolist() == [1, 4, 8] and not skipped
    for _, part in table.groupby("tp"):
        part = part.sort_values("concurrency")
        # more requests in flight: more tokens per GPU (flat once the batch is full), fewer per user
        per_gpu = part["tokens_per_s_per_gpu"].to_numpy()
        assert np.all(np.diff(per_gpu) >= -1e-9 * per_gpu[1:]) and per_gpu[-1] > 5 * per_gpu[0]
        assert np.all(np.diff(part["tokens_per_s_per_user"]) <= 1e-9)
    row = table.iloc[0]
    assert row["usd_per_million_output_tokens"] == pytest.approx(4.0 / (row["tokens_per_s_per_gpu"] * 3600) * 1e6)
    # the most interactive point of all is on the front (nothing beats it on interactivity)
    assert table.loc[table["tokens_per_s_per_user"].idxmax(), "pareto"]


def test_a_ttft_slo_nothing_meets_empties_the_front():
    table, _ = interactivity_frontier(
        LLAMA_70B, ["H200-SXM-141GB"], input_len=2000, output_len=500, tp=(8,), ttft_slo_s=1e-4
    )
    assert not table["meets_ttft_slo"].any() and not table["pareto"].any()


def test_options_that_do_not_fit_are_named(capsys):
    table, skipped = interactivity_frontier(LLAMA_70B, ["H100-SXM-80GB"], input_len=2000, output_len=500, tp=(1, 4))
    assert set(table["tp"]) == {4} and len(skipped) == 1 and "tp=1" in skipped[0] and "does not fit" in skipped[0]
    with pytest.raises(ValueError, match="no option fits"):
        interactivity_frontier(LLAMA_70B, ["L4-24GB"], input_len=2000, output_len=500, tp=(1,))
    assert main(["frontier", "--model", LLAMA_70B, "--gpus", "H200-SXM-141GB", "--tp", "8", "--input-len", "1000",
                 "--output-len", "200", "--ttft-slo", "2"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "tok/s/GPU" in out and "the Pareto front" in out
    assert isinstance(table, pd.DataFrame)
