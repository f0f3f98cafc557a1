"""``gpucap.queueing.kvfit``: the tokens running requests hold and how many of them fit. Expected
values are worked out by hand below."""

import numpy as np
import pytest
from scipy.stats import norm

from gpucap.config import hardware
from gpucap.physics.batching import closed_loop
from gpucap.physics.coefficients import Coefficients
from gpucap.physics.requests import Requests
from gpucap.queueing.kvfit import held_moments, slot_shares
from gpucap.queueing.lengths import Lengths


def test_held_tokens_are_length_biased() -> None:
    """Prompts of 1,000; outputs of 100 or 300, even odds. A running request is the 300-token one
    three times in four (it lives three times as long), at a uniform point of its life: h is
    uniform on [1000, 1100] w.p. 1/4 and on [1000, 1300] w.p. 3/4, so E[h] = 0.25 x 1050 + 0.75 x
    1150 = 1125 (not I + E[O] / 2 = 1100), and E[h^2] = 0.25 (1050^2 + 100^2 / 12) + 0.75 (1150^2 +
    300^2 / 12) = 1,273,333.3, sd = sqrt(1,273,333.3 - 1125^2) = 87.80."""
    mean, sd = held_moments(Lengths.fixed(1000), Lengths((100.0, 300.0), (0.5, 0.5)))
    assert mean == pytest.approx(1125.0)
    assert sd == pytest.approx(np.sqrt(0.25 * (1050**2 + 100**2 / 12) + 0.75 * (1150**2 + 300**2 / 12) - 1125**2))
    assert held_moments(Lengths.fixed(1000), Lengths.fixed(200)) == pytest.approx((1100.0, 200 / np.sqrt(12)))


def test_requests_that_fit() -> None:
    """5,000 tokens of context, h of mean 1,000 and sd 300, at most 6 slots: P(N >= n) =
    Phi((5000 - 1000 n) / (300 sqrt(n))): 0.5 at n = 5, Phi(-1000 / (300 sqrt 6)) = 0.0868 at 6."""
    p = slot_shares(5000.0, 6, 1000.0, 300.0)
    at_least = np.cumsum(p[::-1])[::-1]
    assert p.sum() == pytest.approx(1.0)
    assert at_least[4] == pytest.approx(0.5)
    assert p[5] == pytest.approx(norm.cdf(-1000 / (300 * np.sqrt(6))))
    assert at_least[0] == 1.0  # one request always runs
    hard = slot_shares(5000.0, 6, 1000.0, 0.0)  # no spread: exactly 5 fit
    assert hard.tolist() == [0, 0, 0, 0, 1, 0]
    with pytest.raises(ValueError, match="kv_context_tokens"):
        slot_shares(-1.0, 6, 1000.0, 300.0)


def test_decode_context_reaches_the_step() -> None:
    """The default context is I + O / 2; a longer one (the length-biased mean) makes the decode
    step read more KV and lowers throughput; an impossible one is refused."""
    hw = hardware("meta-llama/Llama-3.1-8B", "H100-SXM-80GB")
    coef = Coefficients.for_engine("vllm")
    served = Requests(500.0, 300.0, max_running=256.0)
    base = closed_loop(hw, coef, served, concurrency=256.0)
    same = closed_loop(hw, coef, served, concurrency=256.0, context_tokens=650.0)
    longer = closed_loop(hw, coef, served, concurrency=256.0, context_tokens=1300.0)
    assert float(same.requests_per_s) == pytest.approx(float(base.requests_per_s), rel=1e-12)
    assert float(longer.requests_per_s) < float(base.requests_per_s)
    with pytest.raises(ValueError, match="context_tokens"):
        closed_loop(hw, coef, served, concurrency=256.0, context_tokens=0.0)


def test_a_long_prompt_waits_for_the_room_it_needs() -> None:
    """Where the KV cache binds, a prompt that arrives to a full replica waits until enough
    requests finish to hold its first chunk: max(1, min(I, M) / (I_mean + O_mean)) completions
    (M = 8,192 batched tokens). RAG-like lengths on the 70B at tp 2 (mean request 2,435 + 368 =
    2,803 tokens): the top bin of prompts (the longest 1%, up to 8,000 tokens, so over 2 x 2,803)
    waits for more than two completions, the shortest bin for one; without the KV cache counted,
    every prompt waits for one."""
    from gpucap.queueing.servicecurve import service_curve

    hw = hardware("meta-llama/Llama-3.3-70B-Instruct", "H100-SXM-80GB", tp=2, weight_dtype="fp8")
    coef = Coefficients.for_engine("vllm")
    inp = Lengths.percentiles({5: 600, 50: 2000, 90: 4000, 99: 8000}, "RAG prompts")
    out = Lengths.percentiles({5: 50, 50: 300, 90: 700, 99: 1000}, "RAG outputs")
    kw = dict(input_lengths=inp, output_lengths=out)
    served = Requests(inp.mean, out.mean, max_running=85.0)
    curve = service_curve(hw, coef, served, kv_slots=85.0, **kw)
    length = inp.mean + out.mean
    assert curve.own_wait_scale == pytest.approx(np.maximum(1.0, np.minimum(curve.own_tokens, 8192) / length))
    assert length == pytest.approx(2435 + out.mean) and 2.0 < curve.own_wait_scale[-1] <= 8000 / length
    assert curve.own_wait_scale[0] == 1.0
    assert np.all(service_curve(hw, coef, served, **kw).own_wait_scale == 1.0)
