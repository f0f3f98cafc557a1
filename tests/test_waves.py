"""A fixed-length closed loop: the first wave, then the convoy (gpucap.physics.waves), on the seed
article's box (Llama-3.3-70B on 8 A100, tp 8; A100's 2,048-token budget; 3,840 / 256 tokens; the
vLLM front end's 10 ms latency and 4 ms a request). Step times are the roofline's
(``step_at``); how the waves compose them is derived here by hand from the module's mechanism."""

import numpy as np
import pytest

from gpucap.config import hardware
from gpucap.physics.batching import step_at
from gpucap.physics.coefficients import Coefficients
from gpucap.physics.requests import Requests
from gpucap.physics.step import prefill_pairs_per_layer
from gpucap.physics.waves import wave_loop

HW = hardware("meta-llama/Llama-3.3-70B-Instruct", "A100-SXM-80GB", tp=8)
COEF = Coefficients.for_engine("vllm")
PROMPT, OUT, M = 3840.0, 256.0, 2048.0
PAIRS_PER_TOKEN = prefill_pairs_per_layer(HW.spec, PROMPT) / PROMPT


def step_s(batch: float, prefill: float) -> float:
    return float(
        step_at(
            HW, COEF, batch=batch, context=PROMPT + OUT / 2, prefill=prefill, pairs=prefill * PAIRS_PER_TOKEN
        ).total_s
    )


def test_later_waves_run_as_a_convoy() -> None:
    """16 in flight, endless: beside 15 decodes a step holds one 3,840-token prompt (two need 7,680
    tokens of the 2,033 left), in s = 3,840 / 2,033 = 1.889 steps of 2,033 prompt tokens. A request
    comes back 10 + 4 = 14 ms after its predecessor's last token, into the 15 others' decode steps
    of t_gap: the first of the cycle starts b = 0.014 / t_gap + 1/2 steps later on average (1.41);
    the requests whose predecessors finished in those steps queue behind it, and each later one
    arrives during the prompt step of the one before it. Request j of the cycle waits for the step
    in progress and min(b, j - 1) - 1 whole prompts ahead: on average over j = 2..16,
    w = (b (b + 1) / 2 + (15 - b) b) / 15 prompts, 1 + (w - 1) s steps, then its own s. A life
    holds the 15 others' s steps each, less those the 15 later ones waited through."""
    assert HW.engine.max_num_batched_tokens == M
    room, s = M - 15.0, PROMPT / (M - 15.0)
    tau, gap, t_dec = step_s(15.0, room), step_s(15.0, 0.0), step_s(16.0, 0.0)
    b = 0.014 / gap + 0.5
    assert 1.0 < b < 15.0
    w = (b * (b + 1) / 2 + (15 - b) * b) / 15
    waited = 1 + (w - 1) * s
    ttft = (b * gap + s * tau + 15 * (waited + s) * tau) / 16
    during = 15 * s - 15 / 16 * waited
    tpot = (during * tau + (OUT - 1 - during) * t_dec) / (OUT - 1)
    p = wave_loop(HW, COEF, Requests(PROMPT, OUT), concurrency=16.0)
    assert float(p.ttft_s) == pytest.approx(ttft, rel=1e-9)
    assert float(p.tpot_s) == pytest.approx(tpot, rel=1e-9)
    assert float(p.requests_per_s) == pytest.approx(16 / (ttft + (OUT - 1) * tpot), rel=1e-9)
    assert float(p.prefill_step.total_s) == pytest.approx(tau, rel=1e-12)
    assert float(p.decode_step.total_s) == pytest.approx(tpot, rel=1e-12)  # the life's average step


def test_a_short_cycle_queues_like_its_first_wave() -> None:
    """2 in flight: b = 0.014 / t_gap + 1/2 >= 1 groups queue behind the first, as many as there
    are, so the second waits for the step in progress of the first (1 step), then its own s; the
    first waits b decode steps: the wave's order, each cycle."""
    room, s = M - 1.0, PROMPT / (M - 1.0)
    tau, gap, t_dec = step_s(1.0, room), step_s(1.0, 0.0), step_s(2.0, 0.0)
    b = 0.014 / gap + 0.5
    ttft = (b * gap + s * tau + (1 + s) * tau) / 2
    during = s - 1 / 2
    tpot = (during * tau + (OUT - 1 - during) * t_dec) / (OUT - 1)
    p = wave_loop(HW, COEF, Requests(PROMPT, OUT), concurrency=2.0)
    assert float(p.ttft_s) == pytest.approx(ttft, rel=1e-9)
    assert float(p.tpot_s) == pytest.approx(tpot, rel=1e-9)


def test_a_run_is_its_first_wave_then_the_convoy() -> None:
    """16 prompts sent at once take K = 16 x 3,840 / 2,048 = 30 budget-full steps (no decodes
    beside them); a prompt's own 1.875, so the mean first token comes after (30 + 1.875) / 2 steps,
    past the front end's 10 ms and 16 x 4 ms. A run of 16 prompts is that wave; one of 64 is it
    for a quarter of its requests and the convoy for the rest, its time the sum of both."""
    k, s = 16 * PROMPT / M, PROMPT / M
    tau_m, t_dec = step_s(0.0, M), step_s(16.0, 0.0)
    ttft = 0.010 + 16 * 0.004 + 0.5 * (k + s) * tau_m
    during = (k - s) / 2
    tpot = (during * tau_m + (OUT - 1 - during) * t_dec) / (OUT - 1)
    one = wave_loop(HW, COEF, Requests(PROMPT, OUT), concurrency=16.0, num_prompts=16.0)
    assert float(one.ttft_s) == pytest.approx(ttft, rel=1e-9)
    assert float(one.tpot_s) == pytest.approx(tpot, rel=1e-9)
    steady = wave_loop(HW, COEF, Requests(PROMPT, OUT), concurrency=16.0)
    run = wave_loop(HW, COEF, Requests(PROMPT, OUT), concurrency=16.0, num_prompts=64.0)
    assert float(run.ttft_s) == pytest.approx(0.25 * ttft + 0.75 * float(steady.ttft_s), rel=1e-12)
    assert float(run.tpot_s) == pytest.approx(0.25 * tpot + 0.75 * float(steady.tpot_s), rel=1e-12)
    time = 16 / float(one.requests_per_s) + 48 / float(steady.requests_per_s)
    assert float(run.requests_per_s) == pytest.approx(64 / time, rel=1e-12)
    assert float(steady.ttft_s) < ttft / 4  # the first wave queues 30 steps; the convoy 2.9


def test_a_wave_that_fits_one_step_stays_a_wave() -> None:
    """Where R prompts fit one step (16 x 100 tokens of the 2,048), they come back together: the
    steady state is every wave like the first."""
    p = wave_loop(HW, COEF, Requests(100.0, OUT), concurrency=np.array([1.0, 4.0, 16.0]))
    first = wave_loop(HW, COEF, Requests(100.0, OUT), concurrency=np.array([1.0, 4.0, 16.0]), num_prompts=1.0)
    for a, b in ((p.ttft_s, first.ttft_s), (p.tpot_s, first.tpot_s), (p.requests_per_s, first.requests_per_s)):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_requests_waiting_for_a_slot_take_it_at_the_next_step() -> None:
    """32 in flight, 16 slots: a slot that frees goes to a request already in the engine's queue,
    whose prompt rides in the next step, 1.889 steps of tau; it waited (32 - 16) / X for the slot.
    A life holds all 15 others' prompt steps."""
    room, s = M - 15.0, PROMPT / (M - 15.0)
    tau, t_dec = step_s(15.0, room), step_s(16.0, 0.0)
    during = 15 * s
    tpot = (during * tau + (OUT - 1 - during) * t_dec) / (OUT - 1)
    x = 16 / (s * tau + (OUT - 1) * tpot)
    p = wave_loop(HW, COEF, Requests(PROMPT, OUT, max_running=16.0), concurrency=32.0)
    assert float(p.tpot_s) == pytest.approx(tpot, rel=1e-9)
    assert float(p.requests_per_s) == pytest.approx(x, rel=1e-9)
    assert float(p.ttft_s) == pytest.approx(s * tau + 16 / x, rel=1e-9)


def test_an_engine_that_runs_prompts_first_keeps_its_waves() -> None:
    """SGLang's steps with prompts decode nothing, so requests whose prompts finished steps apart
    decode in the same steps and finish together: every wave is the first."""
    from gpucap.queueing.scheduler import policy_for

    for engine in ("vllm", "sglang", "trtllm"):  # the closed form's flag is the simulation's policy
        hw = hardware("meta-llama/Llama-3.3-70B-Instruct", "A100-SXM-80GB", tp=8, engine=engine)
        assert hw.engine.prefill_first == (not policy_for(engine).decodes_with_prompts)
    hw = hardware("meta-llama/Llama-3.3-70B-Instruct", "A100-SXM-80GB", tp=8, engine="sglang")
    coef = Coefficients.for_engine("sglang")
    steady = wave_loop(hw, coef, Requests(PROMPT, OUT), concurrency=16.0)
    first = wave_loop(hw, coef, Requests(PROMPT, OUT), concurrency=16.0, num_prompts=16.0)
    assert float(steady.ttft_s) == float(first.ttft_s) and float(steady.tpot_s) == float(first.tpot_s)


def test_a_run_needs_a_prompt() -> None:
    with pytest.raises(ValueError, match="num_prompts must be at least 1"):
        wave_loop(HW, COEF, Requests(PROMPT, OUT), concurrency=4.0, num_prompts=0.0)
