"""Where the TTFT curve bends and why (gpucap.report.knee), and the estimator's two kinds of load:
varied traffic (steady state) and a fixed-length load test (waves)."""

import numpy as np

from gpucap import estimate
from gpucap.config import hardware
from gpucap.physics.batching import closed_loop
from gpucap.physics.coefficients import Coefficients
from gpucap.physics.requests import Requests
from gpucap.physics.waves import wave_loop
from gpucap.report.knee import ttft_knee

HW = hardware("meta-llama/Llama-3.1-8B-Instruct", "H100-SXM-80GB")
COEF = Coefficients.for_engine("vllm")
GRID = np.geomspace(1, 4096, 60)


def test_fixed_lengths_bend_at_the_waves() -> None:
    """2,000-token prompts in waves: a wave of two prompts prefills 4,000 tokens in one step that
    takes about twice a lone prompt's (prefill is compute-bound), so TTFT doubles by 2-3 requests."""
    point = wave_loop(HW, COEF, Requests(2000, 200, max_running=1024), concurrency=GRID)
    knee = ttft_knee(HW, COEF, point, input_len=2000, max_running=1024, lengths="fixed")
    assert knee is not None and knee.cause == "waves"
    assert 2 <= knee.concurrency <= 3
    assert "8,192-token budget" in knee.text


def test_varied_lengths_bend_then_hit_the_token_budget() -> None:
    """2,000 / 200 tokens: TTFT doubles (waits behind other prompts' steps) well before the prompts
    fill the 8,192-token budget, X I TPOT = M - B, beyond which they queue: the text names both."""
    point = closed_loop(HW, COEF, Requests(2000, 200, max_running=1024), concurrency=GRID)
    knee = ttft_knee(HW, COEF, point, input_len=2000, max_running=1024)
    assert knee is not None and knee.cause == "prefill steps"
    assert "prompts queue for the token budget" in knee.text
    prompts = point.requests_per_s * 2000 * point.tpot_s
    full = GRID[np.flatnonzero(prompts >= 0.9 * (8192 - point.decode_batch))[0]]
    assert knee.concurrency < full and f"from {full:,.0f} on" in knee.text
    # beyond max_running requests wait for a slot: a curve with few slots bends there
    few = closed_loop(HW, COEF, Requests(200, 200, max_running=8), concurrency=GRID)
    knee_few = ttft_knee(HW, COEF, few, input_len=200, max_running=8)
    assert knee_few is not None and knee_few.cause == "batch slots" and 8 < knee_few.concurrency <= 32


def test_a_flat_curve_has_no_knee() -> None:
    point = closed_loop(HW, COEF, Requests(100, 100), concurrency=np.array([1.0, 2.0]))
    assert ttft_knee(HW, COEF, point, input_len=100) is None


def test_estimate_of_a_fixed_length_load_test_after_its_first_wave() -> None:
    """The seed article's box (Llama-70B, 8 x A100, 3,840 / 256 tokens, TTFT 2 s, TPOT 100 ms) as a
    fixed-length load test. Its first wave queues: 16 prompts of 3,840 / 2,048 = 1.9 steps each take
    30 steps before the last first token. After it the requests come back one by one (a step holds
    one such prompt beside the decodes), each waiting for the prompt step of the one before it:
    TTFT stays near 1 + 1.9 steps of ~0.28 s, ~0.8 s, and each life meets the other requests'
    prompt steps, as in varied traffic, so the TPOT SLO binds, at about the same concurrency."""
    kw = dict(input_len=3840, output_len=256, tp=8, ttft_slo_s=2.0, tpot_slo_s=0.1)
    varied = estimate("meta-llama/Llama-3.3-70B-Instruct", "A100-SXM-80GB", 8, **kw)
    fixed = estimate("meta-llama/Llama-3.3-70B-Instruct", "A100-SXM-80GB", 8, lengths="fixed", **kw)
    assert fixed.binding == varied.binding == "TPOT SLO"
    assert 0.6 < fixed.ttft_s < 1.0
    assert abs(fixed.recommended_concurrency - varied.recommended_concurrency) <= 0.1 * varied.recommended_concurrency
