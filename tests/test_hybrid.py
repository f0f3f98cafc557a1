"""Hybrid models (gpucap.catalog.hybrid): which layers are linear, their weights and per-request state,
and what that does to memory and the step. Shapes by hand from vLLM's layers (module docstring
of gpucap.catalog.hybrid); published parameter counts are checked in test_models via each card."""

from __future__ import annotations

import numpy as np
import pytest

from gpucap.catalog.lookup import load_model
from gpucap.config import hardware
from gpucap.physics.memory import (
    concurrency_by_memory,
    hardware_memory,
    kv_bytes_per_token,
    state_bytes_per_request_per_gpu,
)
from gpucap.physics.step import step_work

QWEN_NEXT = "Qwen/Qwen3-Next-80B-A3B-Instruct"


def test_qwen3_next_layers_and_gated_deltanet_shapes():
    spec = load_model(QWEN_NEXT)
    # full attention every 4th layer: 3, 7, ..., 47
    assert [i for i, w in enumerate(spec.layer_window) if w != 0] == list(range(3, 48, 4))
    assert (spec.num_kv_layers, spec.num_linear_layers) == (12, 36)
    # in_proj_qkvz 2048 x (2 x 16 x 128 + 2 x 32 x 128) + in_proj_ba 2048 x 64 + conv 8192 x 4
    # + A_log, dt_bias 2 x 32 + norm 128 + out_proj 4096 x 2048
    assert spec.linear.params == 2048 * 12288 + 2048 * 64 + 8192 * 4 + 64 + 128 + 4096 * 2048 == 33_718_464
    # conv state (4 - 1) x 8192, recurrent 32 heads x 128 x 128
    assert (spec.linear.conv_elements, spec.linear.state_elements) == (24_576, 524_288)
    # gated attention: q_proj carries the output gate, 2 x 16 x 256 rows
    assert spec.attention_params_per_layer == 2048 * 8192 + 2 * 2048 * 512 + 4096 * 2048
    # KV only on the 12 attention layers: 12 x 2 x 2 heads x 256 x 2 bytes
    assert kv_bytes_per_token(spec) == 12 * 2 * 2 * 256 * 2 == 24_576


def test_jamba_and_minimax_layouts():
    jamba = load_model("ai21labs/AI21-Jamba-1.5-Mini")
    assert [i for i, w in enumerate(jamba.layer_window) if w != 0] == [4, 12, 20, 28]
    assert [i for i, m in enumerate(jamba.layer_is_moe) if m] == list(range(1, 32, 2))
    # Mamba-1, inner 8192, state 16, dt rank 256, conv 4 (with bias):
    # in_proj 2 x 8192 x 4096, conv 8192 x 4 + 8192, x_proj 288 x 8192, dt_proj 8192 x 256 + 8192,
    # A_log 8192 x 16, D 8192, out_proj 4096 x 8192, norms 256 + 2 x 16
    by_hand = 2 * 8192 * 4096 + 8192 * 5 + 288 * 8192 + 8192 * 257 + 8192 * 16 + 8192 + 4096 * 8192 + 288
    assert jamba.linear.params == by_hand == 105_308_448
    m1 = load_model("MiniMaxAI/MiniMax-M1-80k")
    assert (m1.num_kv_layers, m1.num_linear_layers) == (10, 70)
    assert m1.linear.state_elements == 64 * 128 * 128 and m1.linear.conv_elements == 0
    m2 = load_model("MiniMaxAI/MiniMax-M2.7")
    assert m2.linear is None and m2.num_kv_layers == 62 and m2.checkpoint_dtype == "fp8"
    assert kv_bytes_per_token(m2) == 62 * 2 * 8 * 128 * 2 == 253_952


def test_state_takes_room_from_the_kv_cache():
    hw = hardware(QWEN_NEXT, "H200-SXM-141GB", tp=4)
    mem = hardware_memory(hw)
    # two copies x (24,576 + 524,288) x 2 bytes x 36 layers / tp 4
    state = 2 * (24_576 + 524_288) * 2 * 36 / 4
    assert mem.state_bytes_per_request == pytest.approx(state)
    assert state_bytes_per_request_per_gpu(hw.spec, hw.layout) == pytest.approx(state)
    ctx = 8000.0
    # 2 KV heads over 4 GPUs: each GPU keeps one head (replicated), half the model's KV per token
    per_request = ctx * 24_576 / 2 + state
    assert mem.kv_bytes_per_token_per_gpu == 24_576 / 2
    assert float(concurrency_by_memory(mem, hw.spec, hw.layout, ctx)) == np.floor(mem.kv_budget / per_request)


def test_linear_layers_add_no_attention_work_per_key():
    hw = hardware(QWEN_NEXT, "H200-SXM-141GB", tp=1)
    short, long = (step_work(hw, decode_tokens=1.0, decode_context=c) for c in (1000.0, 2000.0))
    # one more 1000 keys per token on the 12 attention layers only: 4 x 16 heads x 256 FLOP a pair
    assert float(long.attention_flop - short.attention_flop) == pytest.approx(12 * 1000 * 4 * 16 * 256)
    # and each step reads and writes one copy of the sequence's state: 2 x 548,864 x 2 x 36 bytes
    kv_per_key = float(long.kv_bytes - short.kv_bytes) / 1000
    state_traffic = float(short.kv_bytes) - 1000 * kv_per_key - 24_576  # minus the keys read and the one written
    assert state_traffic == pytest.approx(2 * 548_864 * 2 * 36, rel=1e-9)


def test_nemotron_h_blocks_pair_each_mlp_with_its_mixer():
    spec = load_model("nvidia/Nemotron-H-56B-Base-8K")
    # 118 blocks: 54 Mamba-2, 10 attention, 54 MLP; every MLP follows a mixer, so 64 layers, 10 of
    # them (the Mamba-2 blocks right before an attention block) without an MLP
    assert (spec.num_layers, spec.num_kv_layers, spec.num_linear_layers) == (64, 10, 54)
    assert (spec.num_dense_layers, spec.num_moe_layers) == (54, 0) and not spec.mlp_gated  # relu2
    # Mamba-2: in_proj (2 x 16384 + 2 x 8 x 256 + 256) x 8192, conv 20480 x 4 + bias 20480,
    # A_log, D, dt_bias 3 x 256, norm 16384, out_proj 8192 x 16384
    by_hand = 37_120 * 8192 + 20_480 * 5 + 768 + 16_384 + 8192 * 16_384
    assert spec.linear.params == by_hand == 438_424_320
    # state per request at tp 1: two copies x 54 layers x (3 x 20480 conv in bf16 + 256 x 64 x 256 in fp32)
    hw = hardware("nvidia/Nemotron-H-56B-Base-8K", "H200-SXM-141GB")
    assert state_bytes_per_request_per_gpu(hw.spec, hw.layout) == 2 * 54 * (61_440 * 2 + 4_194_304 * 4)
    nano = load_model("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
    assert (nano.num_layers, nano.num_kv_layers, nano.num_moe_layers) == (29, 6, 23)
    # one shared expert of 3712 beside 128 routed experts of 1856 (relu2: up and down)
    assert nano.shared_expert_params == 2 * 2688 * 3712
