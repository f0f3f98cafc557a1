"""gpucap's memory terms against vLLM's own start-up logs (data/memory/vllm-startup-logs.csv,
each case with its source and quoted lines; benchmarks/memory_logs.py prints every case)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from gpucap.catalog.gpus import get_gpu
from gpucap.config import Layout, hardware
from gpucap.physics.memory import kv_bytes_per_token_per_gpu, mxfp4_expert_padding, weight_bytes_per_gpu
from gpucap.units import GiB

TABLE = Path(__file__).resolve().parents[1] / "data" / "memory" / "vllm-startup-logs.csv"


def test_every_case_quotes_its_source():
    cases = pd.read_csv(TABLE)
    assert len(cases) >= 8
    assert cases["source"].notna().all() and cases["quote"].str.contains("GiB").all()


def test_mxfp4_experts_are_stored_padded_to_the_kernel_tiles():
    hw = hardware("openai/gpt-oss-120b", "A100-SXM-80GB", tp=4)
    # Marlin on Ampere: each GPU's 2880 / 4 = 720 intermediate rows round up to 768 (128s),
    # the hidden 2880 to 3072 (256s)
    assert mxfp4_expert_padding(hw.spec, hw.layout, hw.gpu) == pytest.approx(768 * 3072 / (720 * 2880))
    # vLLM 0.10.1.1 on 4 x A100-80GB: "Model loading took 17.2217 GiB" (case 25)
    w = weight_bytes_per_gpu(hw.spec, "mxfp4", hw.layout, hw.gpu).total / GiB
    assert w == pytest.approx(17.2217, rel=0.01)
    # bf16 weights and GPUs with no kernel padding are untouched
    assert mxfp4_expert_padding(hw.spec, Layout(), get_gpu("H100-SXM-80GB")) == 1.0  # 2880 is a multiple of 64


def test_moe_backend_sets_the_mxfp4_padding():
    """vLLM 0.10.1 ran gpt-oss-120b's experts through Marlin on an H100 (vllm-project/vllm#23278 logs
    'Weight-only FP4 compression will be used leveraging the Marlin kernel'): I 2880 rounds up to
    2944 (128s) and H 2880 to 3072 (256s); vLLM 0.32's default there (Triton) pads neither."""
    hw = hardware("openai/gpt-oss-120b", "H100-SXM-80GB")
    assert mxfp4_expert_padding(hw.spec, hw.layout, hw.gpu, "marlin") == pytest.approx(2944 * 3072 / 2880**2)
    assert mxfp4_expert_padding(hw.spec, hw.layout, hw.gpu, "triton") == 1.0
    # "Model loading took 65.9651 GiB" (case 12)
    w = weight_bytes_per_gpu(hw.spec, "mxfp4", hw.layout, hw.gpu, "marlin").total / GiB
    assert w == pytest.approx(65.9651, rel=0.01)
    # on Blackwell, Triton stores them unpadded where "auto" picks FlashInfer's TRTLLM-gen tiles
    b200 = get_gpu("B200-180GB")
    assert mxfp4_expert_padding(hw.spec, hw.layout, b200, "triton") == 1.0
    assert mxfp4_expert_padding(hw.spec, hw.layout, b200) == pytest.approx(2944 * 3072 / 2880**2)


def test_kv_per_token_matches_the_engines_token_count():
    # case 28: Qwen3-32B at tp 2, "Available KV cache memory: 8.22 GiB", "GPU KV cache size: 67,296 tokens".
    # 64 layers x 2 x (8 KV heads / 2) x 128 x 2 bytes = 131,072 bytes per token per GPU
    hw = hardware("Qwen/Qwen3-32B", "RTX-PRO-6000-96GB", tp=2)
    per_token = kv_bytes_per_token_per_gpu(hw.spec, "auto", hw.layout)
    assert per_token == 64 * 2 * 4 * 128 * 2 == 131_072
    assert 8.22 * GiB / per_token == pytest.approx(67_296, rel=0.002)  # 8.22 is rounded to 0.01 GiB
