"""Expert-parallel load imbalance (gpucap.physics.routing): the published points and the step they slow."""

from __future__ import annotations

import pytest

from gpucap.config import hardware
from gpucap.physics.routing import ep_imbalance
from gpucap.physics.step import step_work


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


def test_skewed_routing_reads_fewer_experts():
    from gpucap.physics.routing import experts_touched

    # E = 4, k = 1, s = 1: popularity 1, 1/2, 1/3, 1/4 over 25/12 = 0.48, 0.24, 0.16, 0.12; two
    # tokens read expert i with probability 1 - (1 - p_i)^2 = 0.7296, 0.4224, 0.2944, 0.2256
    assert float(experts_touched(4, 1, 2.0, skew=1.0)) == pytest.approx((0.7296 + 0.4224 + 0.2944 + 0.2256) / 4)
    assert float(experts_touched(4, 1, 2.0)) == pytest.approx(1 - 0.75**2)  # uniform
    # DeepSeek-V3 (256 experts, top 8) at 50 tokens: the published popularity (s = 0.52) reads
    # ~10% fewer experts than uniform routing
    ratio = float(experts_touched(256, 8, 50.0)) / float(experts_touched(256, 8, 50.0, skew=0.52))
    assert 1.05 < ratio < 1.2


def test_eplb_curve():
    # LMSYS, with EPLB: 1.06 at ep 8, 1.25 at ep 32
    assert ep_imbalance(8, eplb=True) == pytest.approx(1.06)
    assert ep_imbalance(32, eplb=True) == pytest.approx(1.25)
    assert ep_imbalance(8, eplb=True) < ep_imbalance(8)


def test_estimate_takes_the_skew_and_the_balancer():
    import gpucap

    setup = dict(input_len=1000, output_len=200, concurrency=8)
    uniform = gpucap.estimate("Qwen/Qwen3-30B-A3B", "H100-SXM-80GB", **setup)
    skewed = gpucap.estimate("Qwen/Qwen3-30B-A3B", "H100-SXM-80GB", **setup, routing_skew=0.9)
    # 8 sequences decode 8 tokens a step: a skewed router reads fewer experts, so each step is shorter
    assert skewed.tpot_s < uniform.tpot_s
    with pytest.raises(ValueError, match=r"routing_skew=0.5.*dense"):
        gpucap.estimate("Qwen/Qwen3-8B", "H100-SXM-80GB", **setup, routing_skew=0.5)
    with pytest.raises(ValueError, match="routing_skew=-1"):
        gpucap.estimate("Qwen/Qwen3-30B-A3B", "H100-SXM-80GB", **setup, routing_skew=-1)
