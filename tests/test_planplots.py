"""Capacity-planning figures and the planner widgets (gpucap.report.planplots, gpucap.app.planwidgets): the
cost-vs-SLO frontier never gets cheaper as an SLO tightens, the latency knee keeps P99 above P50
and rises with the arrival rate, and a Run of the widgets shows what ``plan`` returns."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest

from gpucap.config import hardware
from gpucap.planning.capacity import Headroom
from gpucap.planning.search import plan
from gpucap.report.planplots import (
    CHEAPEST,
    frontier,
    frontier_figure,
    latency_vs_rate,
    latency_vs_rate_figure,
    rejected_counts,
    simulated_latency,
)

MODEL = "meta-llama/Llama-3.1-8B"
RATE = 12.0  # requests/s
IN, OUT = 2000, 300
SMALL = dict(gpu_counts=[1, 2], weight_dtypes=["fp8"], kv_dtypes=["auto"])
H100_PRICE, L40S_PRICE = 3.00, 1.50  # $/GPU-hour, the test's own price file


@pytest.fixture()
def prices(tmp_path):
    path = tmp_path / "prices.csv"
    path.write_text(f"gpu,usd_per_gpu_hour\nH100-SXM-80GB,{H100_PRICE}\nL40S-48GB,{L40S_PRICE}\n")
    return path


@pytest.fixture(scope="module")
def h100():
    return hardware(MODEL, "H100-SXM-80GB", weight_dtype="fp8")


@pytest.fixture(scope="module")
def knee(h100) -> pd.DataFrame:
    return latency_vs_rate(h100, input_len=IN, output_len=OUT, points=40)


def non_increasing_where_defined(costs: np.ndarray) -> bool:
    """Costs ordered from the tightest SLO to the loosest: once a plan exists it keeps existing,
    and it never costs more as the SLO loosens."""
    ok = np.isfinite(costs)
    if ok.any():
        first = int(np.argmax(ok))
        if not ok[first:].all():
            return False
        return bool(np.all(np.diff(costs[first:]) <= 1e-9 * costs[first:-1] if costs[first:].size > 1 else True))
    return True


# ---- frontier --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("slo", "values", "other"),
    [
        ("ttft", [0.15, 0.3, 0.6, 1.2, 2.4], {"tpot_slo_s": 0.05}),
        ("tpot", [0.01, 0.02, 0.04, 0.08], {"ttft_slo_s": 1.0}),
    ],
)
def test_frontier_never_cheaper_as_the_slo_tightens(prices, slo, values, other) -> None:
    gpus = ["H100-SXM-80GB", "L40S-48GB"]
    f = frontier(
        MODEL,
        slo=slo,
        slo_values_s=values,
        input_len=IN,
        output_len=OUT,
        target_request_rate=RATE,
        gpus=gpus,
        prices=prices,
        **SMALL,
        **other,
    )
    assert set(f["gpu"]) == {*gpus, CHEAPEST}
    assert f.groupby("gpu")["cost_per_hour"].nunique(dropna=False).max() > 1  # the SLO range moves some cost
    assert len(f) == len(values) * (len(gpus) + 1)  # one row per SLO value and GPU, plans or not
    for gpu, rows in f.groupby("gpu"):
        costs = rows.sort_values("slo_s")["cost_per_hour"].to_numpy(dtype=float)
        assert non_increasing_where_defined(costs), (gpu, costs)
    # the cheapest of all is the lowest GPU line at every SLO value
    for value, rows in f.groupby("slo_s"):
        per_gpu = rows[rows["gpu"] != CHEAPEST]["cost_per_hour"]
        best = rows[rows["gpu"] == CHEAPEST]["cost_per_hour"].iloc[0]
        assert (math.isnan(best) and per_gpu.isna().all()) or best == pytest.approx(per_gpu.min()), value
    # cost by hand: GPUs x $/GPU-hour, and $/M tokens = $/hour / (12 req/s x 300 tokens x 3600 s) x 1e6
    planned = f[f["cost_per_hour"].notna() & (f["gpu"] != CHEAPEST)]
    assert not planned.empty
    price = planned["gpu"].map({"H100-SXM-80GB": H100_PRICE, "L40S-48GB": L40S_PRICE})
    assert np.allclose(planned["cost_per_hour"], planned["total_gpus"] * price)
    assert np.allclose(planned["cost_per_million_output_tokens"], planned["cost_per_hour"] / (RATE * OUT * 3600) * 1e6)
    # the frontier's points are plan()'s cheapest options at those SLOs
    value = float(planned["slo_s"].max())
    direct = plan(
        MODEL,
        **{f"{slo}_slo_s": value},
        **other,
        input_len=IN,
        output_len=OUT,
        target_request_rate=RATE,
        gpus=gpus,
        prices=prices,
        **SMALL,
    )
    row = f[(f["slo_s"] == value) & (f["gpu"] == CHEAPEST)].iloc[0]
    assert row["cost_per_hour"] == pytest.approx(direct.best["cost_per_hour"])
    fig = frontier_figure(f)
    (legend,) = fig.legends  # one legend for the figure: a GPU has one look in every panel
    labels = [t.get_text() for t in legend.get_texts()]
    assert set(labels) == {*gpus, CHEAPEST}


def test_frontier_lines_of_fifteen_gpu_types_have_fifteen_colours() -> None:
    from matplotlib.colors import to_hex

    gpus = [f"GPU-{k:02d}" for k in range(15)]
    rows = [
        {"slo": "ttft", "slo_s": slo, "stat": "p99", "gpu": g, "cost_per_hour": 10.0 + k / slo, "total_gpus": 4,
         "cost_per_million_output_tokens": 1.0 + k / slo}
        for k, g in enumerate([*gpus, CHEAPEST]) for slo in (0.5, 1.0, 2.0)
    ]  # fmt: skip
    fig = frontier_figure(pd.DataFrame(rows))
    lines = [line for line in fig.axes[0].get_lines() if line.get_label() in gpus]
    assert len(lines) == 15
    assert len({to_hex(line.get_color()) for line in lines}) == 15  # no two GPU types share a colour
    assert to_hex("0.6") not in {to_hex(line.get_color()) for line in lines}  # nor the cheapest-of-all band's grey
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == [CHEAPEST, *gpus]


def test_frontier_refuses_bad_input(prices) -> None:
    kw = dict(input_len=IN, output_len=OUT, target_request_rate=RATE, prices=prices)
    with pytest.raises(ValueError, match="'latency'"):
        frontier(MODEL, slo="latency", slo_values_s=[1.0], **kw)
    with pytest.raises(ValueError, match="ttft_slo_s is what the frontier varies"):
        frontier(MODEL, slo="ttft", slo_values_s=[1.0], ttft_slo_s=2.0, **kw)
    with pytest.raises(ValueError, match=r"\[1.0, -2.0\]"):
        frontier(MODEL, slo="tpot", slo_values_s=[1.0, -2.0], **kw)
    with pytest.raises(ValueError, match="empty"):
        frontier_figure(pd.DataFrame(columns=["slo"]))


# ---- the latency knee ------------------------------------------------------------------------------
def test_knee_percentiles_are_ordered_and_rise_with_the_rate(knee) -> None:
    mu = knee.attrs["service_rate"]
    rate = knee["request_rate"].to_numpy()
    assert mu > 0 and np.all(np.diff(rate) > 0) and rate[-1] < mu  # the default grid stays below the service rate
    assert np.allclose(knee["utilization"], rate / mu)
    assert knee["stable"].all()
    for name in ("ttft", "tpot", "e2e"):
        p50, p95, p99 = (knee[f"{name}_{s}_s"].to_numpy() for s in ("median", "p95", "p99"))
        assert np.all(p50 <= p95 * (1 + 1e-9)) and np.all(p95 <= p99 * (1 + 1e-9)), name
    e2e = knee["e2e_p99_s"].to_numpy()
    assert np.all(np.diff(e2e) >= -1e-9 * e2e[:-1])
    # TPOT's P99 rises while most arrivals run at once. Past that the arrivals that wait for a
    # slot hold its tail; they run in a full replica whose prompts enter as requests finish, and
    # their TPOT spreads less (simulated: benchmarks/README.md, "TPOT of the arrivals that
    # wait"), so the mixture's P99 may ease towards theirs, never below its value where half wait
    tpot, most_run = knee["tpot_p99_s"].to_numpy(), knee["wait_probability"].to_numpy() < 0.5
    assert most_run[:-1].sum() >= 20 and np.all(np.diff(tpot[most_run]) >= -1e-9 * tpot[most_run][:-1])
    assert np.all(tpot[~most_run] >= tpot[most_run][-1])
    # TTFT's P99 is found by bisection on a mixture: allow a 1% wobble, no more
    ttft = knee["ttft_p99_s"].to_numpy()
    assert np.all(ttft[1:] >= 0.99 * np.maximum.accumulate(ttft)[:-1])
    # the knee: near the service rate P99 TTFT is many times its value at a trickle
    assert ttft[-1] > 5 * ttft[0]
    assert knee["wait_probability"].iloc[-1] > knee["wait_probability"].iloc[0]


def test_knee_figure_shows_the_curves_slo_and_service_rate(knee) -> None:
    mu = knee.attrs["service_rate"]
    fig = latency_vs_rate_figure(knee, ttft_slo_s=2.0, tpot_slo_s=0.1, slo_rate=0.8 * mu)
    ttft_ax, tpot_ax = fig.axes[:2]
    for ax, slo in ((ttft_ax, 2.0), (tpot_ax, 0.1)):
        lines = {line.get_label(): line for line in ax.get_lines()}
        p50, p99 = (np.asarray(lines[k].get_ydata(), dtype=float) for k in ("median", "P99"))
        finite = np.isfinite(p50) & np.isfinite(p99)
        assert finite.any() and np.all(p99[finite] >= p50[finite] * (1 - 1e-9))
        assert np.asarray(lines[f"SLO {slo:g} s"].get_ydata(), dtype=float)[0] == slo
        service = [line for label, line in lines.items() if label.startswith("service rate")]
        assert len(service) == 1 and np.asarray(service[0].get_xdata(), dtype=float)[0] == pytest.approx(mu)
        assert any(label.startswith("SLOs met up to") for label in lines)
    with pytest.raises(ValueError, match="p75"):
        latency_vs_rate_figure(knee, stats=("median", "p75"))


def test_simulation_at_a_trickle_agrees_with_the_analytic_median(h100, knee) -> None:
    # at 2% of the service rate a request almost never meets another: no queue in either model
    rate = float(knee["request_rate"].iloc[0])
    sim = simulated_latency(h100, request_rates=[rate], input_len=IN, output_len=OUT, num_requests=60)
    assert sim["ttft_p99_s"].iloc[0] >= sim["ttft_median_s"].iloc[0]
    assert sim["ttft_median_s"].iloc[0] == pytest.approx(knee["ttft_median_s"].iloc[0], rel=0.1)
    assert sim["tpot_median_s"].iloc[0] == pytest.approx(knee["tpot_median_s"].iloc[0], rel=0.1)
    fig = latency_vs_rate_figure(knee.head(5), simulated=sim)
    assert any(line.get_label().startswith("simulated") for line in fig.axes[0].get_lines())


# ---- widgets ---------------------------------------------------------------------------------------
def test_planner_app_runs_and_shows_the_cheapest_plans(prices) -> None:
    pytest.importorskip("ipywidgets")
    from gpucap.app.planwidgets import RECOMMENDED_CLASS, TOP, PlannerApp

    app = PlannerApp(
        model=MODEL,
        target_value=RATE,
        gpus=["H100-SXM-80GB", "L40S-48GB"],
        failure_spares=1,
        burst_margin_pct=20.0,
        prices=prices,
        **SMALL,
    )
    assert app.result is None and app.table.value == ""
    app._on_progress(3, 12, 0.0)  # what plan() calls while it searches
    assert (app.progress.value, app.progress.max) == (3, 12) and "3 of 12" in app.status.value
    app._on_run(None)  # what the Run button calls
    assert app.error is None and app.result is not None
    shown = app.table_frame
    assert 1 <= len(shown) <= TOP
    # the recommended plan first and highlighted, the others cheapest first; plan numbers as the notes say
    rec = app.result.recommended
    assert rec is not None and shown.iloc[0]["plan"] == rec["plan"] and shown.iloc[0]["meets_slo_simulated"] is True
    assert shown["cost_per_hour"].iloc[1:].is_monotonic_increasing and shown["plan"].iloc[1:].is_monotonic_increasing
    assert shown["plan"].is_unique  # KV-format twins are one row
    body = app.table.value.split("<tbody>", 1)[1]
    assert body.startswith(f'<tr class="{RECOMMENDED_CLASS}"') and body.count(RECOMMENDED_CLASS) == 1
    assert f"recommended: plan {rec['plan']}," in app.table.value
    assert not re.search(r"\b(None|NaN|nan)\b", app.table.value + app.rejected.value)
    assert "<table" in app.table.value and shown["gpu"].iloc[0] in app.table.value
    assert app.progress.value == app.progress.max and app.progress.bar_style == "success"
    # the commands that verify the recommended plan: its split on the server's line
    assert f"plan {rec['plan']}, recommended" in app.commands.value
    assert f"--tensor-parallel-size {rec['tp']} --pipeline-parallel-size {rec['pp']}" in app.commands.value
    # the same search called directly
    direct = plan(
        MODEL,
        target_request_rate=RATE,
        input_len=IN,
        output_len=OUT,
        ttft_slo_s=2.0,
        tpot_slo_s=0.1,
        stat="p99",
        gpus=["H100-SXM-80GB", "L40S-48GB"],
        headroom=Headroom(failure_spares=1, burst_margin=0.2),
        prices=prices,
        **SMALL,
    )
    assert app.result.best["cost_per_hour"] == pytest.approx(direct.best["cost_per_hour"])
    # the widget checks plans by simulation, as `gpucap plan` does, and shows it; the direct call did not
    assert "meets SLOs in simulation" in app.table.value
    assert "P99 TTFT (s)" in app.table.value and "capacity per replica (requests/s)" in app.table.value
    assert app.result.best_checked.equals(rec)
    assert direct.recommended is None and direct.best_checked.equals(direct.best)  # nothing simulated
    counts = rejected_counts(app.result)
    assert counts["options"].sum() == len(app.result.rejected)
    assert counts.empty or "example option" in app.rejected.value
    assert counts["options"].is_monotonic_decreasing
    for kind, example in zip(counts["reason"], counts["example"], strict=True):
        assert example.startswith(kind + ":") or example == kind
        assert example in set(app.result.rejected["reason"])
    # a length it cannot read: the message names it, nothing is shown
    app.input_len.value = "lots"
    assert app.run() is None
    assert "'lots'" in (app.error or "") and app.table.value == "" and app.progress.bar_style == "danger"
    with pytest.raises(ValueError, match="colour"):
        PlannerApp(colour="blue")


def test_kv_format_twins_are_one_row() -> None:
    from gpucap.app.planwidgets import group_twins

    row = dict(gpu="H100-SXM-80GB", gpus_per_replica=2, tp=2, pp=1, ep=1, weight_dtype="fp8", replicas=4,
               total_gpus=8, cost_per_hour=55.0)  # fmt: skip
    plans = pd.DataFrame(
        [
            {**row, "kv_dtype": "fp8", "ttft_s": 0.5},
            {**row, "kv_dtype": "auto", "ttft_s": 0.6},  # same fleet and cost: a twin
            {**row, "kv_dtype": "auto", "total_gpus": 10, "replicas": 5, "cost_per_hour": 70.0, "ttft_s": 0.4},
        ]
    )
    grouped = group_twins(plans)
    assert list(grouped["kv_dtype"]) == ["fp8 / auto", "auto"]
    assert list(grouped["ttft_s"]) == [0.5, 0.4]  # the first twin's numbers


def test_rejection_examples_say_which_option() -> None:
    p = plan(
        "deepseek-ai/DeepSeek-V3", target_request_rate=5.0, input_len=2000, output_len=300,
        ttft_slo_s=2.0, tpot_slo_s=0.1, gpus=["H100-SXM-80GB"], gpu_counts=[8], weight_dtypes=["fp8"],
        kv_dtypes=["fp8"],
    )  # fmt: skip
    counts = rejected_counts(p)
    # tp 8 pp 1, tp 4 pp 2, tp 2 pp 4, tp 1 pp 8: one fp8 option each, none fits 671 GB in 640 GB
    assert list(counts["reason"]) == ["does not fit"]
    assert counts["example option"][0].startswith("8 x H100-SXM-80GB (tp=")
    assert counts["example option"][0].endswith("fp8 weights, fp8 KV)")


def test_a_plan_in_words() -> None:
    from gpucap.planning.result import describe_plan

    row = pd.Series(dict(replicas=3, gpus_per_replica=2, gpu="H100-SXM-80GB", tp=2, pp=1, weight_dtype="fp8",
                         kv_dtype="auto", total_gpus=6, cost_per_hour=41.25))  # fmt: skip
    assert describe_plan(row) == (
        "3 replica(s) of 2 x H100-SXM-80GB (tp=2, pp=1, fp8 weights, auto KV) = 6 GPUs, $41.25/hour"
    )


def test_the_page_table_says_not_checked_never_none_or_nan() -> None:
    from gpucap.app.planwidgets import NOT_CHECKED, readable_checks

    table = pd.DataFrame(
        {
            "GPU": ["H100", "H200", "L40S"],
            "meets SLOs in simulation": [True, False, None],
            "simulated P99 TTFT (s)": [0.5, 7.6, np.nan],
            "simulated P99 TPOT (ms)": [40.0, 120.0, np.nan],
        }
    )
    shown = readable_checks(table)
    assert shown["meets SLOs in simulation"].tolist() == ["yes", "no", NOT_CHECKED]
    assert shown.iloc[2].tolist() == ["L40S", NOT_CHECKED, NOT_CHECKED, NOT_CHECKED]
    assert shown.iloc[0, 2] == 0.5 and shown.iloc[1, 3] == 120.0
    html = shown.to_html()
    assert "None" not in html and "NaN" not in html
