"""The seed articles' formulas (gpucap.teaching.seeds) reproduce the articles' own worked numbers, and the
walkthrough's figure functions (gpucap.teaching.walkthrough) return Figures with the expected axes and artists."""

import math

import matplotlib
import numpy as np
import pytest
from matplotlib.figure import Figure

from gpucap.catalog.lookup import load_model
from gpucap.config import hardware
from gpucap.physics.batching import closed_loop, open_loop
from gpucap.physics.coefficients import Coefficients
from gpucap.physics.memory import hardware_memory, kv_bytes_per_token
from gpucap.physics.requests import Requests
from gpucap.physics.step import StepTime, prefill_pairs_per_layer, step_work
from gpucap.physics.steptime import step_time
from gpucap.teaching import seeds
from gpucap.teaching import walkthrough as teach
from gpucap.units import GB, GiB

matplotlib.use("Agg")  # the figures are matplotlib.figure.Figure objects; no display needed

LLAMA = "meta-llama/Llama-3.3-70B-Instruct"
COEF = Coefficients.for_engine("vllm")


# ---- seed 1 ---------------------------------------------------------------------------------------
def test_seed1_kv_cache_bytes_is_10_gib() -> None:
    # kv_cache_bytes(80, 64, 128, 4096) = 2 x 80 x 64 x 128 x 4096 x 2 = 10,737,418,240 = 10 x 2**30
    assert seeds.seed1_kv_cache_bytes(80, 64, 128, 4096) == 2 * 80 * 64 * 128 * 4096 * 2 == 10 * 2**30
    # with Llama 3 70B's 8 KV heads: 1.25 GiB, what gpucap computes
    assert seeds.seed1_kv_cache_bytes(80, 8, 128, 4096) == 1.25 * GiB
    assert kv_bytes_per_token(load_model(LLAMA)) * 4096 == 1.25 * GiB


def test_seed1_formula_on_configs() -> None:
    # Llama-3.3-70B: 2 x 80 x 64 x (8192 / 64 = 128) x 2 = 2,621,440 B/token = 8 x 327,680
    llama = load_model(LLAMA)
    assert seeds.seed1_kv_cache_bytes_for_model(llama, 1) == 2_621_440 == 8 * kv_bytes_per_token(llama)
    # Qwen3-32B: hidden / heads = 5120 / 64 = 80 (config head_dim 128): 2 x 64 x 64 x 80 x 2 = 1,310,720
    qwen = load_model("Qwen/Qwen3-32B")
    assert seeds.seed1_kv_cache_bytes_for_model(qwen, 1) == 2 * 64 * 64 * 80 * 2 == 1_310_720
    # Llama-2-7B is MHA (32 KV heads): the formula is right there, 2 x 32 x 32 x 128 x 2 = 524,288
    mha = load_model("meta-llama/Llama-2-7b-hf")
    assert seeds.seed1_kv_cache_bytes_for_model(mha, 1) == kv_bytes_per_token(mha) == 524_288


def test_seed1_memory_function() -> None:
    # available = 576 - 140 - 16 - 7 = 413 "GB"; 413 // 10 = 41; 413 // 1.25 = 330
    assert seeds.seed1_max_concurrency_by_memory(576, 140, 16, 10, 7) == 41
    assert seeds.seed1_max_concurrency_by_memory(576, 140, 16, 1.25, 7) == 330
    assert seeds.seed1_max_concurrency_by_memory(100, 140, 16, 10, 7) == 0


def test_seed1_compute_function() -> None:
    # 8 x 312 TFLOPS x 0.35 = 873.6 TFLOP/s; / (2 x 70e9) = 6,240 tokens/s; / 20 = 312; / 10 = 624
    assert seeds.seed1_max_concurrency_by_compute(8 * 312, 70, 0.35, 20) == 312
    assert seeds.seed1_max_concurrency_by_compute(8 * 312, 70, 0.35, 10) == 624
    assert seeds.seed1_max_concurrency_by_compute(8 * 312, 70, 0.35, 1) == 6240
    # "70B 模型，单 token 约需 140 GFLOP"
    assert seeds.seed1_forward_flop(70) == 140e9
    assert seeds.seed1_forward_flop(70, 1000) == 140e12


def test_seed1_bandwidth_function_returns_a_rate() -> None:
    # bytes = 2 x 8192 x 72 x 2 x 80 = 188,743,680; x 0.5 = 94,371,840; / 600e9 = 157.29 us
    t = seeds.seed1_allreduce_seconds(600, 8192, 80, 72)
    assert t == pytest.approx(2 * 8192 * 72 * 2 * 80 * 0.5 / 600e9)
    assert t == pytest.approx(157.2864e-6)
    # 1 / 157.29 us = 6,357.8 -> 6,357; PCIe 32 GB/s: 1 / 2.949 ms = 339.08 -> 339
    assert seeds.seed1_max_concurrency_by_bandwidth(600, 8192, 80, 72) == 6357
    assert seeds.seed1_max_concurrency_by_bandwidth(32, 8192, 80, 72) == 339
    # more bytes than a second's worth still "allows" 1
    assert seeds.seed1_max_concurrency_by_bandwidth(1e-6, 8192, 80, 72) == 1


def test_seed1_scenario_gives_41_not_72() -> None:
    # DESIGN.md section 7: about 41 by memory (64-head KV), 312 by compute, thousands by bandwidth
    s = seeds.seed1_a100_scenario()
    assert (s.total_mem_gb, s.weight_gb, s.framework_gb, s.activation_gb) == (576, 140, 16, 7)
    assert s.kv_per_request_gb == 10
    assert (s.by_memory, s.by_compute, s.by_bandwidth) == (41, 312, 6357)
    assert s.recommended == 41 and s.bottleneck == "memory"
    fixed = seeds.seed1_a100_scenario(kv_heads=8)
    assert fixed.kv_per_request_gb == 1.25
    assert (fixed.by_memory, fixed.recommended, fixed.bottleneck) == (330, 312, "compute")
    # its scenario's 100 ms TPOT means 10 tokens/s per request: compute doubles, memory binds
    slow = seeds.seed1_a100_scenario(kv_heads=8, tokens_per_sec_per_req=10)
    assert (slow.by_compute, slow.recommended, slow.bottleneck) == (624, 330, "memory")
    assert seeds.seed1_recommended(41, 312, 6357) == 41


# ---- seed 2 ---------------------------------------------------------------------------------------
def test_seed2_weights() -> None:
    # 7e9 x 2 = 14 GB, x 1 = 7 GB, x 0.5 = 3.5 GB
    assert [seeds.seed2_weight_bytes(7e9, d) / GB for d in ("fp16", "int8", "int4")] == [14, 7, 3.5]
    with pytest.raises(ValueError, match="seed 2 gives bytes"):
        seeds.seed2_weight_bytes(7e9, "nvfp4")


def test_seed2_kv_tokens_and_concurrency() -> None:
    # 2 x 32 x 8 x 128 x 2 = 131,072 B/token ("≈ 131 KB"), Llama-3.1-8B's shape
    assert seeds.seed2_kv_bytes_per_token(32, 8, 128, 2) == 131_072
    assert kv_bytes_per_token(load_model("meta-llama/Llama-3.1-8B")) == 131_072
    # 40 GiB / 131,072 = 327,680 tokens; / 2,000 = 163.84 ("≈ 160")
    gib = seeds.seed2_kv_token_capacity(40 * GiB, 131_072)
    assert gib == 327_680
    assert seeds.seed2_concurrency(gib, 2000) == pytest.approx(163.84)
    # 40 GB / 131,072 = 305,175.8 tokens; / 2,000 = 152.6
    gb = seeds.seed2_kv_token_capacity(40 * GB, 131_072)
    assert gb == pytest.approx(305_175.78, abs=0.01)
    assert seeds.seed2_concurrency(gb, 2000) == pytest.approx(152.59, abs=0.01)


def test_seed2_replicas() -> None:
    # QPS 100 x 500 output tokens = 50,000 tokens/s; R = 12,000: ceil(4.17) = 5; x 1.3 = 6.5 -> 7
    assert seeds.seed2_replicas(100 * 500, 12_000) == 5
    assert seeds.seed2_replicas(100 * 500, 12_000, 1.3) == 7


# ---- teach: tables ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def hw8():
    return hardware(LLAMA, "H100-SXM-80GB", tp=8)


def test_memory_parts_add_up_to_the_gpu(hw8) -> None:
    mem = hardware_memory(hw8)
    parts = teach.memory_parts_gib(mem)
    assert list(parts) == list(teach.MEMORY_PARTS)
    assert sum(parts.values()) == pytest.approx(mem.total / GiB)
    table = teach.memory_table({"a": mem, "b": mem})
    assert list(table.index) == ["a", "b"] and "KV tokens per GPU" in table.columns


def test_hardware_memory_does_not_raise_when_it_does_not_fit() -> None:
    mem = hardware_memory(hardware(LLAMA, "H100-SXM-80GB", tp=1))
    assert not mem.fits
    assert teach.memory_parts_gib(mem)["KV budget"] == 0
    # the engine's unused share is 1 - gpu_memory_utilization of memory whether or not it fits,
    # and the table says by how much the weights and reservations overrun the usable memory
    assert teach.memory_parts_gib(mem)["not usable"] == pytest.approx(0.08 * mem.total / GiB)  # vLLM's 0.92
    short = teach.memory_table({"one GPU": mem}).loc["one GPU", "short by"]
    assert short == pytest.approx((mem.weights.total + mem.reserved - mem.usable) / GiB)


def test_split_step_separates_the_kernels(hw8) -> None:
    batch = np.array([1.0, 64.0, 1024.0])
    work = step_work(hw8, decode_tokens=batch, decode_context=4096)
    whole = step_time(hw8, work, COEF)
    parts = teach.split_step(hw8, work, COEF)
    assert set(parts) == {"matmuls", "attention"}
    np.testing.assert_allclose(parts["matmuls"].compute_s + parts["attention"].compute_s, whole.compute_s)
    np.testing.assert_allclose(parts["matmuls"].memory_s + parts["attention"].memory_s, whole.memory_s)
    # attention reads the KV cache: HBM-bound at any batch
    assert teach.crossover(batch, parts["attention"]) is None
    assert teach.crossover(batch, parts["matmuls"]) == 1024


def test_crossover() -> None:
    z = np.zeros(3)
    st = StepTime(
        compute_s=np.array([1.0, 2.0, 3.0]),
        memory_s=np.array([2.5, 2.5, 2.5]),
        comm_s=z,
        overhead_s=z,
        total_s=z,
        device_s=z,
    )
    assert teach.crossover([1, 2, 3], st) == 3
    never = StepTime(
        compute_s=np.array([1.0, 2.0, 3.0]), memory_s=np.full(3, 9.0), comm_s=z, overhead_s=z, total_s=z, device_s=z
    )
    assert teach.crossover([1, 2, 3], never) is None


def test_work_and_flop_tables(hw8) -> None:
    pre = step_work(hw8, decode_tokens=0, decode_context=0, prefill_tokens=4096, prefill_pairs=4096**2 / 2)
    dec = step_work(hw8, decode_tokens=1, decode_context=4096)
    table = teach.work_table(
        {"pre": (4096, pre, step_time(hw8, pre, COEF)), "dec": (1, dec, step_time(hw8, dec, COEF))}
    )
    assert table.loc["pre", "bound by"] == "compute" and table.loc["dec", "bound by"] == "HBM bandwidth"
    prompts = np.array([1024.0, 131072.0])
    hw1 = hardware(LLAMA, "H100-SXM-80GB")
    w = step_work(
        hw1,
        decode_tokens=0 * prompts,
        decode_context=0 * prompts,
        prefill_tokens=prompts,
        prefill_pairs=prefill_pairs_per_layer(hw1.spec, prompts),
    )
    flops = teach.flop_table(prompts, w, seeds.seed1_forward_flop(70, prompts))
    assert len(flops) == 2
    assert flops["attention share"].iloc[0] < 0.05 < 0.5 < flops["attention share"].iloc[1]


def test_little_law_table(hw8) -> None:
    c = np.array([1.0, 16.0, 500.0])
    pt = closed_loop(hw8, COEF, Requests(3840, 256, max_running=336), concurrency=c)
    table = teach.little_law_table(pt, 256)
    np.testing.assert_allclose(table["X x (TTFT + (O-1) TPOT)"], c, rtol=1e-6)


def test_number_format() -> None:
    assert teach.number_format(327680.0) == "327,680"
    assert teach.number_format(8.0) == "8"
    assert teach.number_format(0.0514) == "0.0514"
    assert teach.number_format(math.inf) == "inf"


# ---- teach: figures ---------------------------------------------------------------------------------
def _lines(fig: Figure, i: int = 0) -> int:
    return len(fig.axes[i].get_lines())


def test_memory_figure(hw8) -> None:
    mems = {"1 GPU": hardware_memory(hardware(LLAMA, "H100-SXM-80GB")), "8 GPUs": hardware_memory(hw8)}
    fig = teach.memory_comparison_figure(mems)
    assert isinstance(fig, Figure) and len(fig.axes) == 1
    ax = fig.axes[0]
    assert len(ax.patches) == len(teach.MEMORY_PARTS) * 2  # one rectangle per part per bar
    assert any("does not fit" in t.get_text() for t in ax.texts)


def test_line_figures() -> None:
    ctx = np.array([4096.0, 8192.0, 16384.0])
    fig = teach.kv_per_request_figure(ctx, {"a": ctx / 1e4, "b": ctx / 1e5})
    assert isinstance(fig, Figure) and len(fig.axes) == 1 and _lines(fig) == 2
    fig = teach.concurrency_vs_context_figure(ctx, {"a": 1e6 / ctx, "b": 1e5 / ctx, "c": 1e4 / ctx})
    assert len(fig.axes) == 1 and _lines(fig) == 3


def test_limits_figure() -> None:
    panels = {
        "seed": {"memory": 41, "compute": 312, "bandwidth": 6357},
        "gpucap": {"memory": 341, "compute": 59, "x": None},
    }
    fig = teach.limits_figure(panels, {"seed": 41, "gpucap": 47})
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    assert len(fig.axes[0].patches) == 3 and len(fig.axes[1].patches) == 2  # None draws no bar
    assert any("not binding" in t.get_text() for t in fig.axes[1].texts)
    assert _lines(fig, 0) == 1  # the recommended line


def test_step_time_figure(hw8) -> None:
    batch = np.array([1.0, 8.0, 64.0, 512.0])
    work = step_work(hw8, decode_tokens=batch, decode_context=256)
    st = step_time(hw8, work, COEF)
    fig = teach.step_time_figure(batch, st, marks={"x": 64.0})
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    assert _lines(fig, 0) == 5 + 1  # total, compute, HBM, communication, overhead + one mark
    fig = teach.step_time_figure(batch, st, parts=teach.split_step(hw8, work, COEF))
    assert _lines(fig, 0) == 1 + 4 + 2 and _lines(fig, 1) == 1


def test_step_split_and_comm_share_figures(hw8) -> None:
    batch = np.array([1.0, 64.0])
    pcie = hardware(LLAMA, "L40S-48GB", tp=8)
    steps = {
        k: step_time(h, step_work(h, decode_tokens=batch, decode_context=4096), COEF)
        for k, h in (("sxm", hw8), ("pcie", pcie))
    }
    fig = teach.comm_share_figure(batch, steps)
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    assert _lines(fig, 0) == 3 and _lines(fig, 1) == 2  # two GPUs + the 50% line
    one = {
        k: step_time(h, step_work(h, decode_tokens=64, decode_context=4096), COEF)
        for k, h in (("sxm", hw8), ("pcie", pcie))
    }
    fig = teach.step_split_figure(one)
    assert len(fig.axes) == 1 and len(fig.axes[0].patches) == 3 * 2
    assert sum("comm" in t.get_text() for t in fig.axes[0].texts) == 2


def test_latency_and_open_loop_figures(hw8) -> None:
    c = np.array([1.0, 16.0, 128.0])
    pt = closed_loop(hw8, COEF, Requests(3840, 256, max_running=336), concurrency=c)
    fig = teach.latency_figure(pt, ttft_slo_s=2.0, tpot_slo_s=0.1, marks={"rec": 115.0})
    assert isinstance(fig, Figure) and len(fig.axes) == 3
    assert _lines(fig, 0) == 3 and _lines(fig, 2) == 2  # curve + SLO + mark; no SLO on tokens/s
    service = float(closed_loop(hw8, COEF, Requests(3840, 256, max_running=336), concurrency=336).requests_per_s)
    rates = np.array([0.5, 0.9, 1.2]) * service
    ol = open_loop(hw8, COEF, Requests(3840, 256, max_running=336), request_rate=rates)
    assert np.isinf(ol.ttft_s[-1])
    fig = teach.open_loop_figure(rates, ol, service)
    assert isinstance(fig, Figure) and len(fig.axes) == 3
    assert _lines(fig, 0) == 3 and _lines(fig, 2) == 3  # arrivals, served, service line / TTFT, TPOT, line
