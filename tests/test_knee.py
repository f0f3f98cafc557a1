"""Where the TTFT curve bends and why (gpucap.report.knee), and the estimator's two kinds of load:
varied traffic (steady state) and a fixed-length load test (waves)."""

import numpy as np
import pytest

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


def test_estimate_of_a_fixed_length_load_test_runs_in_waves() -> None:
    """The seed article's box (Llama-70B, 8 x A100, 3,840 / 256 tokens, TTFT 2 s, TPOT 100 ms): as a
    fixed-length load test, each request's 3,840 prompt tokens take almost two steps of A100's
    2,048-token budget, so a wave of C requests takes ~1.9 C steps and TTFT reaches 2 s within a
    handful of requests; varied traffic reaches it much later."""
    kw = dict(input_len=3840, output_len=256, tp=8, ttft_slo_s=2.0, tpot_slo_s=0.1)
    varied = estimate("meta-llama/Llama-3.3-70B-Instruct", "A100-SXM-80GB", 8, **kw)
    fixed = estimate("meta-llama/Llama-3.3-70B-Instruct", "A100-SXM-80GB", 8, lengths="fixed", **kw)
    assert fixed.recommended_concurrency < varied.recommended_concurrency / 3
    assert fixed.bottleneck == "compute"  # prefill steps: the TTFT fails first
    with pytest.raises(ValueError, match="lengths must be one of varied, fixed"):
        estimate("meta-llama/Llama-3.3-70B-Instruct", "A100-SXM-80GB", 8, lengths="uniform", **kw)


def test_host_is_a_resource_and_binds_for_tiny_requests() -> None:
    """One-token requests on a small model: the engine passes thousands a second, the HTTP server
    at most 1 / t_request_s = 250 (4 ms each), so the host binds first."""
    e = estimate("meta-llama/Llama-3.2-3B-Instruct", "H100-SXM-80GB", input_len=8, output_len=2, ttft_slo_s=10.0)
    assert e.limits["host"] is not None and e.limits["host"] < e.limits["memory"]
    assert e.bottleneck == "host"
