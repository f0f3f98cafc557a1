"""The closed-form closed-loop solution: a toy with hand-derived answers, and the fixed-point
equations checked against step times computed directly from the work."""

import numpy as np
import pytest

from gpucap.config import Images, Speculative, hardware
from gpucap.physics.batching import closed_loop
from gpucap.physics.coefficients import Coefficients
from gpucap.physics.extras import Extras
from gpucap.physics.requests import Requests
from gpucap.physics.steady import closed_loop_root, rate_cap_root, step_seconds
from gpucap.physics.step import prefill_pairs_per_layer, step_work
from gpucap.physics.steptime import ATTN_COMPUTE, GEMM_COMPUTE, GEMM_MEMORY, OVERHEAD, step_time
from gpucap.physics.vision import image_work

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
    # a guess on the memory piece (a = 5: there t = 10 ms, t_p = 15 ms, F = 0.105 a - 10 has its
    # root at 95.2, off that piece, so the kinks are searched) and one on the compute piece give
    # the same root
    for guess in (5.0, 150.0):
        again = closed_loop_root(
            dec,
            pre,
            pp=1,
            running=np.array([1000.0]),
            chunks=np.array([1.0]),
            decoding=np.array([9.0]),
            t_request_s=0.0,
            start=np.array([guess]),
        )
        assert again[0] == pytest.approx(99.5, rel=1e-12)


@pytest.mark.parametrize("overlap", [False, True])
def test_a_guess_changes_the_time_not_the_root(overlap: bool) -> None:
    """On random lines, a random guess of the piece gives the root found without one."""
    rng = np.random.default_rng(7 + overlap)
    n = 2000
    dec = (rng.uniform(0.0, 1.0, (6, n)), rng.uniform(0.0, 1.0, (6, n)))
    pre = (dec[0] + rng.uniform(0.0, 1.0, (6, n)), dec[1])
    loop = dict(
        pp=1,
        running=rng.uniform(1.0, 500.0, n),
        chunks=rng.integers(1, 4, n).astype(float),
        decoding=rng.uniform(1.0, 300.0, n),
        t_request_s=0.01,
        overlap=overlap,
    )
    plain = closed_loop_root(dec, pre, **loop)
    guessed = closed_loop_root(dec, pre, **loop, start=plain * rng.uniform(0.0, 3.0, n))
    np.testing.assert_allclose(guessed, plain, rtol=1e-12)
    cap = rate_cap_root(dec, pp=1, rate_per_s=3.0, overlap=overlap)
    np.testing.assert_allclose(
        rate_cap_root(dec, pp=1, rate_per_s=3.0, overlap=overlap, start=cap * rng.uniform(0.0, 3.0, n)), cap, rtol=1e-12
    )


def test_front_end_cap() -> None:
    # The front end passes 1 / 10 ms = 100 req/s. t(a) = 2 ms + 1 ms x a (host + attention):
    # a / t(a) = 100 -> a = 100 (0.002 + 0.001 a) -> a = 0.2 / 0.9 = 0.2222.
    dec = lines(host=(0.002, 0.0), attn_c=(0.0, 0.001))
    assert rate_cap_root(dec, pp=1, rate_per_s=100.0)[0] == pytest.approx(0.2 / 0.9, rel=1e-12)
    assert rate_cap_root(dec, pp=1, rate_per_s=100.0, start=np.array([3.0]))[0] == pytest.approx(0.2 / 0.9, rel=1e-12)
    # within: at a = 0.1, a / t(a) = 0.1 / 2.1 ms = 47.6/s is within the rate, so the cap (0.2222)
    # lies above and inf stands for it; at a = 0.5, 0.5 / 2.5 ms = 200/s is not, so it is found
    capped = rate_cap_root(dec, pp=1, rate_per_s=100.0, within=np.array([0.1, 0.5]))
    assert np.isinf(capped[0]) and capped[1] == pytest.approx(0.2 / 0.9, rel=1e-12)
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
    p = closed_loop(hw, coef, Requests(i, o), concurrency=c, prompt_steps="spread")
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


@pytest.mark.parametrize(
    ("model", "images", "speculative"),
    [
        ("Qwen/Qwen2.5-VL-7B-Instruct", Images(per_request=2, size_px=672), None),
        ("meta-llama/Llama-3.1-8B", None, Speculative(draft_tokens=3, acceptance_length=2.5)),
        ("Qwen/Qwen2.5-VL-7B-Instruct", Images(size_px=1344), Speculative(draft_tokens=2, acceptance_length=2.0)),
        ("Qwen/Qwen3-30B-A3B", None, Speculative(draft_tokens=1, acceptance_length=1.8)),  # MTP head, Newton path
    ],
)
def test_fixed_point_with_images_and_speculation(
    model: str, images: Images | None, speculative: Speculative | None
) -> None:
    """The same closed loop with the optional terms: the prompt is I = text + images x tokens per
    image, the average step encodes X n t_step images, a request decodes in D = (O - 1) / tau
    steps of B = X D t_step sequences, TPOT = t_step / tau and R = X (TTFT + (O - 1) TPOT)."""
    hw = hardware(model, "H100-SXM-80GB")
    coef = Coefficients(t_request_s=0.0)
    c = np.array([1.0, 4.0, 32.0, 128.0])
    text_i, o = 500.0, 301.0
    p = closed_loop(
        hw, coef, Requests(text_i, o, extras=Extras(images, speculative)), concurrency=c, prompt_steps="spread"
    )
    n = images.per_request if images else 0.0
    i = text_i + (n * image_work(hw.spec.vision, images).tokens if images else 0.0)
    tau = speculative.acceptance_length if speculative else 1.0
    t_step = p.decode_step.total_s
    x = p.requests_per_s
    prompt = x * i * t_step
    pairs = prefill_pairs_per_layer(hw.spec, i)
    kw = dict(decode_context=i + o / 2, extras=Extras(images, speculative))
    work = step_work(
        hw,
        decode_tokens=p.decode_batch,
        prefill_tokens=prompt,
        prefill_pairs=pairs * prompt / i,
        images=x * n * t_step,
        **kw,
    )
    pre = step_work(hw, decode_tokens=p.decode_batch, prefill_tokens=i, prefill_pairs=pairs, images=n, **kw)
    free = prompt < 0.999 * (
        hw.engine.max_num_batched_tokens - (speculative.verify_tokens if speculative else 1) * p.decode_batch
    )
    assert free.sum() >= 3
    rtol = 1e-6 if hw.spec.is_moe else 1e-9
    np.testing.assert_allclose(t_step, step_time(hw, work, coef).total_s, rtol=rtol)
    np.testing.assert_allclose(p.tpot_s, t_step / tau, rtol=1e-12)
    np.testing.assert_allclose(p.decode_batch, x * (o - 1) / tau * t_step, rtol=1e-9)
    np.testing.assert_allclose(p.ttft_s[free], step_time(hw, pre, coef).total_s[free], rtol=rtol)
    np.testing.assert_allclose((x * (p.ttft_s + (o - 1) * p.tpot_s))[free], c[free], rtol=rtol)


def test_pipeline_stages_do_not_shorten_a_lone_prompt() -> None:
    """One request's prompt passes the pp stages in one micro-batch: the same matmuls as on one
    GPU, one stage after the other, plus the sends between stages. So its TTFT is at least the
    one-GPU TTFT (vLLM does not split one sequence's prefill over micro-batches)."""
    coef = Coefficients(t_request_s=0.0)
    one = hardware("meta-llama/Llama-3.3-70B-Instruct", "H200-SXM-141GB", weight_dtype="fp8")
    four = hardware("meta-llama/Llama-3.3-70B-Instruct", "H200-SXM-141GB", pp=4, weight_dtype="fp8")
    alone = [float(closed_loop(hw, coef, Requests(4000, 200), concurrency=1.0).ttft_s) for hw in (one, four)]
    assert alone[1] >= alone[0]
    assert alone[1] <= 1.05 * alone[0]  # the sends add little


def test_prompt_steps_apart_by_hand() -> None:
    # decode-only steps 10 ms, a step with a prompt chunk 50 ms; a = 0.2 requests per step, one
    # chunk each: 20% of steps carry a prompt, so a decoding sequence waits 0.8 x 10 + 0.2 x 50 = 18 ms
    from gpucap.physics.steady import separated_step

    only, pre, avg = lines(gemm_m=(0.010, 0.0)), lines(gemm_m=(0.050, 0.0)), lines(gemm_m=(0.018, 0.0))
    t, slope, share = separated_step(only, pre, avg, np.array([0.2]), chunks=np.array([1.0]), pp=1)
    assert t[0] == pytest.approx(0.018) and share[0] == pytest.approx(0.2)
    assert slope[0] == pytest.approx(0.040)  # d/da [(1 - a) 0.010 + a 0.050] = 0.040
    # at one chunk per step or more, every step carries prompt tokens: the average step holds
    t, _, share = separated_step(only, pre, avg, np.array([1.5]), chunks=np.array([1.0]), pp=1)
    assert t[0] == pytest.approx(0.018) and share[0] == 1.0


def test_prompt_steps_apart_satisfy_their_fixed_point() -> None:
    hw = hardware("meta-llama/Llama-3.1-8B", "H100-SXM-80GB")
    coef = Coefficients(t_request_s=0.0)
    c, i, o = np.array([1.0, 4.0, 16.0, 64.0]), 2000.0, 200.0
    spread = closed_loop(hw, coef, Requests(i, o), concurrency=c, prompt_steps="spread")
    apart = closed_loop(hw, coef, Requests(i, o), concurrency=c, prompt_steps="apart")
    b, x = apart.decode_batch, apart.requests_per_s
    ctx, pairs = i + o / 2, prefill_pairs_per_layer(hw.spec, i)
    only = step_time(hw, step_work(hw, decode_tokens=b, decode_context=ctx), coef).total_s
    pre = step_time(hw, step_work(hw, decode_tokens=b, decode_context=ctx, prefill_tokens=i, prefill_pairs=pairs), coef)
    u = x * apart.tpot_s  # one chunk per request here (2000 < the 8192-token budget)
    assert np.all(u < 1)
    np.testing.assert_allclose(apart.tpot_s, (1 - u) * only + u * pre.total_s, rtol=1e-9)
    np.testing.assert_allclose(b, x * (o - 1) * apart.tpot_s, rtol=1e-9)
    np.testing.assert_allclose(x * (apart.ttft_s + (o - 1) * apart.tpot_s), c, rtol=1e-9)
    # the step time is convex in the tokens, so concentrating the prompts never shortens TPOT
    assert np.all(apart.tpot_s >= spread.tpot_s * (1 - 1e-9))
    with pytest.raises(ValueError, match="prompt_steps must be one of"):
        closed_loop(hw, coef, Requests(i, o), concurrency=1.0, prompt_steps="mixed")
    two_stages = hardware("meta-llama/Llama-3.1-8B", "H100-SXM-80GB", pp=2)
    with pytest.raises(ValueError, match="not modelled with pipeline parallelism"):
        closed_loop(two_stages, coef, Requests(i, o), concurrency=1.0, prompt_steps="apart")


@pytest.mark.parametrize(("pp", "overlap"), [(1, False), (2, False), (1, True), (2, True)])
def test_the_piece_at_a_agrees_with_the_step_time_and_its_kinks(pp, overlap) -> None:
    """On random lines: the value on the piece holding ``a`` is ``step_seconds`` there, and the
    piece's line, intercept + slope x a, passes through it (a line of the max is the max at a)."""
    from gpucap.physics.steady import _on_piece, active_line

    rng = np.random.default_rng(pp + 2 * overlap)
    lines = (rng.uniform(0.0, 1.0, (6, 500)), rng.uniform(-0.01, 1.0, (6, 500)))
    a = rng.uniform(0.0, 3.0, 500)
    t, intercept, slope = _on_piece(lines, a, pp, overlap)
    np.testing.assert_allclose(t, step_seconds(lines, a, pp, overlap), rtol=1e-14)
    assert np.allclose(intercept + slope * a, t, rtol=1e-12)
    assert all(
        np.array_equal(x, y) for x, y in zip(active_line(lines, a, pp, overlap), (intercept, slope), strict=True)
    )
