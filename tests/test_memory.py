"""Memory per GPU: hand-derived KV and weight bytes (DESIGN.md section 3, seeds' examples)."""

import pytest

from gpucap.catalog.lookup import load_model
from gpucap.catalog.models import ModelSpec
from gpucap.config import EngineConfig, Layout, hardware
from gpucap.errors import DoesNotFit
from gpucap.estimate import estimate
from gpucap.physics.memory import (
    MemoryBreakdown,
    WeightBytes,
    concurrency_by_memory,
    held_tokens_per_layer,
    kv_bytes_per_token,
    kv_bytes_per_token_per_gpu,
    memory_limit,
    weight_bytes_per_gpu,
)
from gpucap.units import GB, GiB, weight_bytes_per_param

from .conftest import llama_like


def test_llama3_70b_kv_per_token() -> None:
    # 80 layers x 8 KV heads x 128 head_dim x 2 (K and V) x 2 bytes (bf16)
    spec = load_model("meta-llama/Llama-3.3-70B-Instruct")
    assert kv_bytes_per_token(spec, "bf16") == 80 * 8 * 128 * 2 * 2 == 327_680
    assert kv_bytes_per_token(spec, "fp8") == 163_840
    # tp=8: one KV head per GPU
    assert kv_bytes_per_token_per_gpu(spec, "bf16", Layout(tp=8)) == 40_960


def test_seed1_kv_error_is_8x() -> None:
    # Seed 1 used the 64 attention heads: 10 GiB per 4096-token request instead of 1.25 GiB.
    spec = load_model("meta-llama/Llama-3.3-70B-Instruct")
    right = kv_bytes_per_token(spec, "bf16") * 4096
    assert right == pytest.approx(1.25 * GiB)
    wrong = ModelSpec.from_hf_config(
        llama_like(num_hidden_layers=80, hidden_size=8192, num_attention_heads=64, num_key_value_heads=64)
    )
    assert kv_bytes_per_token(wrong, "bf16") * 4096 == pytest.approx(10 * GiB)


def test_deepseek_v3_mla_kv() -> None:
    # 61 layers x (kv_lora_rank 512 + rope 64) x 2 bytes; one latent, replicated on each TP rank
    spec = load_model("deepseek-ai/DeepSeek-V3")
    assert kv_bytes_per_token(spec, "bf16") == 61 * (512 + 64) * 2 == 70_272
    assert kv_bytes_per_token_per_gpu(spec, "bf16", Layout(tp=8)) == 70_272


def test_kv_heads_replicate_when_tp_exceeds_them() -> None:
    spec = ModelSpec.from_hf_config(llama_like())  # 8 KV heads
    # tp=16 -> max(1, 8/16) = 1 head per GPU: 32 layers x 2 x 1 x 128 x 2 bytes
    assert kv_bytes_per_token_per_gpu(spec, "bf16", Layout(tp=16)) == 32 * 2 * 128 * 2


def test_seed2_131kb_and_160_requests() -> None:
    # Seed 2: 32 layers, 8 KV heads, head_dim 128, bf16 -> 131,072 B/token;
    # 40 GiB of KV / 131,072 B = 327,680 tokens; / 2,000 tokens per request = 163 requests
    spec = ModelSpec.from_hf_config(llama_like())
    assert kv_bytes_per_token(spec, "bf16") == 131_072
    zero = WeightBytes(0, 0, 0, 0)
    mem = MemoryBreakdown(
        total=80 * GiB,
        usable=72 * GiB,
        weights=zero,
        activations=0,
        cuda_graphs=0,
        runtime_overhead=0,
        kv_budget=40 * GiB,
        kv_bytes_per_token=131_072,
        kv_bytes_per_token_per_gpu=131_072,
    )
    assert mem.kv_tokens_per_gpu == 327_680
    assert concurrency_by_memory(mem, spec, Layout(), 2000) == 163


def test_7b_bf16_weights_about_14_gb() -> None:
    # Seed 2: 7e9 params x 2 bytes ~ 14 GB. Llama-2-7B has 6.74e9 -> 13.5 GB.
    spec = load_model("meta-llama/Llama-2-7b-hf")
    w = weight_bytes_per_gpu(spec, "bf16", Layout())
    assert 13.2 * GB < w.total < 14.0 * GB
    assert w.total == pytest.approx(spec.total_params * 2, rel=0.001)


def test_weight_formats_bytes_per_param() -> None:
    assert weight_bytes_per_param("nvfp4") == 9 / 16  # 4 bits + an fp8 scale per 16 values
    assert weight_bytes_per_param("mxfp4") == 17 / 32  # 4 bits + an e8m0 scale per 32 values
    assert weight_bytes_per_param("int4") == pytest.approx(0.53, abs=0.005)
    with pytest.raises(ValueError, match="unknown weight dtype 'fp3'"):
        weight_bytes_per_param("fp3")


def test_tp_shards_weights_and_embeddings_stay_16_bit() -> None:
    spec = load_model("meta-llama/Llama-3.1-8B")
    one = weight_bytes_per_gpu(spec, "fp8", Layout())
    eight = weight_bytes_per_gpu(spec, "fp8", Layout(tp=8))
    assert one.embeddings == 2 * 128256 * 4096 * 2  # embedding + lm_head, bf16
    assert eight.embeddings == pytest.approx(one.embeddings / 8)
    assert eight.dense_mlp == pytest.approx(one.dense_mlp / 8)


def test_gpt_oss_keeps_attention_in_bf16() -> None:
    # its quantization_config leaves self_attn out of MXFP4
    spec = load_model("openai/gpt-oss-120b")
    w = weight_bytes_per_gpu(spec, "mxfp4", Layout())
    attn = spec.attention_params * 2 + spec.norm_params * 2
    assert w.attention == pytest.approx(attn)


def test_sliding_window_layers_hold_only_the_window() -> None:
    spec = load_model("openai/gpt-oss-120b")  # 18 full layers, 18 with a 128-token window
    held = held_tokens_per_layer(spec, 10_000)
    assert held == pytest.approx((18 * 10_000 + 18 * 128) / 36)
    assert held_tokens_per_layer(spec, 100) == 100


def test_paged_blocks_round_up() -> None:
    spec = ModelSpec.from_hf_config(llama_like())
    assert held_tokens_per_layer(spec, 17, block_size=16) == 32


def test_does_not_fit_says_by_how_much() -> None:
    with pytest.raises(DoesNotFit, match=r"short by [0-9.]+ GiB per GPU.*try tp x pp = 16 or more GPUs"):
        estimate("meta-llama/Llama-3.1-405B", "H100-SXM-80GB", input_len=1000, output_len=100)


def test_trtllm_gives_kv_a_share_of_free_memory() -> None:
    hw_v = hardware("Qwen/Qwen3-8B", "H100-SXM-80GB", engine="vllm")
    hw_t = hardware(
        "Qwen/Qwen3-8B",
        "H100-SXM-80GB",
        engine=EngineConfig(engine="trtllm", max_num_seqs=256, max_num_batched_tokens=8192),
    )
    mem_v, _ = memory_limit(hw_v, 2000)
    mem_t, _ = memory_limit(hw_t, 2000)
    # vLLM: 0.92 x total - reserved (its default since v0.20); TensorRT-LLM: 0.9 x (total - reserved)
    assert mem_v.kv_budget == pytest.approx(0.92 * mem_v.total - mem_v.weights.total - mem_v.reserved)
    assert mem_t.kv_budget == pytest.approx(0.9 * (mem_t.total - mem_t.weights.total - mem_t.reserved))
