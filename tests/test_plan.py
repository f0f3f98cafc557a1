"""Capacity planning: replicas and headroom by hand, costs by hand, what fits nowhere, and the
invariants a planner must keep (more load never needs fewer GPUs, looser SLOs never more)."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from gpucap.catalog.gpus import get_gpu
from gpucap.catalog.prices import read_prices
from gpucap.cli.main import main
from gpucap.config import hardware
from gpucap.physics.coefficients import Coefficients
from gpucap.physics.memory import memory_limit
from gpucap.planning.capacity import Headroom, replicas_needed
from gpucap.planning.search import LOW_UTILIZATION, plan
from gpucap.queueing.analytic import max_request_rate
from gpucap.queueing.lengths import Lengths

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
        hw,
        coef,
        input_len=2000.0,
        output_len=300.0,
        max_running=min(1024.0, slots),
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


def test_simulation_notes_name_the_cheapest_that_passes() -> None:
    from gpucap.planning.result import simulation_notes

    checked = pd.DataFrame({"meets_slo_simulated": [False, True, None]}, dtype=object)
    (note,) = simulation_notes(checked)
    assert "of the 2 simulated, plan 2 is the cheapest that does" in note
    assert simulation_notes(pd.DataFrame({"meets_slo_simulated": [True, False]}, dtype=object)) == []


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
