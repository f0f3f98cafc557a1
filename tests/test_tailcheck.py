"""The planner's tail model against the engine loop (gpucap.planning.tailcheck), on cases where the
mechanisms differ: short chat prompts whose first tokens wait for the step in progress and ride with
the prompts gathered meanwhile; 2000-token prompts that queue for the token budget; a long-prompt
workload with dataset-like tails whose stalls spread TPOT. The full grid (MoE, tp, pp, 16k prompts,
90% of the service rate) is ``benchmarks/tailgrid.py``, its figures in benchmarks/README.md.

The test is the issue's: within 25% where the simulation is below 10x the SLO, never optimistic by
more than 25% at the SLO's edge. Simulated P99s of 3000 requests move by 10-20% from seed to seed;
the seeds are fixed."""

import numpy as np
import pandas as pd
import pytest

from gpucap.config import hardware
from gpucap.physics.coefficients import Coefficients
from gpucap.planning.capacity import simulated_run
from gpucap.planning.tailcheck import TailCase, compare_tails, judge
from gpucap.queueing.lengths import Lengths

COEF = Coefficients.for_engine("vllm")
CHAT = (
    Lengths.percentiles({5: 30, 50: 128, 90: 500, 99: 1500}, "chat prompts"),
    Lengths.percentiles({5: 20, 50: 200, 90: 600, 99: 1200}, "chat outputs"),
)
CASES = [
    TailCase("8B H100, chat", hardware("meta-llama/Llama-3.1-8B", "H100-SXM-80GB"), *CHAT),
    TailCase(
        "70B H200 fp8, 2000/300",
        hardware("meta-llama/Llama-3.3-70B-Instruct", "H200-SXM-141GB", weight_dtype="fp8", kv_dtype="fp8"),
        Lengths.fixed(2000),
        Lengths.fixed(300),
    ),
]


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    frames = [compare_tails(case, COEF, (0.3, 0.6, 0.8), num_requests=3000, seed=11) for case in CASES]
    return judge(pd.concat(frames, ignore_index=True), ttft_slo_s=2.0, tpot_slo_s=0.1)


def test_tail_model_agrees_with_the_engine_loop(table: pd.DataFrame) -> None:
    bad = table[~table["ok"]]
    assert bad.empty, bad[["case", "utilization", "metric", "stat", "analytic_s", "simulated_s", "ratio"]].to_string()


def test_the_grid_reaches_the_tail(table: pd.DataFrame) -> None:
    """The test is not vacuous: the 70B case's simulated P99 TTFT passes 2 s at 80% of the service
    rate (the tail the old model put at 0.6 s), and cells at the SLO's edge are judged."""
    p99 = table[(table["case"] == CASES[1].label) & (table["metric"] == "ttft") & (table["stat"] == "p99")]
    assert float(p99[p99["utilization"] == 0.8]["simulated_s"].iloc[0]) > 2.0
    assert int(table["edge"].sum()) >= 2
    assert bool(table["judged"].all())


def test_judge_flags_an_optimistic_edge() -> None:
    """A made-up row: simulated at the SLO, analytic half of it: judged, not within, optimistic."""
    row = pd.DataFrame(
        [{"case": "x", "utilization": 0.8, "request_rate": 1.0, "stat": "p99", "metric": "ttft",
          "analytic_s": 1.0, "simulated_s": 2.0, "ratio": 0.5}]
    )  # fmt: skip
    out = judge(row, ttft_slo_s=2.0, tpot_slo_s=0.1).iloc[0]
    assert out["judged"] and not out["within"] and out["edge"] and out["optimistic"] and not out["ok"]


def test_compare_rejects_a_mean() -> None:
    with pytest.raises(ValueError, match="percentiles"):
        compare_tails(CASES[0], COEF, (0.5,), stats=("mean",), num_requests=10)


def test_runs_pool_their_requests() -> None:
    """Two runs at a utilization are one sample of both runs' requests: the pooled P90 TTFT is the
    90th percentile of the two runs' TTFTs together (seeds ``seed`` and ``seed + 1000``), which
    lies between the two runs' own."""
    case, u, n = CASES[0], 0.5, 400
    row = compare_tails(case, COEF, (u,), num_requests=n, seed=3, runs=2)
    rate = float(row["request_rate"].iloc[0])
    sims = [
        simulated_run(case.hw, COEF, inp=case.inp, out=case.out, rate=rate, max_running=case.slots,
                      kv_capacity_tokens=case.kv_tokens, burstiness=1.0, seed=s, num_requests=n)
        for s in (3, 1003)
    ]  # fmt: skip
    both = np.concatenate([s.ttft_s for s in sims])
    got = row[(row["metric"] == "ttft") & (row["stat"] == "p90")]["simulated_s"].iloc[0]
    assert got == pytest.approx(np.percentile(both, 90), rel=1e-12)
    own = sorted(float(np.percentile(s.ttft_s, 90)) for s in sims)
    assert own[0] <= got <= own[1]
    with pytest.raises(ValueError, match="runs must be"):
        compare_tails(case, COEF, (u,), num_requests=10, runs=0)


def test_the_interval_over_runs_holds_the_runs_own_spread() -> None:
    """``run_interval`` resamples whole runs: with two runs every resample is run A twice, run B
    twice, or both, so the interval lies between the percentile of A alone and of B alone, and
    reaches both ends (200 resamples of two: each one-run draw has probability 1/4). Identical
    runs give a point. One run: no interval."""
    from gpucap.planning.tailcheck import run_interval

    a, b = np.arange(100.0), np.arange(100.0) + 50.0
    lo, hi = run_interval([a, b], 90.0, seed=1)
    assert lo == pytest.approx(np.percentile(a, 90)) and hi == pytest.approx(np.percentile(b, 90))
    assert run_interval([a, a], 90.0) == (pytest.approx(89.1), pytest.approx(89.1))
    assert all(np.isnan(run_interval([a], 90.0)))


def test_a_row_outside_25_percent_but_near_the_runs_interval_is_marked() -> None:
    """Analytic 1.0 s against a pooled 1.5 s (ratio 0.67) fails; with the runs' interval [1.2, 2.0]
    it lies within 25% of 1.2 (1.0 >= 0.75 x 1.2 = 0.9): ``within_interval``, still not ``ok``."""
    row = pd.DataFrame(
        [{"metric": "ttft", "stat": "p99", "analytic_s": 1.0, "simulated_s": 1.5, "ratio": 1.0 / 1.5,
          "simulated_lo_s": 1.2, "simulated_hi_s": 2.0}]
    )  # fmt: skip
    out = judge(row, ttft_slo_s=2.0, tpot_slo_s=0.1).iloc[0]
    assert out["within_interval"] and not out["ok"]
    far = judge(row.assign(simulated_lo_s=1.4), ttft_slo_s=2.0, tpot_slo_s=0.1).iloc[0]
    assert not far["within_interval"]
