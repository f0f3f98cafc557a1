"""Two kernel limits the plain rooflines miss, against hand-derived numbers: the softmax's
exponentials on the special-function units, and the issue-bound MXFP4 x bf16 expert GEMMs."""

import dataclasses
from pathlib import Path

import numpy as np
import pytest

import gpucap
from gpucap.catalog.gpus import get_gpu, read_gpu_file
from gpucap.config import EngineConfig, hardware
from gpucap.physics.attention import softmax_slowdown
from gpucap.physics.coefficients import Coefficients
from gpucap.physics.step import prefill_pairs_per_layer, step_work
from gpucap.physics.steptime import ATTN_COMPUTE, GEMM_COMPUTE, step_terms

IDEAL = Coefficients(
    u_compute=1.0, u_hbm=1.0, u_link=1.0, overlap=0.0, t_overhead_s=0.0, t_seq_s=0.0, t_request_s=0.0, t_layer_s=0.0
)

# gpt-oss-20b (config.json): 24 layers, 64 query heads of 64, 32 experts of which 4 per token,
# each expert 2880 x 5760 (gate and up) + 2880 x 2880 (down) weights and 5760 + 2880 biases.
OSS20_EXPERT_PARAMS = 2880 * 5760 + 2880 * 2880 + 5760 + 2880
OSS20_EXPERT_FLOP_PER_TOKEN = 2 * OSS20_EXPERT_PARAMS * 4 * 24


def test_sm_rates_from_the_catalog() -> None:
    # H100 SXM: 132 SMs x 1830 MHz x 16 exponentials a clock = 3.865e12/s, FlashAttention-3's
    # "3.9 TFLOPS of special functions"; 989.5e12 / 3.865e12 = 256 bf16 FLOP per exponential.
    h100 = get_gpu("H100-SXM-80GB")
    assert h100.exp_per_s == pytest.approx(132 * 1830e6 * 16)
    assert h100.peak_flops_per_s("bf16") / h100.exp_per_s == pytest.approx(256, rel=1e-3)
    # B200: tensor cores twice Hopper's per SM (8192 FLOP a clock), the same 16 exponentials.
    b200 = get_gpu("B200-180GB")
    assert b200.peak_flops_per_s("bf16") / b200.exp_per_s == pytest.approx(8192 / 16, rel=1e-3)
    assert h100.mxfp4_bf16_share == 0.257  # sglang#38884: 254 TF of 989.5
    assert b200.mxfp4_bf16_share == 0.0  # no ceiling where none was measured


def _gpu_file(tmp_path: Path, **cells: str) -> Path:
    row = {
        "key": "X1",
        "memory_GB": "80",
        "bf16_dense_TFLOPs": "1000",
        "hbm_TB_per_s": "3",
        "link_kind": "pcie",
        "link_GB_per_s_per_direction": "32",
    } | cells
    path = tmp_path / "gpus.csv"
    path.write_text(",".join(row) + "\n" + ",".join(row.values()) + "\n")
    return path


def test_exponential_rate_needs_all_three_columns(tmp_path: Path) -> None:
    full = read_gpu_file(_gpu_file(tmp_path, sm_count="100", sm_clock_MHz="2000", exp2_per_clock_per_sm="16"))
    assert full["X1"].exp_per_s == pytest.approx(100 * 2e9 * 16)
    partial = read_gpu_file(_gpu_file(tmp_path, sm_count="100", sm_clock_MHz="2000"))
    assert partial["X1"].exp_per_s == 0.0


def test_a_share_above_one_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="mxfp4_bf16_peak_share.*25.7.*in \\(0, 1\\]"):
        read_gpu_file(_gpu_file(tmp_path, mxfp4_bf16_peak_share="25.7"))


def _prefill_attention_s(model: str, gpu_key: str, flop_per_exp: float | None) -> tuple[float, float]:
    """Attention compute seconds of a 4096-token prefill, at IDEAL efficiencies, and its pairs."""
    hw = hardware(model, gpu_key)
    gpu = hw.gpu
    exp_per_s = gpu.peak_flops_per_s("bf16") / flop_per_exp if flop_per_exp else 0.0
    hw = dataclasses.replace(hw, gpu=dataclasses.replace(gpu, exp_per_s=exp_per_s))
    pairs = prefill_pairs_per_layer(hw.spec, 4096.0)
    work = step_work(hw, decode_tokens=0.0, decode_context=0.0, prefill_tokens=4096.0, prefill_pairs=pairs)
    return float(step_terms(hw, work, IDEAL)[ATTN_COMPUTE]), float(pairs)


def test_head_dim_64_attention_is_exponential_bound_at_512_flop_per_exponential() -> None:
    # A pair of one head costs 4 x 64 = 256 FLOP (QK^T and AV) and one exponential. At 512 bf16
    # FLOP per exponential (B200) the exponentials take twice the tensor time; at 256 (H100) as
    # long; so attention compute doubles at 512 and is unchanged at 256.
    model = "openai/gpt-oss-20b"
    plain, pairs = _prefill_attention_s(model, "B200-180GB", None)
    assert _prefill_attention_s(model, "B200-180GB", 512.0)[0] == pytest.approx(2 * plain, rel=1e-9)
    assert _prefill_attention_s(model, "B200-180GB", 256.0)[0] == pytest.approx(plain, rel=1e-9)
    # By hand: 24 layers x 64 heads x pairs x 256 FLOP at 2.25e15 FLOP/s, then doubled.
    assert _prefill_attention_s(model, "B200-180GB", 512.0)[0] == pytest.approx(
        2 * 24 * 64 * pairs * 256 / 2.25e15, rel=1e-9
    )


def test_head_dim_128_attention_stays_tensor_bound_on_b200() -> None:
    # Llama-3.1-8B: 4 x 128 = 512 FLOP per pair and head, as many as B200 does per exponential.
    model = "meta-llama/Llama-3.1-8B"
    plain, _ = _prefill_attention_s(model, "B200-180GB", None)
    assert _prefill_attention_s(model, "B200-180GB", 512.0)[0] == pytest.approx(plain, rel=1e-9)


def _gemm_compute_s(gpu_key: str, engine: str, coef: Coefficients, tokens: float = 8192.0) -> float:
    hw = hardware("openai/gpt-oss-20b", gpu_key, engine=EngineConfig(engine=engine))
    work = step_work(hw, decode_tokens=0.0, decode_context=0.0, prefill_tokens=tokens, prefill_pairs=0.0)
    return float(step_terms(hw, work, coef)[GEMM_COMPUTE])


def test_mxfp4_experts_on_hopper_run_at_the_measured_share() -> None:
    # H100, vLLM (MXFP4 x bf16): 8192 prompt tokens. Experts at 25.7% of 989.5e12 FLOP/s, the rest
    # (attention projections, router: dense params) at u_compute.
    hw = hardware("openai/gpt-oss-20b", "H100-SXM-80GB")
    dense_flop = 2 * hw.spec.dense_params * 8192
    experts_flop = OSS20_EXPERT_FLOP_PER_TOKEN * 8192
    half = dataclasses.replace(IDEAL, u_compute=0.5)
    expected = dense_flop / (989.5e12 * 0.5) + experts_flop / (989.5e12 * 0.257)
    assert _gemm_compute_s("H100-SXM-80GB", "vllm", half) == pytest.approx(expected, rel=1e-9)
    # Below the ceiling u_compute alone counts.
    low = dataclasses.replace(IDEAL, u_compute=0.2)
    assert _gemm_compute_s("H100-SXM-80GB", "vllm", low) == pytest.approx(
        (dense_flop + experts_flop) / (989.5e12 * 0.2), rel=1e-9
    )


def test_mxfp8_experts_on_blackwell_run_at_the_measured_share() -> None:
    # TensorRT-LLM on B200 multiplies MXFP8 activations by the MXFP4 experts, at no more than 25.5%
    # of the fp8 peak (4.5e15): flashinfer#1475's fused MoE took 0.453 ms for 512 tokens and 0.578
    # ms for 1024 on a B200 locked at 1500 MHz, and 512 x 226.5 MFLOP (gpt-oss-120b's experts
    # padded to 3072) in those 0.125 ms is 928 TFLOP/s of 4.5e15 x 1500 / 1856 = 3.637e15.
    assert 512 * 226.5e6 / 0.125e-3 / (4.5e15 * 1500 / 1856) == pytest.approx(0.255, abs=0.001)
    assert get_gpu("B200-180GB").mxfp4_fp8_share == 0.255
    # The experts are multiplied at their padded sizes (intermediate 2880 -> 2944, to 128; hidden
    # 2880 -> 3072, to 256), and the attention projections, which gpt-oss leaves in bf16, at the
    # bf16 rate: 2.25e15 FLOP/s on a B200.
    half = dataclasses.replace(IDEAL, u_compute=0.5)
    hw = hardware("openai/gpt-oss-20b", "B200-180GB", engine=EngineConfig(engine="trtllm"))
    padding = 2944 * 3072 / (2880 * 2880)
    experts = OSS20_EXPERT_FLOP_PER_TOKEN * padding * 8192
    attention = 2 * hw.spec.attention_params * 8192
    other_dense = 2 * (hw.spec.dense_params - hw.spec.attention_params) * 8192
    expected = experts / (4.5e15 * 0.255) + other_dense / (4.5e15 * 0.5) + attention / (2.25e15 * 0.5)
    assert _gemm_compute_s("B200-180GB", "trtllm", half) == pytest.approx(expected, rel=1e-9)
    # Below the ceiling u_compute alone counts.
    low = dataclasses.replace(IDEAL, u_compute=0.2)
    expected_low = (experts + other_dense) / (4.5e15 * 0.2) + attention / (2.25e15 * 0.2)
    assert _gemm_compute_s("B200-180GB", "trtllm", low) == pytest.approx(expected_low, rel=1e-9)


def test_no_ceiling_where_none_was_measured() -> None:
    # vLLM on B200 converts the experts to bf16 (FlashInfer's MXFP4 x BF16 first), but no bf16
    # share was measured on a B200: everything at u_compute of the bf16 peak.
    half = dataclasses.replace(IDEAL, u_compute=0.5)
    hw = hardware("openai/gpt-oss-20b", "B200-180GB")
    experts = OSS20_EXPERT_FLOP_PER_TOKEN * 2944 * 3072 / (2880 * 2880) * 8192
    dense = 2 * hw.spec.dense_params * 8192
    vllm = _gemm_compute_s("B200-180GB", "vllm", half)
    assert vllm == pytest.approx((experts + dense) / (2.25e15 * 0.5), rel=1e-9)


def test_lm_head_stays_at_the_bf16_rate() -> None:
    # Llama-3.1-8B in fp8 on an H100: 512 decoding tokens, no prompt. The lm_head's weights stay
    # bf16 (2 x 4096 x 128,256 FLOP a sampled token, at 989.5e12 FLOP/s); the other linear layers
    # are fp8 (1979e12). Its attention projections are quantized, so they take the fp8 rate.
    hw = hardware("meta-llama/Llama-3.1-8B", "H100-SXM-80GB", weight_dtype="fp8")
    work = step_work(hw, decode_tokens=512.0, decode_context=0.0)
    lm_head = 2 * 4096 * 128256 * 512
    assert float(work.bf16_weight_flop) == pytest.approx(lm_head, rel=1e-12)
    body = float(work.linear_flop) - lm_head
    expected = body / 1979e12 + lm_head / 989.5e12
    assert float(step_terms(hw, work, IDEAL)[GEMM_COMPUTE]) == pytest.approx(expected, rel=1e-9)


def test_dense_models_carry_no_mixed_input_flop() -> None:
    hw = hardware("meta-llama/Llama-3.1-8B", "H100-SXM-80GB")
    work = step_work(hw, decode_tokens=np.array([1.0, 512.0]), decode_context=100.0)
    assert np.all(work.mixed_input_flop == 0.0)


def test_softmax_slowdown_by_hand() -> None:
    # gpt-oss: 512 bf16 FLOP per exponential on B200 over 4 x 64 = 256 per pair and head: 2.
    assert softmax_slowdown(hardware("openai/gpt-oss-20b", "B200-180GB")) == pytest.approx(2.0, rel=1e-3)
    assert softmax_slowdown(hardware("meta-llama/Llama-3.1-8B", "B200-180GB")) == 1.0  # 512 / 512
    assert softmax_slowdown(hardware("openai/gpt-oss-20b", "A100-SXM-80GB")) == 1.0  # 128 / 256


def test_the_estimate_says_which_limit_applies() -> None:
    b200 = gpucap.estimate("openai/gpt-oss-20b", "B200-180GB", 1, engine="trtllm", input_len=8000, output_len=1000)
    assert any("softmax's exponentials" in n and "2.00x" in n for n in b200.notes)
    h100 = gpucap.estimate("openai/gpt-oss-20b", "H100-SXM-80GB", 1, input_len=2000, output_len=200)
    assert any("25.7% of bf16 peak" in n for n in h100.notes)
    assert any("25.5% of fp8 peak" in n and "MXFP8" in n for n in b200.notes)
    llama = gpucap.estimate("meta-llama/Llama-3.1-8B", "H100-SXM-80GB", 1, input_len=2000, output_len=200)
    assert not any("exponentials" in n or "MXFP4" in n for n in llama.notes)
