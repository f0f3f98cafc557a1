"""Roofline step time against hand-derived FLOP, bytes and link times (DESIGN.md section 4)."""

import numpy as np
import pytest

from gpucap.config import EngineConfig, hardware
from gpucap.physics.coefficients import Coefficients
from gpucap.physics.memory import weight_bytes_per_gpu
from gpucap.physics.step import attention_flop_per_pair, prefill_pairs_per_layer, step_work
from gpucap.physics.steptime import step_time

IDEAL = Coefficients(
    u_compute=1.0, u_hbm=1.0, u_link=1.0, overlap=0.0, t_overhead_s=0.0, t_seq_s=0.0, t_request_s=0.0, t_layer_s=0.0
)

# Llama-3-8B by hand: per layer q,o 2 x 4096^2 + k,v 2 x 4096 x 1024 + MLP 3 x 4096 x 14336
LLAMA8B_LAYER = 2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336
LLAMA8B_BODY = 32 * LLAMA8B_LAYER  # 6.98e9 non-embedding parameters
LLAMA8B_LM_HEAD = 128256 * 4096


def test_batch1_decode_reads_every_weight_once() -> None:
    # H100 SXM: 3.35 TB/s. Bytes = body + lm_head, bf16 (the embedding table is not read).
    hw = hardware("meta-llama/Llama-3.1-8B", "H100-SXM-80GB")
    t = step_time(hw, step_work(hw, decode_tokens=1, decode_context=1), IDEAL)
    expected = (LLAMA8B_BODY + LLAMA8B_LM_HEAD) * 2 / 3.35e12  # 4.48 ms
    assert float(t.total_s) == pytest.approx(expected, rel=0.01)
    assert float(t.memory_s) > 100 * float(t.compute_s)  # decode is HBM-bound


def test_large_batch_turns_compute_bound() -> None:
    # H100 bf16: 989.5 TFLOP/s / 3.35 TB/s = 295 FLOP per byte; a bf16 GEMM does 1 FLOP per byte
    # per token, so the matmuls turn compute-bound near 295 tokens per step.
    hw = hardware("meta-llama/Llama-3.1-8B", "H100-SXM-80GB")
    w = step_work(hw, decode_tokens=np.array([64.0, 4096.0]), decode_context=1)
    gemm_compute = w.linear_flop / 989.5e12
    gemm_memory = w.weight_bytes / 3.35e12
    assert gemm_compute[0] < gemm_memory[0] and gemm_compute[1] > gemm_memory[1]
    flop_4096 = 2 * (LLAMA8B_BODY + LLAMA8B_LM_HEAD) * 4096
    assert w.linear_flop[1] == pytest.approx(flop_4096, rel=0.001)


def test_tp8_allreduce_ring_time() -> None:
    # Llama-3-70B, tp=8 on NVSwitch (450 GB/s per direction, alpha 10 us): 2 all-reduces per
    # layer x 80 layers, each of one token's hidden state (8192 x 2 bytes):
    # 160 x (10 us + 2 x 7/8 x 16384 B / 450e9 B/s)
    hw = hardware("meta-llama/Llama-3.3-70B-Instruct", "H100-SXM-80GB", tp=8)
    w = step_work(hw, decode_tokens=1, decode_context=1)
    t = step_time(hw, w, IDEAL)
    assert float(t.comm_s) == pytest.approx(160 * (10e-6 + 1.75 * 16384 / 450e9), rel=1e-6)


def test_pcie_costs_more_than_nvlink() -> None:
    nv = hardware("meta-llama/Llama-3.3-70B-Instruct", "H100-SXM-80GB", tp=8, weight_dtype="fp8")
    pcie = hardware("meta-llama/Llama-3.3-70B-Instruct", "H100-PCIE-80GB", tp=8, weight_dtype="fp8")
    kw = dict(decode_tokens=256.0, decode_context=2000.0)
    t_nv = step_time(nv, step_work(nv, **kw), IDEAL)
    t_pcie = step_time(pcie, step_work(pcie, **kw), IDEAL)
    assert float(t_pcie.comm_s) > 3 * float(t_nv.comm_s)


def test_moe_small_batch_reads_few_experts() -> None:
    # Mixtral: 8 experts, top-2. One token touches 2 of 8 experts: 1 - (1 - 2/8)^1 = 1/4.
    hw = hardware("mistralai/Mixtral-8x7B-v0.1", "H100-SXM-80GB")
    experts = weight_bytes_per_gpu(hw.spec, "bf16", hw.layout).experts
    one = step_work(hw, decode_tokens=1, decode_context=1)
    many = step_work(hw, decode_tokens=512, decode_context=1)
    act = 32 * 10 * 4096 * 2  # activation bytes per token, all layers
    assert float(many.weight_bytes - one.weight_bytes) == pytest.approx(0.75 * experts + 511 * act, rel=1e-3)


def test_attention_flop_and_prefill_pairs() -> None:
    hw = hardware("meta-llama/Llama-3.1-8B", "H100-SXM-80GB")
    assert attention_flop_per_pair(hw.spec, decode=True) == 4 * 32 * 128
    assert float(prefill_pairs_per_layer(hw.spec, 1000)) == 1000 * 1000 / 2
    oss = hardware("openai/gpt-oss-20b", "H100-SXM-80GB", weight_dtype="mxfp4").spec
    # half the layers full (I^2/2), half a 128 window (128 I - 128^2/2)
    assert float(prefill_pairs_per_layer(oss, 1000)) == pytest.approx((1000**2 / 2 + 128 * 1000 - 128**2 / 2) / 2)


def test_overheads_floors_and_eager_mode() -> None:
    """The host's 1 ms per step is its own term (overlapped with the GPU by default, so the step
    is the longer of the two); the floors add to the GPU's time: 10 us per sequence x 100, 20 us
    per layer x 32 layers, and 50 us of launches per layer x 32 layers without CUDA graphs."""
    hw = hardware("meta-llama/Llama-3.1-8B", "H100-SXM-80GB")
    eager = hardware("meta-llama/Llama-3.1-8B", "H100-SXM-80GB", engine=EngineConfig(cuda_graphs=False))
    bare = Coefficients(t_overhead_s=1e-3, t_seq_s=0.0, t_layer_s=0.0)
    coef = Coefficients(t_overhead_s=1e-3, t_seq_s=1e-5, t_layer_s=20e-6)
    work = step_work(hw, decode_tokens=100, decode_context=10)
    t0, t = step_time(hw, work, bare), step_time(hw, work, coef)
    assert float(t.overhead_s) == pytest.approx(1e-3)
    assert float(t.total_s - t0.total_s) == pytest.approx(100 * 1e-5 + 32 * 20e-6)
    t_eager = step_time(eager, step_work(eager, decode_tokens=100, decode_context=10), coef)
    assert float(t_eager.total_s - t.total_s) == pytest.approx(32 * 50e-6)
    # the GPU's part (6.4 ms) is longer than the host's 1 ms: overlapped, the host adds nothing;
    # run one after the other (vLLM 0.11 and earlier), it adds its 1 ms
    serial = hardware("meta-llama/Llama-3.1-8B", "H100-SXM-80GB", engine=EngineConfig(overlap_host=False))
    t_serial = step_time(serial, step_work(serial, decode_tokens=100, decode_context=10), coef)
    assert float(t_serial.total_s - t.total_s) == pytest.approx(1e-3)


def test_pipeline_parallel_does_not_cut_decode_latency() -> None:
    # a token passes every stage: at batch 1 pp=2 reads the same weights one after another
    one = hardware("meta-llama/Llama-3.3-70B-Instruct", "H200-SXM-141GB")
    two = hardware("meta-llama/Llama-3.3-70B-Instruct", "H200-SXM-141GB", pp=2)
    t1 = step_time(one, step_work(one, decode_tokens=1, decode_context=100), IDEAL)
    t2 = step_time(two, step_work(two, decode_tokens=1, decode_context=100), IDEAL)
    assert float(t2.memory_s) == pytest.approx(float(t1.memory_s), rel=0.02)


def test_experts_touched_by_hand() -> None:
    from gpucap.catalog.lookup import load_model
    from gpucap.physics.step import experts_touched

    spec = load_model("Qwen/Qwen3-30B-A3B")  # 128 routed experts, 8 per token (config.json)
    assert spec.num_experts == 128 and spec.experts_per_token == 8
    # one token: 8 / 128 = 6.25%; 56 tokens: 1 - (120/128)^56 = 1 - 0.9375^56 = 1 - 0.02694 = 97.31%
    assert float(experts_touched(spec, 1)) == pytest.approx(0.0625)
    assert float(experts_touched(spec, 56)) == pytest.approx(0.97306, abs=1e-5)


def test_mxfp4_matmuls_run_at_the_activations_rate() -> None:
    """gpt-oss's MXFP4 experts are multiplied by bf16 activations in vLLM on every GPU (0.32's
    gpt-oss backend priority puts MXFP4 x BF16 first) and by MXFP8 activations in TensorRT-LLM on
    Blackwell (examples/models/core/gpt_oss/README.md), bf16 on Hopper."""
    from gpucap.physics.step import matmul_format

    def fmt(gpu: str, engine: str) -> str:
        return matmul_format(hardware("openai/gpt-oss-120b", gpu, engine=EngineConfig(engine=engine)))

    assert hardware("openai/gpt-oss-120b", "B200-180GB").weight_dtype == "mxfp4"  # the checkpoint's format
    assert [fmt("B200-180GB", "vllm"), fmt("B200-180GB", "trtllm"), fmt("H100-SXM-80GB", "trtllm")] == [
        "bf16", "fp8", "bf16",
    ]  # fmt: skip
    assert fmt("MI355X-288GB", "trtllm") == "bf16" and fmt("A100-SXM-80GB", "vllm") == "bf16"
    # other formats run at their own rate
    assert matmul_format(hardware("Qwen/Qwen3-8B", "B200-180GB", weight_dtype="nvfp4")) == "fp4"


def test_a_device_that_hides_nothing_adds_its_rooflines() -> None:
    """rho = 0 (one CPU core streaming its weights): each kernel takes ``c + m`` instead of
    ``max(c, m)``; rho = 0.5 hides half of the shorter one. Llama-3.1-8B on an H100 at 64
    decodes of 1,000 tokens, by hand: matmuls 64 x 2 x 8.03e9 FLOP / 989.5 TFLOP/s = 1.04 ms
    against 16.06 GB / 3.35 TB/s = 4.79 ms; attention 64 x 1,000 x 32 layers x 4 x 4,096 FLOP
    = 33.6 GFLOP, 0.034 ms, against 64 x 1,000 x 131,072 bytes (32 layers x 2 x 8 heads x 128
    x 2 bytes) / 3.35 TB/s = 2.50 ms."""
    import dataclasses

    hw = hardware("meta-llama/Llama-3.1-8B", "H100-SXM-80GB")
    work = step_work(hw, decode_tokens=64.0, decode_context=1000.0)
    t = {}
    for rho in (1.0, 0.5, 0.0):
        h = dataclasses.replace(hw, gpu=dataclasses.replace(hw.gpu, roofline_overlap=rho))
        t[rho] = float(step_time(h, work, IDEAL).total_s)
    gemm_c, gemm_m = (
        64 * 2 * (LLAMA8B_BODY + LLAMA8B_LM_HEAD) / 989.5e12,
        2 * (LLAMA8B_BODY + LLAMA8B_LM_HEAD) / 3.35e12,
    )
    attn_c, attn_m = 64 * 1000 * 32 * 4 * 4096 / 989.5e12, 64 * 1000 * 32 * 2 * 8 * 128 * 2 / 3.35e12
    assert t[1.0] == pytest.approx(gemm_m + attn_m, rel=0.02)
    assert t[0.0] == pytest.approx(gemm_c + gemm_m + attn_c + attn_m, rel=0.02)
    assert t[0.5] == pytest.approx(gemm_m + attn_m + 0.5 * (gemm_c + attn_c), rel=0.02)
