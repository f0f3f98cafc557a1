"""The closed-form closed-loop solution: a toy with hand-derived answers, and the fixed-point
equations checked against step times computed directly from the work."""

import numpy as np
import pytest

from gpucap.batching import closed_loop
from gpucap.engine import Coefficients
from gpucap.estimate import hardware
from gpucap.steady import closed_loop_root, rate_cap_root, step_seconds
from gpucap.step import ATTN_COMPUTE, GEMM_COMPUTE, GEMM_MEMORY, OVERHEAD, prefill_pairs_per_layer, step_time, step_work

COEF = Coefficients()


def lines(**rows: tuple[float, float]) -> tuple[np.ndarray, np.ndarray]:
    """Six step terms as (intercept, slope) lines, zero unless given."""
    k0, k1 = np.zeros((6, 1)), np.zeros((6, 1))
    names = {"gemm_c": GEMM_COMPUTE, "gemm_m": GEMM_MEMORY, "attn_c": ATTN_COMPUTE, "host": OVERHEAD}
    for name, (c0, c1) in rows.items():
        k0[names[name]], k1[names[name]] = c0, c1
    return k0, k1


def test_constant_step_gives_littles_law() -> None:
    # Memory-bound steps of 20 ms whatever the batch; the prefill step 50 ms. With R = 64
    # running, O - 1 = 99 decode steps and no front end: R = X (TTFT + 99 TPOT)
    # -> X = 64 / (0.05 + 99 x 0.02) = 64 / 2.03 = 31.527 req/s, a = X x TPOT = 0.63054.
    dec, pre = lines(gemm_m=(0.02, 0.0)), lines(gemm_m=(0.05, 0.0))
    a = closed_loop_root(
        dec, pre, pp=1, running=np.array([64.0]), chunks=np.array([1.0]), decoding=np.array([99.0]), t_request_s=0.0
    )
    assert a[0] == pytest.approx(64 / 2.03 * 0.02, rel=1e-12)


def test_root_on_the_compute_piece() -> None:
    # t(a) = max(1 ms x a, 10 ms) (kink at a = 10), prefill step the same plus 5 ms of host time.
    # R = 1000, O - 1 = 9, no front end. On the compute piece (a > 10), t = 0.001 a and
    # t_p = 0.001 a + 0.005: F = a (0.001 a + 0.005) + 9 a (0.001 a) - 1000 (0.001 a)
    #   = 0.01 a^2 - 0.995 a = 0  ->  a = 99.5 (> 10: on that piece).
    dec = lines(gemm_c=(0.0, 0.001), gemm_m=(0.01, 0.0))
    pre = lines(gemm_c=(0.0, 0.001), gemm_m=(0.01, 0.0), host=(0.005, 0.0))
    a = closed_loop_root(
        dec, pre, pp=1, running=np.array([1000.0]), chunks=np.array([1.0]), decoding=np.array([9.0]), t_request_s=0.0
    )
    assert a[0] == pytest.approx(99.5, rel=1e-12)
    assert step_seconds(dec, a, 1)[0] == pytest.approx(0.0995)


def test_front_end_cap() -> None:
    # The front end passes 1 / 10 ms = 100 req/s. t(a) = 2 ms + 1 ms x a (host + attention):
    # a / t(a) = 100 -> a = 100 (0.002 + 0.001 a) -> a = 0.2 / 0.9 = 0.2222.
    dec = lines(host=(0.002, 0.0), attn_c=(0.0, 0.001))
    assert rate_cap_root(dec, pp=1, rate_per_s=100.0)[0] == pytest.approx(0.2 / 0.9, rel=1e-12)
    assert np.isinf(rate_cap_root(dec, pp=1, rate_per_s=np.inf)[0])


@pytest.mark.parametrize(
    ("model", "tp"),
    [("meta-llama/Llama-3.1-8B", 1), ("meta-llama/Llama-3.3-70B-Instruct", 4), ("Qwen/Qwen3-30B-A3B", 1)],
)
def test_solution_satisfies_the_fixed_point(model: str, tp: int) -> None:
    """Recompute TPOT and TTFT from the work of the steps the solution describes, and check the
    closed-loop condition R = X (TTFT + (O - 1) TPOT) where neither the prompt budget nor the
    front end binds."""
    hw = hardware(model, "H100-SXM-80GB", tp=tp)
    coef = Coefficients(t_request_s=0.0)
    c = np.array([1.0, 4.0, 32.0, 128.0, 512.0])
    i, o = 2000.0, 300.0
    p = closed_loop(hw, coef, concurrency=c, input_len=i, output_len=o)
    b = p.decode_batch
    prompt = p.requests_per_s * i * p.tpot_s
    pairs = prefill_pairs_per_layer(hw.spec, i)
    ctx = i + o / 2
    dec = step_time(
        hw,
        step_work(hw, decode_tokens=b, decode_context=ctx, prefill_tokens=prompt, prefill_pairs=pairs * prompt / i),
        coef,
    )
    pre = step_time(hw, step_work(hw, decode_tokens=b, decode_context=ctx, prefill_tokens=i, prefill_pairs=pairs), coef)
    budget = hw.engine.max_num_batched_tokens - b
    free = prompt < 0.999 * budget
    assert free.sum() >= 3
    np.testing.assert_allclose(p.tpot_s, dec.total_s, rtol=1e-9)
    np.testing.assert_allclose(b, p.requests_per_s * (o - 1) * p.tpot_s, rtol=1e-9)
    np.testing.assert_allclose(p.ttft_s[free], pre.total_s[free], rtol=1e-9)
    np.testing.assert_allclose((p.requests_per_s * (p.ttft_s + (o - 1) * p.tpot_s))[free], c[free], rtol=1e-9)
