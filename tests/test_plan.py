"""Capacity planning: replicas and headroom by hand, costs by hand, what fits nowhere, and the
invariants a planner must keep (more load never needs fewer GPUs, looser SLOs never more)."""

import json
import math
import re

import numpy as np
import pandas as pd
import pytest

from gpucap.catalog.gpus import get_gpu
from gpucap.catalog.prices import read_prices
from gpucap.cli.main import main
from gpucap.config import SLO, hardware
from gpucap.parallel import Runner
from gpucap.physics.coefficients import Coefficients
from gpucap.physics.memory import memory_limit
from gpucap.physics.requests import Requests
from gpucap.planning.capacity import Headroom, replicas_needed
from gpucap.planning.search import LOW_UTILIZATION, plan
from gpucap.queueing.analytic import max_request_rate
from gpucap.queueing.lengths import Lengths
from gpucap.queueing.servicecurve import service_curve

MODEL = "meta-llama/Llama-3.1-8B"
ONE = dict(gpus=["H100-SXM-80GB"], gpu_counts=[1], weight_dtypes=["fp8"], kv_dtypes=["auto"])


@pytest.fixture()
def prices(tmp_path):
    path = tmp_path / "prices.csv"
    path.write_text("gpu,usd_per_gpu_hour\nH100-SXM-80GB,3.00\nL40S-48GB,1.50\nH200-SXM-141GB,4.00\n")
    return path


def test_replicas_by_hand() -> None:
    # 20 req/s with a 20% burst margin on replicas of 5 req/s: 24 / 5 = 4.8 -> 5 serving, + 1 spare
    assert replicas_needed(20.0, 5.0, Headroom(1, 0, 0.2)) == (5, 6)
    # exactly two replicas' worth, no margin: 2 serving (no extra replica for rounding), + 1 + 1
    assert replicas_needed(10.0, 5.0, Headroom(1, 1, 0.0)) == (2, 4)
    # a little over: 10.05 / 5 = 2.01 -> 3 serving
    assert replicas_needed(10.05, 5.0, Headroom(0, 0, 0.0)) == (3, 3)
    with pytest.raises(ValueError, match="burst_margin"):
        Headroom(1, 0, -0.1)
    with pytest.raises(ValueError, match="failure_spares"):
        Headroom(-1)


def test_load_exactly_at_capacity_needs_whole_replicas_plus_headroom(prices) -> None:
    hw = hardware(MODEL, "H100-SXM-80GB", weight_dtype="fp8")
    coef = Coefficients.for_engine("vllm")
    _, slots = memory_limit(hw, 2300.0)
    mu = max_request_rate(
        service_curve(hw, coef, Requests(2000.0, 300.0, max_running=min(1024.0, slots))),
        ttft_slo_s=2.0,
        tpot_slo_s=0.1,
        stat="p99",
    )
    assert mu > 1
    kw = dict(input_len=2000, output_len=300, ttft_slo_s=2.0, tpot_slo_s=0.1, stat="p99", prices=prices, **ONE)
    exact = plan(MODEL, target_request_rate=3 * mu, headroom=Headroom(1, 1, 0.0), **kw)
    assert exact.best["capacity_requests_per_s"] == pytest.approx(mu)
    assert exact.best["replicas"] == 3 + 2  # three serving, one failure spare, one upgrade spare
    more = plan(MODEL, target_request_rate=3.03 * mu, headroom=Headroom(1, 1, 0.0), **kw)
    assert more.best["replicas"] == 4 + 2
    # cost by hand: GPUs x $3.00; per million output tokens: $/hour / (rate x 300 tokens x 3600 s) x 1e6
    row = exact.best
    assert row["cost_per_hour"] == pytest.approx(5 * 3.00)
    assert row["cost_per_million_output_tokens"] == pytest.approx(15.0 / (3 * mu * 300 * 3600) * 1e6)
    # with the spares out and no burst, each serving replica is at its SLO-limited rate
    assert row["ttft_s"] <= 2.0 + 1e-9 and row["tpot_s"] <= 0.1 + 1e-9


def test_output_token_target_is_a_request_rate(prices) -> None:
    kw = dict(input_len=2000, output_len=300, prices=prices, **ONE)
    by_rate = plan(MODEL, target_request_rate=10.0, **kw).best
    by_tokens = plan(MODEL, target_output_tps=3000.0, **kw).best  # 3000 / 300 = 10 req/s
    assert by_tokens["replicas"] == by_rate["replicas"]
    assert by_tokens["cost_per_million_output_tokens"] == pytest.approx(by_rate["cost_per_million_output_tokens"])


def test_fits_nowhere_says_so(prices) -> None:
    # DeepSeek-V3: 671B parameters (model card) = 671 GB in fp8 alone; 8 x L40S hold 8 x 48 = 384 GB
    p = plan(
        "deepseek-ai/DeepSeek-V3",
        input_len=1000,
        output_len=200,
        target_request_rate=1.0,
        gpus=["L40S-48GB"],
        weight_dtypes=["bf16", "fp8"],
        prices=prices,
    )
    assert p.plans.empty
    assert (p.rejected["reason"].str.startswith("does not fit")).all()
    assert any("no option carries" in n for n in p.notes)


def test_more_load_never_needs_fewer_gpus_and_looser_slo_never_more(prices) -> None:
    kw = dict(input_len=1500, output_len=250, prices=prices, gpus=["H100-SXM-80GB", "L40S-48GB"], gpu_counts=[1, 2])
    kw |= dict(weight_dtypes=["fp8"], kv_dtypes=["auto"])
    totals = [plan(MODEL, target_request_rate=r, **kw).plans for r in (2.0, 8.0, 32.0)]
    merged = [t.set_index(["gpu", "tp", "pp"])["total_gpus"] for t in totals]
    for lo, hi in zip(merged, merged[1:], strict=False):
        assert (hi.reindex(lo.index) >= lo).all()
    assert [t["cost_per_hour"].min() for t in totals] == sorted(t["cost_per_hour"].min() for t in totals)
    tight = plan(MODEL, target_request_rate=16.0, ttft_slo_s=0.5, tpot_slo_s=0.03, **kw).plans
    loose = plan(MODEL, target_request_rate=16.0, ttft_slo_s=2.0, tpot_slo_s=0.1, **kw).plans
    t, lo = tight.set_index(["gpu", "tp", "pp"])["total_gpus"], loose.set_index(["gpu", "tp", "pp"])["total_gpus"]
    assert (lo.reindex(t.index) <= t).all()
    assert loose["cost_per_hour"].min() <= tight["cost_per_hour"].min()


def test_tail_statistic_needs_at_least_the_mean(prices) -> None:
    kw = dict(input_len=2000, output_len=300, target_request_rate=20.0, prices=prices, **ONE)
    mean, p99 = plan(MODEL, stat="mean", **kw).best, plan(MODEL, stat="p99", **kw).best
    assert p99["capacity_requests_per_s"] <= mean["capacity_requests_per_s"]
    assert p99["replicas"] >= mean["replicas"]


def test_long_prompts_lower_the_p99_capacity(prices) -> None:
    kw = dict(output_len=300, target_request_rate=20.0, prices=prices, stat="p99", **ONE)
    fixed = plan(MODEL, input_len=2000, **kw).best
    spread = plan(MODEL, input_len=Lengths.percentiles({1: 1000, 50: 1900, 99: 6000}), **kw).best
    assert spread["capacity_requests_per_s"] < fixed["capacity_requests_per_s"]


def test_power_cost_for_owned_hardware() -> None:
    # H100 SXM TDP 700 W (data/gpus.csv, NVIDIA datasheet) at $0.10/kWh: $0.07 per GPU-hour
    only_power = read_prices(None, usd_per_kwh=0.10)
    assert only_power.usd_per_gpu_hour(get_gpu("H100-SXM-80GB")) == pytest.approx(0.07)
    p = plan(MODEL, input_len=2000, output_len=300, target_request_rate=5.0, prices=only_power, **ONE)
    assert p.best["cost_per_hour"] == pytest.approx(p.best["total_gpus"] * 0.07)


def test_power_adds_to_a_price_list_but_does_not_price_what_it_leaves_out(tmp_path) -> None:
    path = tmp_path / "owned.csv"
    path.write_text("gpu,usd_per_gpu_hour\nH100-SXM-80GB,1.00\n")  # amortized cost of owned H100s
    table = read_prices(path, usd_per_kwh=0.10)
    assert table.usd_per_gpu_hour(get_gpu("H100-SXM-80GB")) == pytest.approx(1.07)  # 1.00 + 0.7 kW x $0.10
    assert table.usd_per_gpu_hour(get_gpu("H200-SXM-141GB")) is None  # not in the list: not free


def test_bad_price_file_is_named(tmp_path) -> None:
    bad = tmp_path / "p.csv"
    bad.write_text("gpu,usd_per_gpu_hour\nH100-SXM-80GB,cheap\n")
    with pytest.raises(ValueError, match=r"p\.csv line 2: usd_per_gpu_hour 'cheap'"):
        read_prices(bad)
    bad.write_text("gpu,price\nH100-SXM-80GB,3\n")
    with pytest.raises(ValueError, match="missing column"):
        read_prices(bad)


def test_missing_price_is_a_rejection(tmp_path) -> None:
    path = tmp_path / "prices.csv"
    path.write_text("gpu,usd_per_gpu_hour\nL40S-48GB,1.5\n")
    p = plan(MODEL, input_len=2000, output_len=300, target_request_rate=5.0, prices=path, **ONE)
    assert p.plans.empty and p.rejected["reason"].str.contains("no price for H100-SXM-80GB").all()


def test_longer_than_the_model_context_is_refused() -> None:
    # Llama-3.1-8B: max_position_embeddings 131072 (config.json)
    with pytest.raises(ValueError, match="exceeds meta-llama/Llama-3.1-8B's context of 131072"):
        plan(MODEL, input_len=130000, output_len=2000, target_request_rate=1.0)


def test_exactly_one_target() -> None:
    with pytest.raises(ValueError, match="exactly one target"):
        plan(MODEL, input_len=100, output_len=10, target_request_rate=1.0, target_concurrency=4.0)
    with pytest.raises(ValueError, match="stat must be one of"):
        plan(MODEL, input_len=100, output_len=10, target_request_rate=1.0, stat="p75")


def test_a_misspelt_option_is_named_with_the_options() -> None:
    with pytest.raises(TypeError, match=r"unknown keywords gpuz; the options are .*gpus, headroom"):
        plan(MODEL, input_len=100, output_len=10, target_request_rate=1.0, gpuz=["H100-SXM-80GB"])


def test_cli_json_contract(prices, capsys) -> None:
    args = ["plan", "--model", MODEL, "--target-rps", "20", "--input-len", "2000", "--output-len", "300"]
    args += ["--ttft-slo", "2", "--tpot-slo", "0.1", "--stat", "p99", "--gpus", "H100-SXM-80GB,L40S-48GB"]
    args += ["--gpu-counts", "1,2", "--price", str(prices), "--json"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    plans = out["plans"]
    assert plans and set(out) >= {"plans", "rejected"}
    need = {"gpu", "gpus_per_replica", "tp", "pp", "ep", "weight_dtype", "kv_dtype", "replicas", "total_gpus"}
    need |= {"cost_per_hour", "cost_per_million_output_tokens", "ttft_s", "tpot_s"}
    assert need <= set(plans[0])
    costs = [p["cost_per_hour"] for p in plans]
    assert costs == sorted(costs)
    assert all(p["total_gpus"] == p["replicas"] * p["gpus_per_replica"] for p in plans)
    assert all({"reason", "gpu"} <= set(r) for r in out["rejected"])


def test_cli_nothing_fits_and_bad_input(prices, capsys) -> None:
    args = ["plan", "--model", "deepseek-ai/DeepSeek-V3", "--target-rps", "1", "--input-len", "100"]
    args += ["--output-len", "10", "--gpus", "L40S-48GB", "--price", str(prices)]
    assert main(args) == 3
    assert "does not fit" in capsys.readouterr().out
    bad = ["plan", "--model", MODEL, "--target-rps", "1", "--input-len", "p50=lots", "--output-len", "10"]
    assert main(bad) == 2
    err = capsys.readouterr().err
    assert "--input-len" in err and "p50=lots" in err and len(err.strip().splitlines()) == 1


def test_plan_table_is_a_dataframe_with_units(prices) -> None:
    p = plan(MODEL, input_len=2000, output_len=300, target_concurrency=64, prices=prices, **ONE)
    assert isinstance(p.plans, pd.DataFrame) and not p.plans.empty
    row = p.best
    assert math.isfinite(row["ttft_s"]) and 0 < row["utilization"] <= 1
    assert np.isclose(row["total_gpus"], row["replicas"] * row["gpus_per_replica"])
    assert "p99" in " ".join(p.notes)  # concurrency targets use means: the note says so
    assert "Llama-3.1-8B" in str(p)


def test_simulation_check_columns(prices) -> None:
    p = plan(MODEL, input_len=1000, output_len=200, target_request_rate=2.0, prices=prices, simulate_top=1, **ONE)
    row = p.best
    assert isinstance(row["meets_slo_simulated"], bool)
    assert 0 < row["ttft_s_simulated"] < 2.0 and 0 < row["tpot_s_simulated"] < 0.1  # light load: meets them
    assert row["meets_slo_simulated"]


def test_simulation_notes_name_the_cheapest_that_passes_by_its_plan_number() -> None:
    from gpucap.planning.result import simulation_notes

    # rows 1 and 2 are KV-format twins (plan 1): the third row is the page's second, plan 2
    checked = pd.DataFrame({"plan": [1, 1, 2, 3], "meets_slo_simulated": [False, False, True, None]}, dtype=object)
    (note,) = simulation_notes(checked)
    assert "of the 3 simulated, plan 2 is the cheapest that does" in note
    passed = pd.DataFrame({"plan": [1, 2], "meets_slo_simulated": [True, False]}, dtype=object)
    assert simulation_notes(passed) == []


def test_sliding_window_model_is_simulated_with_its_window(prices) -> None:
    # Gemma-3-27B keeps 1024-token windows on 5 of every 6 layers: the KV cache of one H100 holds
    # far fewer 41,000-token contexts than full attention would need, but more than the raw token
    # count suggests; the simulation must hold at least one such request (it refused before)
    p = plan(
        "google/gemma-3-27b-it",
        input_len=40000,
        output_len=1000,
        target_request_rate=0.05,
        ttft_slo_s=30,
        tpot_slo_s=0.2,
        gpus=["H100-SXM-80GB"],
        gpu_counts=[1],
        weight_dtypes=["bf16"],
        kv_dtypes=["auto"],
        prices=prices,
        simulate_top=1,
    )
    assert p.best["simulation_error"] is None and math.isfinite(p.best["ttft_s_simulated"])


def test_one_output_token_has_no_tpot_slo(prices) -> None:
    kw = dict(input_len=1000, output_len=1, target_request_rate=2.0, tpot_slo_s=0.001, prices=prices, **ONE)
    p = plan(MODEL, simulate_top=1, **kw)
    assert not p.plans.empty and math.isnan(p.best["tpot_s"])  # a 1 ms TPOT SLO cannot bind
    assert p.best["meets_slo_simulated"]


def test_hostile_planning_inputs_are_refused() -> None:
    from gpucap.cli.args import non_negative_float
    from gpucap.planning.capacity import Headroom
    from gpucap.queueing.lengths import Lengths

    with pytest.raises(ValueError, match="burst_margin must be in"):
        Headroom(burst_margin=1e30)
    with pytest.raises(ValueError, match="p50 given twice"):
        Lengths.parse("p50=800,p50=900,p99=4000", "input")
    assert non_negative_float("0") == 0.0  # owned hardware with free power: --usd-per-kwh 0


def test_a_plan_sized_by_an_slo_near_the_floor_says_so() -> None:
    """TPOT 5 ms for Llama-3.3-70B: a fleet of mostly idle B200s. The note names the share and
    the single-request floor; a plan at a 100 ms TPOT runs its replicas busy and has no note."""
    common = dict(target_request_rate=20.0, input_len=2000, output_len=300, ttft_slo_s=2.0, gpus=["B200-180GB"])
    tight = plan("meta-llama/Llama-3.3-70B-Instruct", tpot_slo_s=0.005, **common)
    [note] = [n for n in tight.notes if "physical floor" in n]
    assert tight.best["utilization"] < LOW_UTILIZATION and f"{tight.best['utilization']:.0%}" in note
    floor_ms = float(note.split(" ms per output token")[0].rsplit(" ", 1)[1])
    assert 0 < floor_ms <= 5.0  # a plan exists, so one request alone meets the SLO
    loose = plan("meta-llama/Llama-3.3-70B-Instruct", tpot_slo_s=0.1, **common)
    assert loose.best["utilization"] >= LOW_UTILIZATION and not any("physical floor" in n for n in loose.notes)


def test_a_model_too_big_for_any_split_of_a_gpu_is_named() -> None:
    """DeepSeek-V3 in fp8 is ~671 GB of weights: more than 8 x H100 (8 x 80 GB = 640 GB) hold."""
    p = plan(
        "deepseek-ai/DeepSeek-V3", target_request_rate=5.0, input_len=2000, output_len=300,
        ttft_slo_s=2.0, tpot_slo_s=0.1, gpus=["H100-SXM-80GB", "B200-180GB"],
    )  # fmt: skip
    assert any(n.startswith("H100-SXM-80GB: the weights do not fit in any format even on 8 GPUs") for n in p.notes)
    assert not any(n.startswith("B200-180GB:") for n in p.notes) and (p.plans["gpu"] == "B200-180GB").all()
    # 5 requests/s is little for a 4 x B200 replica: busy well under a quarter, and the note says why
    assert p.best["utilization"] < LOW_UTILIZATION
    assert any("the target is small for one replica of 4 x B200-180GB" in n for n in p.notes)


# ---- the simulation check and the recommended plan -------------------------------------------------
COSTS = [10.0, 11.0, 12.0, 12.5, 13.0, 20.0]  # $/hour, cheapest first


class _PassesFrom:
    """A stand-in for a plan's simulation (picklable, so that a process pool can run it): it
    meets the SLOs when the plan costs at least ``cost``."""

    def __init__(self, plan_cost: float, cost: float) -> None:
        self.plan_cost, self.cost = plan_cost, cost

    def run(self):
        from gpucap.planning.checks import Check

        return Check(ttft_s=self.plan_cost / 10, tpot_s=0.01, meets=self.plan_cost >= self.cost)


def test_which_plans_the_check_simulates_by_hand() -> None:
    from gpucap.planning.checks import to_simulate

    # nothing known: the cheapest; while none passes, one more each time
    assert to_simulate(COSTS, []) == 1
    assert to_simulate(COSTS, [False, False]) == 3
    # the cheapest passes: every plan up to 1.25 x 10 = 12.5 $/hour, 12.5 itself included
    assert to_simulate(COSTS, [True]) == 4
    # the second passes: up to 1.25 x 11 = 13.75 $/hour, so the first five
    assert to_simulate(COSTS, [False, True]) == 5
    # simulate_top as a minimum, never beyond the plans there are
    assert to_simulate(COSTS, [True], minimum=5) == 5 and to_simulate(COSTS, [True], minimum=9) == 6
    # the cap: three misses with a cap of three is the end (nothing recommended)
    assert to_simulate(COSTS, [False] * 3, most=3) == 3


@pytest.mark.parametrize("workers", [1, 2])
def test_the_check_in_a_pool_simulates_what_the_serial_rule_does(workers) -> None:
    from gpucap.planning.checks import MAX_SIMULATED, check_plans

    # plans from 12 $/hour pass: the first passing costs 12, so every plan up to 15 $/hour (five)
    run = Runner(jobs=workers)
    checks, processes = check_plans(COSTS, lambda k: _PassesFrom(COSTS[k], 12.0), run=run)
    assert [c.meets for c in checks] == [False, False, True, True, True]
    assert [c.ttft_s for c in checks] == [1.0, 1.1, 1.2, 1.25, 1.3]
    assert processes == workers
    # none passes: the check gives up after MAX_SIMULATED plans
    many = [float(k) for k in range(MAX_SIMULATED + 5)]
    checks, _ = check_plans(many, lambda k: _PassesFrom(many[k], 1e9), run=run)
    assert len(checks) == MAX_SIMULATED and not any(c.meets for c in checks)


def test_the_check_runs_serially_where_a_pool_cannot_start(monkeypatch) -> None:
    from joblib.externals import loky

    from gpucap.planning import checks

    def no_pool(*args, **kwargs):
        raise OSError("no semaphores on this machine")

    monkeypatch.setattr(loky, "get_reusable_executor", no_pool)
    found, _ = checks.check_plans(COSTS, lambda k: _PassesFrom(COSTS[k], 12.0), run=Runner(jobs=4))
    assert [c.meets for c in found] == [False, False, True, True, True]
    found, processes = checks.check_plans(COSTS, lambda k: _PassesFrom(COSTS[k], 12.0))  # no runner: serially
    assert processes == 1 and len(found) == 5


def test_the_check_notes_name_the_recommended_plan_and_what_the_cap_left_out() -> None:
    from gpucap.planning.checks import Check, check_notes, with_checks
    from gpucap.planning.result import number_plans

    plans = pd.DataFrame(
        [
            dict(gpu=f"GPU-{k}", gpus_per_replica=1, tp=1, pp=1, ep=1, weight_dtype="fp8", kv_dtype="auto",
                 replicas=2, total_gpus=2, cost_per_hour=cost)
            for k, cost in enumerate([10.0, 12.0, 12.5, 13.0, 16.0])
        ]
    )  # fmt: skip
    # the second passes; the check stopped there (as at its cap): 12.5 and 13 are within 1.25 x 12 = 15
    found = number_plans(with_checks(plans, [Check(3.0, 0.05, False), Check(1.0, 0.05, True)]))
    assert found["recommended"].tolist() == [False, True, False, False, False]
    assert found["meets_slo_simulated"].tolist() == [False, True, None, None, None]
    first, cap = check_notes(found, seconds=1.0, processes=2)
    assert first.startswith("2 plan(s) simulated in 1.0 s (2 processes)") and "(plan 2, recommended)" in first
    assert "$15.00/hour" in first and "plans 3, 4 are within the 25% and not checked" in cap
    nothing = number_plans(with_checks(plans, [Check(3.0, 0.05, False), Check(error="no room for one request")]))
    assert not nothing["recommended"].any() and nothing["meets_slo_simulated"].tolist()[:2] == [False, None]
    failed, none = check_notes(nothing, seconds=1.0, processes=1)
    assert failed == "plan 2 could not be simulated: no room for one request"
    assert none.startswith("2 plan(s) simulated in 1.0 s (1 process): none meets the SLOs in simulation")


CHECKED = dict(
    input_len=2000, output_len=300, target_request_rate=12.0, gpus=["H100-SXM-80GB", "L40S-48GB"],
    gpu_counts=[1, 2], weight_dtypes=["fp8"], kv_dtypes=["auto", "fp8"],
)  # fmt: skip


def test_recommended_plan_passes_and_every_cheaper_one_was_simulated_and_missed(prices) -> None:
    serial = plan(MODEL, prices=prices, check=True, n_jobs=1, **CHECKED)
    parallel = plan(MODEL, prices=prices, check=True, n_jobs=2, **CHECKED)
    # the same plans simulated and the same numbers, one process or two
    pd.testing.assert_frame_equal(serial.plans, parallel.plans)
    assert any("(1 process)" in n for n in serial.notes) and any("(2 processes)" in n for n in parallel.notes)
    p, rec = serial.plans, serial.recommended
    assert rec is not None and int(p["recommended"].sum()) == 1
    assert rec["meets_slo_simulated"] is True
    assert rec["ttft_s_simulated"] <= 2.0 and rec["tpot_s_simulated"] <= 0.1  # the default SLOs
    k = int(np.flatnonzero(p["recommended"])[0])
    assert p["meets_slo_simulated"].iloc[:k].eq(False).all()  # every cheaper plan was simulated and missed
    # which plans were simulated, from the costs: every plan up to 1.25 x the recommended one's cost
    # (the cheaper ones included), and none beyond
    within = p["cost_per_hour"] <= 1.25 * rec["cost_per_hour"]
    assert p["meets_slo_simulated"].notna().tolist() == within.tolist()
    assert serial.simulated == int(within.sum()) and serial.best_checked.equals(rec)
    # plan numbers: 1 for the cheapest, never decreasing down the table, twins share one
    assert p["plan"].iloc[0] == 1 and p["plan"].is_monotonic_increasing
    assert set(np.diff(p["plan"])) <= {0, 1}


def test_without_a_check_nothing_is_recommended_and_simulate_top_is_a_minimum(prices) -> None:
    analytic = plan(MODEL, prices=prices, **CHECKED)
    assert analytic.recommended is None and not analytic.plans["recommended"].any() and analytic.simulated == 0
    assert "meets_slo_simulated" not in analytic.plans and analytic.best_checked.equals(analytic.best)
    at_least = plan(MODEL, prices=prices, simulate_top=4, n_jobs=1, **CHECKED)
    assert at_least.simulated >= 4 and at_least.plans["meets_slo_simulated"].iloc[:4].notna().all()
    with pytest.raises(ValueError, match="n_jobs must be"):
        plan(MODEL, prices=prices, check=True, n_jobs=0, **CHECKED)
    with pytest.raises(ValueError, match="simulate_top must be"):
        plan(MODEL, prices=prices, simulate_top=-1, **CHECKED)


def test_kv_format_twins_share_a_plan_number_that_the_notes_quote() -> None:
    from gpucap.app.planwidgets import group_twins
    from gpucap.planning.result import number_plans, simulation_notes

    row = dict(gpu="H100-SXM-80GB", gpus_per_replica=2, tp=2, pp=1, ep=1, weight_dtype="fp8", replicas=4,
               total_gpus=8, cost_per_hour=55.0)  # fmt: skip
    other = {**row, "tp": 1, "pp": 2}  # same cost, another split: not a twin
    plans = pd.DataFrame(
        [
            {**row, "kv_dtype": "fp8", "meets_slo_simulated": False, "simulation_error": None},
            {**other, "kv_dtype": "fp8", "meets_slo_simulated": True, "simulation_error": None},
            {**row, "kv_dtype": "auto", "meets_slo_simulated": False, "simulation_error": None},  # twin of the first
            {**row, "kv_dtype": "fp8_e5m2", "meets_slo_simulated": None, "simulation_error": None},  # not checked
        ]
    )
    numbered = number_plans(plans)
    # the twins side by side as plan 1; the other split plan 2; the unchecked format plan 3
    assert numbered["plan"].tolist() == [1, 1, 2, 3]
    assert numbered["kv_dtype"].tolist() == ["fp8", "auto", "fp8", "fp8_e5m2"]
    page = group_twins(numbered)
    assert page["plan"].tolist() == [1, 2, 3] and page["kv_dtype"].iloc[0] == "fp8 / auto"
    (note,) = simulation_notes(numbered)
    assert "plan 2 is the cheapest that does" in note and page.iloc[1]["meets_slo_simulated"] is True


def test_cli_says_the_recommendation_first_and_not_checked_for_the_rest(prices, capsys) -> None:
    args = ["plan", "--model", MODEL, "--target-rps", "12", "--input-len", "2000", "--output-len", "300"]
    args += ["--gpus", "H100-SXM-80GB,L40S-48GB", "--gpu-counts", "1,2", "--weight-dtypes", "fp8"]
    args += ["--price", str(prices), "--jobs", "1"]
    assert main(args) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[2].startswith("recommended: plan ") and lines[3].strip().startswith("simulated p99 TTFT")
    number = int(lines[2].split("recommended: plan ")[1].split(",")[0])
    marked = [line for line in lines if line.startswith(">")]
    assert len(marked) == 1 and int(marked[0][1:].split()[0]) == number and " meets " in marked[0]
    assert "not checked" in out and not re.search(r"\b(None|nan|NaN)\b", out)
    # --simulate-top 0: no check, no recommendation, and the table says so
    assert main([*args, "--simulate-top", "0"]) == 0
    off = capsys.readouterr().out
    assert "recommended: none: not checked by simulation" in off and " meets " not in off


def test_nearest_miss_is_the_option_short_by_the_fewest_gib(prices, capsys) -> None:
    from gpucap.planning.result import rejected_counts

    p = plan(
        "deepseek-ai/DeepSeek-V3", target_request_rate=1.0, input_len=1000, output_len=200,
        gpus=["H100-SXM-80GB"], weight_dtypes=["bf16", "fp8"], kv_dtypes=["auto"], prices=prices,
    )  # fmt: skip
    counts = rejected_counts(p)
    fit = counts[counts["reason"] == "does not fit"].iloc[0]
    short = p.rejected.loc[p.rejected["reason"].str.startswith("does not fit"), "short_GiB"]
    assert fit["short_GiB"] == short.min() and short.notna().all() and len(short) == fit["options"]
    # by hand: the fewest GiB per GPU are 8 GPUs' share of the lightest format; fp8 weights alone,
    # 671e9 bytes / 8 GPUs = 78.1 GiB, exceed the H100's 0.92 x 79.2 = 72.9 GiB usable by 5.2 GiB
    assert fit["example option"].startswith("8 x H100-SXM-80GB") and "fp8 weights" in fit["example option"]
    assert fit["short_GiB"] >= 5.2 and fit["short_GiB"] < short.max()
    # the number is the one the reason's own text gives (DoesNotFit's message)
    assert f"short by {fit['short_GiB']:.1f} GiB per GPU" in fit["example"]
    args = ["plan", "--model", "deepseek-ai/DeepSeek-V3", "--target-rps", "1", "--input-len", "1000"]
    args += ["--output-len", "200", "--gpus", "H100-SXM-80GB", "--weight-dtypes", "bf16,fp8", "--price", str(prices)]
    assert main(args) == 3
    (line,) = [x for x in capsys.readouterr().out.splitlines() if "does not fit" in x]
    assert f"(nearest: {fit['example option']}, short by {fit['short_GiB']:.1f} GiB per GPU)" in line


def test_one_request_that_does_not_fit_is_short_by_its_kv_bytes() -> None:
    from gpucap.physics.memory import hardware_memory, short_of_one_request_bytes

    # Llama-3.1-8B (config.json): 32 layers x 8 KV heads x 128 dims x 2 (K and V) x 2 bytes (bf16)
    per_token = 32 * 8 * 128 * 2 * 2
    hw = hardware(MODEL, "L40S-48GB")
    mem = hardware_memory(hw)
    fits = int(mem.kv_budget // per_token)  # tokens one GPU's budget holds
    assert short_of_one_request_bytes(mem, hw.spec, hw.layout, fits) == 0.0
    assert short_of_one_request_bytes(mem, hw.spec, hw.layout, fits + 1000) == pytest.approx(
        (fits + 1000) * per_token - mem.kv_budget
    )


def test_a_long_reason_is_cut_at_a_clause_never_inside_a_number() -> None:
    from gpucap.planning.result import Plan, Target, clip, format_plan

    text = "p99 TTFT 12.3 s > 2 s; the prompt takes 9.87 s alone (weights 124.5 GiB + reserved 3.2 GiB)"
    # a cut at 66 characters would end inside "124.5"; the clause before " (" ends at character 52
    assert clip(text, 66) == "p99 TTFT 12.3 s > 2 s; the prompt takes 9.87 s alone ..."
    assert clip(text, 200) == text
    rejected = pd.DataFrame(
        [dict(gpu="L40S-48GB", gpus_per_replica=1, tp=1, pp=1, ep=1, weight_dtype="fp8", kv_dtype="auto",
              reason="misses TTFT: " + text + " " + "and more words " * 10, short_GiB=np.nan)]
    )  # fmt: skip
    p = Plan(MODEL, Target("request_rate", 1.0), SLO(2.0, 0.1, "p99"), pd.DataFrame(), rejected, 1, 0.1)
    (line,) = [x for x in format_plan(p).splitlines() if "misses TTFT" in x]
    said = line.split("auto KV): ", 1)[1]
    assert said.endswith(" ...)")
    numbers = set(re.findall(r"\d+(?:\.\d+)?", text))
    assert set(re.findall(r"\d+(?:\.\d+)?", said)) <= numbers  # every number whole


def test_plan_table_columns_never_run_together() -> None:
    """A fleet of millions of replicas (10^8 requests/s) widens the columns instead of running
    the replicas into the GPU count or the cost into the next figure."""
    from gpucap.planning.result import aligned, format_plan

    assert aligned([["a", "bb"], ["ccc", "1"]], "<>") == ["a   bb", "ccc  1"]
    huge = plan(
        "meta-llama/Llama-3.1-8B", input_len=2000, output_len=300, target_request_rate=1e8, gpus=["H100-SXM-80GB"]
    )
    text = format_plan(huge, top=3)
    rows = [ln for ln in text.splitlines() if re.match(r"^[> ] +\d+ H100", ln)]
    assert len(rows) == 3
    for row in rows:
        cells = re.search(r" (\d+)\+\d+ +(\d+) .* ([\d,]+\.\d\d) ", row)
        assert cells, row
        replicas, total, cost = cells.groups()
        assert int(total) > int(replicas) > 1_000_000 and float(cost.replace(",", "")) > 1e6, row
