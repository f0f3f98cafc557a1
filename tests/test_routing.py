"""Expert-parallel load imbalance (gpucap.routing): the published points and the step they slow."""

from __future__ import annotations

import pytest

from gpucap.estimate import hardware
from gpucap.routing import ep_imbalance
from gpucap.step import step_work


def test_published_points_and_interpolation():
    # ep 4: Qwen3.6-35B-A3B on vLLM, max/mean 1.35; ep 8 and 32: LMSYS's DeepSeek-V3 curve
    assert ep_imbalance(1) == 1.0
    assert ep_imbalance(4) == pytest.approx(1.35)
    assert ep_imbalance(8) == pytest.approx(1.49) and ep_imbalance(32) == pytest.approx(1.82)
    # ep 2 is halfway from ep 1 to ep 4 in log2: 1 + 0.35 / 2
    assert ep_imbalance(2) == pytest.approx(1.175)
    # past ep 64, the last slope (0.28 per doubling): ep 128 = 2.10 + 0.28
    assert ep_imbalance(128) == pytest.approx(2.38)


def test_the_busiest_gpu_sets_the_expert_compute():
    hw = hardware("Qwen/Qwen3-30B-A3B", "B200-180GB", tp=1, ep=4, attn_dp=4)
    spec, tokens = hw.spec, 256.0
    work = step_work(hw, decode_tokens=tokens, decode_context=1000.0)
    dense = 2 * spec.dense_params * tokens / 4 + 2 * spec.hidden_size * spec.vocab_size * tokens / 4
    experts = 2 * spec.expert_params * spec.experts_per_token * spec.num_moe_layers * tokens / 4
    assert float(work.linear_flop) == pytest.approx(dense + 1.35 * experts)
