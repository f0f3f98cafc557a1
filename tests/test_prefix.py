"""Prefix caching and multi-turn traffic: the workload's sums, memory with a shared system
prompt, and that a cache hit never makes the first token later."""

from __future__ import annotations

import numpy as np
import pytest

import gpucap
from gpucap.config import Workload, hardware
from gpucap.physics.coefficients import Coefficients
from gpucap.physics.memory import batch_slots, hardware_memory, memory_limit
from gpucap.queueing.simulate import kv_capacity_tokens, simulate

LLAMA_8B = "meta-llama/Llama-3.1-8B"


def test_turns_carry_the_history():
    # 3 turns of 500 new tokens (a 100-token system prompt among them) and 200-token answers:
    # a turn carries on average (3 - 1) / 2 earlier turns of 400 + 200 tokens
    wl = Workload(500, 200, prefix_tokens=100, turns=3)
    assert wl.history_len == 600 and wl.prompt_len == 1100
    assert wl.cached_tokens == 100 + 600 and wl.shared_tokens == 100
    assert wl.max_context == 500 + 2 * 600 + 200  # the last turn: two earlier turns of 600


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(prefix_tokens=600), "prefix_tokens=600.*between 0 and the prompt's input_len"),
        (dict(prefix_tokens=100, prefix_share=1.5), "prefix_share"),
        (dict(turns=0), "turns must be a whole number"),
        (dict(turns=1.5), "turns must be a whole number"),
        (dict(prefix_tokens=100, lengths="fixed"), "varied traffic"),
    ],
)
def test_bad_prefix_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Workload(500, 200, **kwargs)


def test_a_shared_system_prompt_is_held_once():
    hw = hardware(LLAMA_8B, "H100-SXM-80GB")
    mem = hardware_memory(hw)
    per_token = mem.kv_bytes_per_token_per_gpu  # 32 layers x 2 x 8 heads x 128 x 2 = 131,072
    assert per_token == 131_072
    _, holds = memory_limit(hw, 2200.0, shared_tokens=1000.0)
    # one copy of the 1,000-token prompt, then 1,200 tokens of each request's own
    assert holds == np.floor((mem.kv_budget - 1000 * per_token) / (1200 * per_token))


@pytest.mark.parametrize("load", [dict(concurrency=1), dict(concurrency=64), dict(request_rate=4.0)])
@pytest.mark.parametrize("model", [LLAMA_8B, "Qwen/Qwen3-30B-A3B"])
def test_a_full_hit_never_makes_ttft_longer(model, load):
    common = dict(input_len=3000, output_len=150, **load)
    plain = gpucap.estimate(model, "H100-SXM-80GB", **common)
    cached = gpucap.estimate(model, "H100-SXM-80GB", prefix_tokens=3000, **common)
    assert cached.ttft_s <= plain.ttft_s


def test_the_simulation_agrees_and_gains_too():
    hw, coef = hardware(LLAMA_8B, "H100-SXM-80GB"), Coefficients.for_engine("vllm")
    cap = batch_slots(hw, context_tokens=2200)
    run = dict(request_rate=3.0, num_requests=400, input_len=2000, output_len=200, max_running=cap)
    kv = kv_capacity_tokens(hw, 2200)
    plain = simulate(hw, coef, kv_capacity_tokens=kv, **run)
    hit = simulate(hw, coef, kv_capacity_tokens=kv, cached_tokens=1000, shared_tokens=1000, **run)
    assert np.nanmean(hit.ttft_s) < np.nanmean(plain.ttft_s)
    analytic = gpucap.estimate(
        LLAMA_8B, "H100-SXM-80GB", input_len=2000, output_len=200, request_rate=3.0, prefix_tokens=1000
    )
    assert analytic.ttft_s == pytest.approx(np.nanmean(hit.ttft_s), rel=0.25)


def test_bad_lengths_are_named_before_the_prefix():
    # a negative prompt is the error, not a prefix that does not fit in it
    with pytest.raises(ValueError, match="input_len must be a positive number"):
        Workload(-5, 200)
