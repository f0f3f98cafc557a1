"""Continuous-batching steady state: Little's law, queueing, finite runs (DESIGN.md section 5)."""

from typing import Any

import numpy as np
import pytest

from gpucap.config import hardware
from gpucap.physics.batching import NO_EXTRAS, closed_loop, open_loop
from gpucap.physics.coefficients import Coefficients
from gpucap.physics.requests import Requests
from gpucap.physics.runs import drain_time, saturation_run, static_batch
from gpucap.physics.step import prefill_pairs_per_layer, step_work
from gpucap.physics.steptime import step_time

COEF = Coefficients()
HW = hardware("meta-llama/Llama-3.1-8B", "H100-SXM-80GB")


def test_littles_law_holds() -> None:
    c = np.array([1.0, 8.0, 64.0, 256.0])
    p = closed_loop(HW, COEF, Requests(1000, 200), concurrency=c)
    assert p.requests_per_s * (p.ttft_s + 199 * p.tpot_s) == pytest.approx(c, rel=1e-3)
    assert p.output_tokens_per_s == pytest.approx(p.requests_per_s * 200)


def test_single_request_ttft_is_one_prefill_step() -> None:
    p = closed_loop(HW, COEF, Requests(1000, 200), concurrency=1.0)
    pairs = prefill_pairs_per_layer(HW.spec, 1000)
    # the prefill step carries 1000 prompt tokens beside the (less than one) decoding sequence
    lo = step_time(
        HW, step_work(HW, decode_tokens=0.0, decode_context=1100, prefill_tokens=1000, prefill_pairs=pairs), COEF
    )
    hi = step_time(
        HW, step_work(HW, decode_tokens=1.0, decode_context=1100, prefill_tokens=1000, prefill_pairs=pairs), COEF
    )
    assert float(lo.total_s) <= float(p.ttft_s) <= float(hi.total_s)


def test_requests_beyond_max_running_wait() -> None:
    free = closed_loop(HW, COEF, Requests(500, 100), concurrency=512.0)
    capped = closed_loop(HW, COEF, Requests(500, 100, max_running=256.0), concurrency=512.0)
    run = closed_loop(HW, COEF, Requests(500, 100), concurrency=256.0)
    assert float(capped.running) == 256
    # the other 256 wait (C - R) / X on top of the running requests' TTFT
    assert float(capped.ttft_s) == pytest.approx(float(run.ttft_s) + 256 / float(run.requests_per_s), rel=1e-6)
    assert float(capped.ttft_s) > float(free.ttft_s)


def test_static_batch_by_hand() -> None:
    # 64 prompts x 1000 tokens in chunks of 8192 -> ceil(64000 / 8192) = 8 prefill steps
    p = static_batch(HW, COEF, Requests(1000, 100), batch=64.0)
    pre = step_time(
        HW, step_work(HW, decode_tokens=0.0, decode_context=1000, prefill_tokens=8000, prefill_pairs=64 * 5e5 / 8), COEF
    )
    dec = step_time(HW, step_work(HW, decode_tokens=64.0, decode_context=1050), COEF)
    assert float(p.ttft_s) == pytest.approx(8 * float(pre.total_s), rel=1e-9)
    assert float(p.output_tokens_per_s) == pytest.approx(
        64 * 100 / (8 * float(pre.total_s) + 99 * float(dec.total_s)), rel=1e-9
    )


def test_one_wave_saturation_run_is_a_static_batch() -> None:
    wave = saturation_run(HW, COEF, Requests(1000, 100, max_running=256.0), num_prompts=64.0)
    batch = static_batch(HW, COEF, Requests(1000, 100), batch=64.0)
    # burst prefill, then O - 1 decode steps at the full batch (first token comes with the prefill)
    pre = static_batch(HW, COEF, Requests(1000, 1.0), batch=64.0)
    assert float(wave.output_tokens_per_s) == pytest.approx(
        64 * 100 / (float(pre.ttft_s) + 99 * float(batch.tpot_s)), rel=1e-9
    )


def test_dataset_lengths_drain_slower_than_fixed() -> None:
    # exponential output lengths leave a long tail of a few requests running alone
    kw = dict(batch=np.array([512.0]), input_len=np.array([200.0]), output_len=np.array([200.0]))
    fixed = drain_time(HW, COEF, lengths="fixed", staggered=False, **kw)
    dataset = drain_time(HW, COEF, lengths="dataset", staggered=False, **kw)
    assert float(dataset[0]) > float(fixed[0])


def test_open_loop_low_rate_and_overload() -> None:
    full = closed_loop(HW, COEF, Requests(1000, 200), concurrency=256.0)
    p = open_loop(
        HW, COEF, Requests(1000, 200, max_running=256.0), request_rate=np.array([0.05, 2 * float(full.requests_per_s)])
    )
    alone = closed_loop(HW, COEF, Requests(1000, 200), concurrency=1.0)
    assert p.ttft_s[0] == pytest.approx(float(alone.ttft_s), rel=0.05)  # nearly empty system
    assert p.output_tokens_per_s[0] == pytest.approx(0.05 * 200)
    assert np.isinf(p.ttft_s[1])  # arrivals above the service rate: the queue grows without bound
    assert p.requests_per_s[1] == pytest.approx(float(full.requests_per_s))


def test_frontend_caps_the_request_rate() -> None:
    coef = Coefficients(t_request_s=0.01)  # at most 100 requests/s through the API server
    p = closed_loop(HW, coef, Requests(100, 4), concurrency=512.0)
    assert float(p.requests_per_s) == pytest.approx(100.0)
    assert p.requests_per_s * (p.ttft_s + 3 * p.tpot_s) == pytest.approx(512.0, rel=1e-6)


def test_all_at_once_ttft_is_at_least_one_prefill_step() -> None:
    # one request sent alone: its first token comes after its whole prefill step, not half of it
    from gpucap.physics.runs import saturation_run

    p = saturation_run(HW, COEF, Requests(1000.0, 200.0, max_running=256.0), num_prompts=1.0)
    alone = step_time(
        HW,
        step_work(
            HW, decode_tokens=0.0, decode_context=1000.0, prefill_tokens=1000.0,
            prefill_pairs=prefill_pairs_per_layer(HW.spec, 1000.0),
        ),
        COEF,
    ).total_s  # fmt: skip
    assert float(p.ttft_s) == pytest.approx(float(alone), rel=1e-9)


def test_a_moe_step_is_affine_but_for_the_experts_it_reads() -> None:
    """The closed loop of a mixture-of-experts model takes a step's terms as the affine rest
    plus the routed experts' read, ``rest + row x experts_touched(T)``: at zero work the row is
    the experts' bytes at the streaming rate. Qwen3-30B-A3B in fp8: 48 layers x 128 experts x 3
    matrices of 2,048 x 768 = 29.0 GB (one byte each, before the fp8 scales), read at 3.35 TB/s
    (H100 datasheet) x u_hbm 0.8: 10.8 ms."""
    from gpucap.physics.solvers import closed_load, terms
    from gpucap.physics.step import experts_touched
    from gpucap.physics.steptime import GEMM_MEMORY

    hw = hardware("Qwen/Qwen3-30B-A3B", "H100-SXM-80GB", weight_dtype="fp8")
    served = Requests([300.0, 2000.0, 7000.0], [50.0, 400.0, 900.0], max_running=1024.0)
    load = closed_load(hw, COEF, served, concurrency=[4.0, 64.0, 300.0])
    (base, per_decode, per_prompt, per_images), row = load.expert_terms
    assert row[GEMM_MEMORY, 0] == pytest.approx(48 * 128 * 3 * 2048 * 768 / (3.35e12 * 0.8), rel=0.02)
    a = np.array([0.01, 0.3, 2.0])
    b, p, q = a * load.decoding, a * load.prompt, a * load.pairs
    whole = terms(hw, COEF, b, load.context, p, q, NO_EXTRAS)
    parts = base + b * per_decode + a * per_prompt + a * per_images + row * experts_touched(hw.spec, b + p)
    assert np.allclose(parts, whole, rtol=1e-12, atol=0.0)


def test_requests_broadcast_with_the_load() -> None:
    """``Requests.arrays``: the load first, then input, output, slots and cached tokens, as floats
    of one shape; a per-request array and a per-load array meet as numpy broadcasts them."""
    c, i, o, cap, h = Requests([1000, 2000], 200, max_running=64, cached_tokens=[[0], [100]]).arrays(8)
    assert c.shape == i.shape == o.shape == cap.shape == h.shape == (2, 2)
    assert i.tolist() == [[1000.0, 2000.0], [1000.0, 2000.0]]
    assert h.tolist() == [[0.0, 0.0], [100.0, 100.0]]
    assert c.dtype == np.float64 and float(cap[0, 0]) == 64.0


@pytest.mark.parametrize("model", ["meta-llama/Llama-3.1-8B", "Qwen/Qwen3-30B-A3B"])
def test_blocks_give_what_one_pass_gives(model: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A load larger than ``CLOSED_LOOP_BLOCK`` is solved block by block: every field, in the
    inputs' shape and order, is what one pass over all of it gives."""
    import gpucap.physics.batching as batching

    hw = hardware(model, "H100-SXM-80GB")
    c = np.geomspace(1.0, 600.0, 12).reshape(3, 4)
    requests = Requests(
        np.array([[500.0], [3000.0], [9000.0]]), 300.0, max_running=256, cached_tokens=[[0.0], [100.0], [0.0]]
    )
    ctx = np.linspace(700.0, 9500.0, 12).reshape(3, 4)
    whole = closed_loop(hw, COEF, requests, concurrency=c, context_tokens=ctx)
    monkeypatch.setattr(batching, "CLOSED_LOOP_BLOCK", 5)
    blocks = closed_loop(hw, COEF, requests, concurrency=c, context_tokens=ctx)
    for field in ("concurrency", "running", "decode_batch", "ttft_s", "tpot_s", "requests_per_s", "step_wait_s"):
        assert getattr(blocks, field).shape == (3, 4)
        np.testing.assert_allclose(getattr(blocks, field), getattr(whole, field), rtol=1e-12, err_msg=field)
    for step in ("decode_step", "prefill_step"):
        np.testing.assert_allclose(getattr(blocks, step).total_s, getattr(whole, step).total_s, rtol=1e-12)
        np.testing.assert_allclose(getattr(blocks, step).memory_s, getattr(whole, step).memory_s, rtol=1e-12)


def test_settled_moe_elements_take_no_further_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """The MoE Newton passes go on only for the elements the pass before moved by more than
    ``MOE_SETTLED`` of themselves: later passes run on fewer elements than the first, and the
    answers are those of every element taking every pass (``MOE_SETTLED`` 0) to well within the
    root's own tolerance (1e-9)."""
    import gpucap.physics.solvers as solvers

    hw = hardware("Qwen/Qwen3-30B-A3B", "H100-SXM-80GB", weight_dtype="fp8")
    rng = np.random.default_rng(3)
    c, i, o = rng.uniform(1, 512, 400), rng.uniform(100, 8000, 400), rng.uniform(2, 2000, 400)
    requests = Requests(i, o, max_running=1024.0)
    subsets: list[int] = []
    expert_steps = solvers._expert_steps

    def counting(load: Any, sel: Any = slice(None)) -> Any:
        if not isinstance(sel, slice):
            subsets.append(len(sel))
        return expert_steps(load, sel)

    monkeypatch.setattr(solvers, "_expert_steps", counting)
    settled = closed_loop(hw, COEF, requests, concurrency=c)
    assert subsets and max(subsets) < 400
    monkeypatch.setattr(solvers, "MOE_SETTLED", 0.0)
    every = closed_loop(hw, COEF, requests, concurrency=c)
    for field in ("ttft_s", "tpot_s", "requests_per_s", "decode_batch"):
        np.testing.assert_allclose(getattr(settled, field), getattr(every, field), rtol=1e-11, err_msg=field)


def test_a_function_refuses_what_it_does_not_model() -> None:
    """The finite runs and the wave model leave prefix caching out (the waves also images and
    speculation): given them, they say so instead of answering without them."""
    from gpucap.config.speculative import Speculative
    from gpucap.physics.extras import Extras
    from gpucap.physics.waves import wave_loop

    cached = Requests(1000, 200, max_running=64, cached_tokens=500)
    for run in (
        lambda: static_batch(HW, COEF, cached, batch=8.0),
        lambda: saturation_run(HW, COEF, cached, num_prompts=100.0),
        lambda: wave_loop(HW, COEF, cached, concurrency=8.0),
    ):
        with pytest.raises(ValueError, match="cached_tokens=500"):
            run()
    drafting = Requests(1000, 200, extras=Extras(speculative=Speculative(draft_tokens=3, acceptance_length=2.5)))
    with pytest.raises(ValueError, match="speculative"):
        wave_loop(HW, COEF, drafting, concurrency=8.0)
    assert float(static_batch(HW, COEF, drafting, batch=8.0).tpot_s) > 0  # speculation is modelled there


def test_open_loop_needs_finite_slots() -> None:
    """The service rate is the throughput with every slot full: no slot count, no rate."""
    with pytest.raises(ValueError, match="max_running"):
        open_loop(HW, COEF, Requests(1000, 200), request_rate=1.0)
