"""Open-loop tail latency (gpucap.queueing.analytic): the chain against textbook queues, and the planner's
search.

The toy replica: Llama-3.2-3B on an H100 with 50 ms of fixed time per step (the largest
``t_overhead_s``), no per-sequence or front-end time, 16-token prompts and 4 output tokens. Its
weights stream in ~2.4 ms, so every step takes ~52.4 ms whatever the batch (within 0.05% from 1 to
8 running requests): a request holds a slot a constant ~4 steps and the closed-loop throughput is
X(m) = m X(1), the constant-rate servers of M/M/1, M/D/1 and M/M/c.
"""

import functools
import math

import numpy as np
import pytest

import gpucap.queueing.arrivals as arrivals
import gpucap.queueing.states as states
from gpucap.config import hardware
from gpucap.physics.batching import closed_loop
from gpucap.physics.coefficients import Coefficients
from gpucap.physics.memory import memory_limit
from gpucap.physics.requests import Requests
from gpucap.queueing.analytic import max_request_rate, open_loop_latency
from gpucap.queueing.lengths import Lengths
from gpucap.queueing.servicecurve import service_curve
from gpucap.queueing.states import state_distribution
from gpucap.types import STATISTICS as STATS

TOY = hardware("meta-llama/Llama-3.2-3B-Instruct", "H100-SXM-80GB")
TOY_COEF = Coefficients(t_overhead_s=0.05, t_request_s=0.0, t_seq_s=0.0)
TOY_LEN = dict(input_len=16.0, output_len=4.0)

HW = hardware("meta-llama/Llama-3.1-8B", "H100-SXM-80GB")
COEF = Coefficients.for_engine("vllm")
LEN = dict(input_len=1000.0, output_len=200.0)
SLOTS = min(memory_limit(HW, 1200.0)[1], 1024.0)  # what the KV cache holds at input + output


def toy_curve(slots: float):
    return service_curve(TOY, TOY_COEF, Requests(**TOY_LEN, max_running=slots))


@functools.cache
def hw_curve(slots: float = SLOTS):
    return service_curve(HW, COEF, Requests(**LEN, max_running=slots))


def toy_point(concurrency: float):
    return closed_loop(
        TOY, TOY_COEF, Requests(**TOY_LEN, max_running=concurrency), concurrency=concurrency, waits=False
    )


def test_toy_is_a_constant_rate_server() -> None:
    one = toy_point(1.0)
    four = toy_point(4.0)
    assert float(four.requests_per_s) == pytest.approx(4 * float(one.requests_per_s), rel=1e-3)


def test_mm1_wait() -> None:
    """M/M/1 (one slot, exponential service): P(wait) = rho, P(W > t) = rho e^{-(mu - lambda) t}
    (Kleinrock, Queueing Systems vol. 1, 1975, section 3.2), so
    mean TTFT = TTFT_1 + rho / (mu - lambda), P99 TTFT = TTFT_1 + ln(100 rho) / (mu - lambda),
    and mean e2e = (TTFT_1 + (O - 1) TPOT_1) + mean wait = 1 / mu + rho / (mu - lambda)
    = 1 / (mu - lambda), the M/M/1 mean sojourn."""
    one = toy_point(1.0)
    ttft_1 = float(one.ttft_s)
    lam = np.array([0.3, 0.8, 0.95]) * float(one.requests_per_s)
    lat = open_loop_latency(toy_curve(1.0), request_rate=lam, service_scv=1.0)
    # mu: the closed loop's throughput at one slot (the model builds it from the decode step
    # itself: no prompt costs anything here; the two agree to ~1e-9); the formulas at the model's mu
    mu = lat.service_rate
    assert mu == pytest.approx(float(one.requests_per_s), rel=1e-8)
    rho = lam / mu
    assert lat.utilization == pytest.approx(rho, rel=1e-12)
    assert lat.wait_probability == pytest.approx(rho, rel=1e-9)
    assert lat.ttft_s["mean"] == pytest.approx(ttft_1 + rho / (mu - lam), rel=1e-9)
    assert lat.ttft_s["p99"] == pytest.approx(ttft_1 + np.log(100 * rho) / (mu - lam), rel=1e-6)
    assert lat.e2e_s["mean"] == pytest.approx(1 / (mu - lam), rel=1e-3)
    # P50: rho e^{-(mu - lambda) t} = 1/2 -> t = ln(2 rho) / (mu - lambda) when rho > 1/2, else no wait
    p50 = ttft_1 + np.maximum(np.log(2 * rho), 0) / (mu - lam)
    assert lat.ttft_s["median"] == pytest.approx(p50, rel=1e-6, abs=1e-9)


def test_md1_pollaczek_khinchine() -> None:
    """M/D/1 (one slot, fixed lengths: service_scv 0): Pollaczek-Khinchine mean wait
    lambda E[S^2] / (2 (1 - rho)) = rho / (2 (mu - lambda)) with S = 1 / mu. With one slot
    Cosmetatos' correction vanishes (c - 1 = 0) and the model gives it exactly."""
    one = toy_point(1.0)
    ttft_1 = float(one.ttft_s)
    lam = np.array([0.3, 0.5, 0.7, 0.9, 0.99]) * float(one.requests_per_s)
    lat = open_loop_latency(toy_curve(1.0), request_rate=lam)
    mu = lat.service_rate  # the closed loop's to ~1e-9 (test_mm1_wait)
    rho = lam / mu
    assert lat.ttft_s["mean"] - ttft_1 == pytest.approx(rho / (2 * (mu - lam)), rel=1e-9)


def test_mdc_cosmetatos() -> None:
    """M/D/4 at rho = 0.75: Cosmetatos' W(M/D/c) = (1 + F) / 2 x W(M/M/c),
    F = (1 - rho)(c - 1)(sqrt(4 + 5c) - 2) / (16 rho c) = 0.25 x 3 x (sqrt(24) - 2) / 48
    = 0.75 x 2.89898 / 48 = 0.045296; so the fixed-length mean wait is 0.522648 of the
    exponential-service one, and P99 above the no-wait TTFTs shifts the same way (the toy's rho
    is 0.75 within 0.05%)."""
    curve, rate = toy_curve(4.0), 3.0 * float(toy_point(1.0).requests_per_s)
    expo = open_loop_latency(curve, request_rate=rate, service_scv=1.0)
    fixed = open_loop_latency(curve, request_rate=rate, service_scv=0.0)
    ttft_c = float(
        toy_point(4.0).ttft_s - toy_point(4.0).step_wait_s
    )  # the queue model adds the step in progress itself
    assert fixed.wait_probability == pytest.approx(expo.wait_probability, rel=1e-12)
    assert float(fixed.ttft_s["p99"]) - ttft_c == pytest.approx(
        0.522648 * (float(expo.ttft_s["p99"]) - ttft_c), rel=1e-3
    )


def erlang_c(c: int, a: float) -> float:
    """Probability of waiting in M/M/c with offered load a = lambda / mu: Erlang's C formula
    (Kleinrock, Queueing Systems vol. 1, 1975, section 3.5)."""
    top = a**c / math.factorial(c) * c / (c - a)
    return top / (sum(a**k / math.factorial(k) for k in range(c)) + top)


def test_mmc_erlang_c() -> None:
    """M/M/4: P(wait) = Erlang C; a waiting request's wait is exponential with rate c mu - lambda,
    so above every non-waiting TTFT, P99 TTFT = TTFT_c + ln(100 C) / (c mu - lambda)."""
    c = 4
    mu = float(toy_point(1.0).requests_per_s)
    ttft_c = float(toy_point(float(c)).ttft_s)
    a = np.array([2.0, 3.0, 3.6])  # rho = 0.5, 0.75, 0.9
    lat = open_loop_latency(toy_curve(float(c)), request_rate=a * mu, service_scv=1.0)
    expect_c = np.array([erlang_c(c, x) for x in a])
    assert lat.wait_probability == pytest.approx(expect_c, rel=2e-3)
    assert lat.ttft_s["p99"] == pytest.approx(ttft_c + np.log(100 * expect_c) / (c * mu - a * mu), rel=2e-3)


def test_erlang_c_helper_by_hand() -> None:
    # c = 4, a = 2: top = 2^4/4! x 4/(4-2) = 4/3; sum_{k<4} 2^k/k! = 1 + 2 + 2 + 4/3 = 19/3
    # -> C = (4/3) / (19/3 + 4/3) = 4/23
    assert erlang_c(4, 2.0) == pytest.approx(4 / 23)
    # c = 4, a = 3.6: top = 167.9616/24 x 4/0.4 = 69.984; sum = 1 + 3.6 + 6.48 + 7.776 = 18.856
    assert erlang_c(4, 3.6) == pytest.approx(69.984 / (18.856 + 69.984))


def test_kingman_heavy_traffic() -> None:
    """GI/G/1 at rho = 0.99: mean wait ~ rho / (1 - rho) x (c_a^2 + c_s^2) / 2 x E[S] (Kingman 1961).
    Burstiness 0.5 -> c_a^2 = 2; exponential service c_s^2 = 1: 99 x 1.5 / mu = 148.5 / mu."""
    one = toy_point(1.0)
    mu, ttft_1 = float(one.requests_per_s), float(one.ttft_s)
    lat = open_loop_latency(toy_curve(1.0), request_rate=0.99 * mu, burstiness=0.5, service_scv=1.0)
    assert float(lat.ttft_s["mean"]) - ttft_1 == pytest.approx(148.5 / mu, rel=0.01)
    fixed = open_loop_latency(toy_curve(1.0), request_rate=0.99 * mu, burstiness=0.5)
    # fixed lengths: (2 + 0) / 2 x 99 = 99 / mu
    assert float(fixed.ttft_s["mean"]) - ttft_1 == pytest.approx(99 / mu, rel=0.01)


def test_burstiness_one_is_poisson() -> None:
    lam = np.array([5.0, 15.0, 20.0])
    base = open_loop_latency(hw_curve(), request_rate=lam)
    near = open_loop_latency(hw_curve(), request_rate=lam, burstiness=1.0 + 1e-7)
    for s in STATS:
        assert near.ttft_s[s] == pytest.approx(base.ttft_s[s], rel=1e-5)
        assert near.tpot_s[s] == pytest.approx(base.tpot_s[s], rel=1e-5)
    bursty = open_loop_latency(hw_curve(), request_rate=lam, burstiness=0.5)
    assert np.all(bursty.ttft_s["p99"] >= base.ttft_s["p99"])
    assert np.all(bursty.tpot_s["p99"] >= base.tpot_s["p99"])


def test_tails_grow_toward_saturation_and_blow_up_past_it() -> None:
    mu = hw_curve().service_rate
    full = closed_loop(
        HW, COEF, Requests(**LEN, max_running=SLOTS), concurrency=SLOTS, waits=False
    )  # as the queue model sees it
    # every slot busy, completions balance arrivals (c(R, mu) = mu); where a step's cost grows
    # linearly with its prompts (1,000-token prompts on the 8B: compute-bound steps), it does not
    # matter how many share a step and mu is the closed loop's throughput at R
    assert mu == pytest.approx(float(full.requests_per_s), rel=1e-4)
    rho = np.array([0.3, 0.6, 0.85, 0.95, 0.99, 0.999])
    lat = open_loop_latency(hw_curve(), request_rate=rho * mu)
    for name in ("ttft_s", "tpot_s", "e2e_s"):
        d = getattr(lat, name)
        assert np.all(np.diff(d["p99"]) > 0), name
        assert np.all(d["median"] <= d["p95"]) and np.all(d["p95"] <= d["p99"]), name
    assert lat.ttft_s["p99"][-1] > 10 * lat.ttft_s["p99"][0]
    assert np.all(lat.stable)
    over = open_loop_latency(hw_curve(), request_rate=np.array([mu, 1.5 * mu]))
    assert not over.stable.any()
    for s in STATS:
        assert np.all(np.isinf(over.ttft_s[s])) and np.all(np.isinf(over.e2e_s[s]))
        assert over.tpot_s[s] == pytest.approx(float(full.tpot_s))  # the full batch's


def test_vectorized_over_rate_shape() -> None:
    lam = np.array([[1.0, 5.0], [10.0, 15.0]])
    lat = open_loop_latency(hw_curve(), request_rate=lam)
    assert lat.ttft_s["p99"].shape == (2, 2)
    one = open_loop_latency(hw_curve(), request_rate=10.0)
    assert float(one.ttft_s["p99"]) == pytest.approx(lat.ttft_s["p99"][1, 0], rel=1e-9)


def test_state_bins_match_single_states(monkeypatch: pytest.MonkeyPatch) -> None:
    lam = np.array([10.0, 19.0, 20.5])
    binned = open_loop_latency(hw_curve(), request_rate=lam)
    assert len(states._bins(int(SLOTS))) < SLOTS  # the default merges states into bins
    monkeypatch.setattr(states, "EXACT_STATES", 4096)
    monkeypatch.setattr(arrivals, "EXACT_STATES", 4096)
    states._bins.cache_clear()  # bins are cached per slot count
    assert len(states._bins(int(SLOTS))) == int(SLOTS)
    exact = open_loop_latency(hw_curve(), request_rate=lam)
    states._bins.cache_clear()
    for name in ("ttft_s", "tpot_s", "e2e_s"):
        for s in STATS:
            assert getattr(binned, name)[s] == pytest.approx(getattr(exact, name)[s], rel=0.01), (name, s)


def test_max_request_rate_meets_the_slo_and_is_monotone() -> None:
    curve = hw_curve()
    mu = curve.service_rate
    rates = [max_request_rate(curve, ttft_slo_s=slo) for slo in (0.06, 0.1, 0.5, 2.0, 8.0)]
    assert all(b >= a for a, b in zip(rates, rates[1:], strict=False))
    assert 0 < rates[0] < rates[-1] < mu
    for slo, rate in zip((0.06, 0.1, 0.5, 2.0, 8.0), rates, strict=True):
        at = open_loop_latency(curve, request_rate=rate)
        assert float(at.ttft_s["p99"]) <= slo * (1 + 1e-9)
        above = open_loop_latency(curve, request_rate=min(1.01 * rate, mu))
        assert float(above.ttft_s["p99"]) > slo  # within 1% of the limit
    tpot_rates = [max_request_rate(curve, tpot_slo_s=slo) for slo in (0.01, 0.02, 0.05)]
    assert tpot_rates == sorted(tpot_rates)
    at = open_loop_latency(curve, request_rate=tpot_rates[1])
    assert float(at.tpot_s["p99"]) <= 0.02 * (1 + 1e-9)
    both = max_request_rate(curve, ttft_slo_s=0.1, tpot_slo_s=0.02)
    assert both <= min(rates[1], tpot_rates[1]) * (1 + 1e-9)
    looser_stat = max_request_rate(curve, ttft_slo_s=0.1, stat="median")
    assert looser_stat >= rates[1]
    mean = max_request_rate(curve, ttft_slo_s=0.1, stat="mean")
    assert float(open_loop_latency(curve, request_rate=mean).ttft_s["mean"]) <= 0.1 * (1 + 1e-9)


def test_max_request_rate_is_zero_when_a_trickle_misses() -> None:
    one = closed_loop(HW, COEF, Requests(**LEN, max_running=SLOTS), concurrency=1.0)
    assert max_request_rate(hw_curve(), tpot_slo_s=0.5 * float(one.tpot_s)) == 0.0
    assert max_request_rate(hw_curve(), ttft_slo_s=0.5 * float(one.ttft_s)) == 0.0


def test_bursty_arrivals_lower_the_rate() -> None:
    kw = dict(ttft_slo_s=2.0, tpot_slo_s=0.1)
    poisson = max_request_rate(hw_curve(64.0), **kw)
    bursty = max_request_rate(hw_curve(64.0), burstiness=0.5, **kw)
    assert bursty < poisson


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [
        (dict(request_rate=-1.0), "request_rate"),
        (dict(request_rate=np.array([1.0, np.nan])), "request_rate"),
        (dict(request_rate=1.0, burstiness=0.0), "burstiness"),
        (dict(request_rate=1.0, burstiness=-2.0), "burstiness"),
        (dict(request_rate=1.0, max_running=0.5), "max_running"),
        (dict(request_rate=1.0, max_running=np.inf), "max_running"),
        (dict(request_rate=1.0, service_scv=-1.0), "service_scv"),
        (dict(request_rate=1.0, input_len=0.0), "input_len"),
    ],
)
def test_open_loop_latency_rejects_bad_input(kwargs: dict, word: str) -> None:
    curve_args = {k: kwargs.pop(k) for k in ("max_running", "input_len") if k in kwargs}
    with pytest.raises(ValueError, match=word):
        open_loop_latency(service_curve(HW, COEF, Requests(**(dict(max_running=SLOTS, **LEN) | curve_args))), **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [
        (dict(ttft_slo_s=2.0, stat="p75"), "stat"),
        (dict(), "ttft_slo_s"),
        (dict(ttft_slo_s=-1.0), "ttft_slo_s"),
        (dict(tpot_slo_s=0.0), "tpot_slo_s"),
        (dict(ttft_slo_s=2.0, burstiness=0.0), "burstiness"),
    ],
)
def test_max_request_rate_rejects_bad_input(kwargs: dict, word: str) -> None:
    with pytest.raises(ValueError, match=word):
        max_request_rate(hw_curve(), **kwargs)


def test_a_service_curve_is_one_workload() -> None:
    """Lengths given as arrays are several workloads: the error says how to give a spread."""
    with pytest.raises(ValueError, match="one workload.*input_lengths"):
        service_curve(HW, COEF, Requests([1000.0, 2000.0], 200.0, max_running=64.0))
    with pytest.raises(ValueError, match="cached_tokens=100"):
        service_curve(HW, COEF, Requests(1000.0, 200.0, max_running=64.0, cached_tokens=100.0))


def test_the_service_time_spread_comes_from_the_lengths() -> None:
    """c_s^2 of the time a request holds a slot: 0 for fixed lengths (constant service), near 1
    when outputs are exponential and dominate (S ~ O x TPOT: Var O / E[O]^2 = 1 for an
    exponential), and what the latency takes when no ``service_scv`` is given."""
    from gpucap.queueing.lengths import Lengths

    kw = dict(input_len=16.0, output_len=400.0, max_running=8.0)
    fixed = service_curve(TOY, TOY_COEF, Requests(**kw))
    assert fixed.service_scv == 0.0
    expo = service_curve(TOY, TOY_COEF, Requests(**kw), output_lengths=Lengths.exponential(400.0))
    assert 0.8 < expo.service_scv <= 1.05
    rate = [0.9 * expo.service_rate]
    default = open_loop_latency(expo, request_rate=rate)
    given = open_loop_latency(expo, request_rate=rate, service_scv=expo.service_scv)
    constant = open_loop_latency(expo, request_rate=rate, service_scv=0.0)
    assert default.ttft_s["p99"] == pytest.approx(given.ttft_s["p99"])
    assert default.ttft_s["p99"] > constant.ttft_s["p99"]


def test_a_full_replica_drains_at_its_service_rate() -> None:
    """Above R a waiting prompt is admitted, and prefilled, only when a running request finishes,
    so a full replica completes at the rate where prompts enter as fast as requests leave, the
    service rate mu = c(R, mu); the wait of an arrival that finds it full is then as in M/M/c,
    exponential with rate (full completion rate) - lambda (Kleinrock, Queueing Systems vol. 1,
    section 3.5): mean 1 / (mu - lambda) with exponential service (Allen-Cunneen's scale
    (c_a^2 + c_s^2) / 2 = 1). The rate c(R, lambda) with prompts arriving at lambda < mu is higher
    (fewer prompts stall the decodes) and would drain the queue too fast: 2,000-token prompts on
    8 slots make the difference large, so the test tells the two apart."""
    kw = dict(input_len=2000.0, output_len=100.0, max_running=8.0)
    curve = service_curve(HW, COEF, Requests(**kw))
    mu = curve.service_rate
    lam = np.array([0.9 * mu])
    st = state_distribution(curve, lam, 1.0, 1.0)
    assert float(st.wait_mean_s[0]) == pytest.approx(1.0 / (mu - lam[0]), rel=1e-9)
    at_lambda = float(curve.completion_rates(lam)[0, -1])
    # c(R, lambda), 5.6% above mu here, would have drained 1 / (c - lambda): a third shorter a wait
    assert at_lambda - lam[0] > 1.5 * (mu - lam[0])


def test_local_rates_solve_their_equation() -> None:
    """``ServiceCurve.local_rates``: at each of the chain's concurrencies, c = m / (TTFT(m) + (O -
    1) t_dec(m) / (1 - c s(c, m))) with s at the rate c itself (``group_costs``), to the bracket's
    64^-3; full (m = R, one of those concurrencies), the same equation as the service rate's, so
    c(R) = mu. Against ``completion_rates`` at 90% of mu, whose stalls come at lambda, the local
    rates are higher where they are below lambda (fewer stalls than at lambda) and lower where above
    (more), the two meeting where c = lambda: flatter, as the engine loop's are
    (benchmarks/README.md). Between the chain's concurrencies the stalls are interpolated in log m,
    which moves c by a fraction of a percent: within 1% of lambda, where the two curves cross, the
    order is left to that and not checked."""
    from gpucap.queueing.promptqueue import group_costs

    curve = service_curve(HW, COEF, Requests(2000.0, 100.0, max_running=64.0))
    points = curve._chain_points[0]
    c = curve.local_rates
    assert points[-1] == curve.slots - 1 and points.size == 3
    s = group_costs(c[points], curve.decode_step_s[points], curve.mean_cost_s[points])
    life = curve.ttft_s[points] + (curve.output_len - 1.0) * curve.decode_step_s[points] / (1.0 - c[points] * s)
    assert c[points] == pytest.approx((points + 1.0) / life, rel=1e-4)
    assert c[-1] == pytest.approx(curve.service_rate, rel=1e-4)
    lam = 0.9 * curve.service_rate
    at_lambda = curve.completion_rates(np.array([lam]))[0]
    low, high = c < 0.99 * lam, c > 1.01 * lam  # where the chain is pulled up, and down
    assert low.sum() >= 10 and high.sum() >= 10
    assert np.all(c[low] >= at_lambda[low]) and np.all(c[high] <= at_lambda[high] * (1 + 1e-9))
    assert np.all(np.diff(c) > 0)


class _Curve:
    """The three things ``chain_exponent`` reads of a service curve, set by hand: one state, its
    completion rate c (``local_rates``) and a mean stall s per prompt."""

    def __init__(self, c: float, s: float, spread: float = 1.0) -> None:
        self.s, self.stall_spread, self.local_rates = s, np.array([spread]), np.array([c])

    def mean_stall_s(self, rate: np.ndarray) -> np.ndarray:
        return np.full((rate.size, 1), self.s)


def test_chain_exponent_by_hand() -> None:
    """``e = (lambda + c) / V``. Without stalls ``V = c_a^2 (lambda + c)``: e is the burstiness.
    lambda 1, c 2, s 0.25 s, Poisson: c_0 = 2 / 0.75 = 8/3 and V = 1 + 2 + (64/9)(1/16) + 2 (8/3)
    (1/4) = 43/9, so e = 27/43; twice the stalls' second moment adds (64/9)(1/16) = 4/9 to V."""
    lam = np.array([1.0])
    for b in (1.0, 0.5):
        _, e = states.chain_exponent(_Curve(2.0, 0.0), lam, b)  # type: ignore[arg-type]
        assert e[0, 0] == pytest.approx(b, rel=1e-12)
    done, e = states.chain_exponent(_Curve(2.0, 0.25), lam, 1.0)  # type: ignore[arg-type]
    assert done[0, 0] == 2.0
    assert e[0, 0] == pytest.approx(27.0 / 43.0, rel=1e-12)
    _, wide = states.chain_exponent(_Curve(2.0, 0.25, spread=2.0), lam, 1.0)  # type: ignore[arg-type]
    assert wide[0, 0] == pytest.approx(3.0 / (43.0 / 9.0 + 4.0 / 9.0), rel=1e-12)


def test_gated_stalls_by_hand() -> None:
    """Stalls of 1 s and 3 s, half each: E[s] = 2, E[s^2] = 5, Var(s) = 1. A full replica whose
    service time has c_s^2 = 0.5 meets them with g = (0.5 x 4 + 1) / 5 = 0.6 of the Poisson
    variance: the shape is divided by 0.6. One length and exponential service (c_s^2 = 1): g = 1."""
    two = arrivals.Stalls(np.array([1.0]), np.array([[1.0, 3.0]]), np.array([0.5, 0.5]), 1.0)
    assert arrivals.gated_stalls(two, 0.5).burstiness[0] == pytest.approx(1.0 / 0.6, rel=1e-12)
    one = arrivals.Stalls(np.array([1.0]), np.array([[2.0]]), np.array([1.0]), 2.0)
    assert arrivals.gated_stalls(one, 1.0).burstiness[0] == pytest.approx(2.0, rel=1e-12)


def test_tpot_quantile_rises_with_the_level() -> None:
    """Over the two populations (some arrivals wait at 90% of the service rate: 8B, 16k prompts),
    P50 <= P90 <= P99 TPOT."""
    hw = hardware("meta-llama/Llama-3.1-8B", "H100-SXM-80GB")
    from gpucap.queueing.lengths import Lengths

    inp = Lengths.percentiles({5: 9000, 50: 16000, 90: 24000, 99: 30000}, "long prompts")
    out = Lengths.percentiles({5: 50, 50: 200, 90: 500, 99: 800}, "long outputs")
    _, held = memory_limit(hw, inp.mean + out.mean)
    curve = service_curve(hw, COEF, Requests(inp.mean, out.mean, max_running=held), input_lengths=inp, output_lengths=out, kv_slots=held)  # fmt: skip
    parts = arrivals.arrival_parts(curve, np.array([0.9 * curve.service_rate]), 1.0, curve.service_scv)
    assert parts.states.wait_probability[0] > 0.01
    q50, q90, q99 = (arrivals.tpot_quantile(curve, parts, q)[0] for q in (0.5, 0.9, 0.99))
    assert q50 <= q90 <= q99


def test_output_bins_by_hand() -> None:
    """Two output lengths, 11 and 101 tokens, 3:1: two bins at those lengths with those shares
    (a bin of one length spreads as that length: 1 + ((O - 1)^-1/2)^-2 = O). Eight lengths of
    equal share into eight bins the same way; merged into one bin, 1 and 2 tokens half each (O - 1
    held at 1 at least): O - 1 = (1/2 + 1/2)^-2 = 1. Fixed lengths: one bin at the mean."""
    from gpucap.queueing.servicecurve import OUTPUT_BINS, _output_bins

    lens, shares = _output_bins(Lengths((11.0, 101.0), (0.75, 0.25)), 33.5)
    assert lens == pytest.approx([11.0, 101.0]) and shares == pytest.approx([0.75, 0.25])
    values = tuple(float(v) for v in 2.0 ** np.arange(OUTPUT_BINS) + 1.0)
    lens, shares = _output_bins(Lengths(values, (1.0 / OUTPUT_BINS,) * OUTPUT_BINS), 10.0)
    assert lens == pytest.approx(values) and shares == pytest.approx(np.full(OUTPUT_BINS, 1.0 / OUTPUT_BINS))
    lens, shares = _output_bins(Lengths.fixed(300.0), 300.0)
    assert lens == pytest.approx([300.0]) and shares == pytest.approx([1.0])
    lens, _ = _output_bins(Lengths.uniform(1.0, 2.0), 1.5)
    assert lens[0] == pytest.approx(2.0)


def test_mixture_cdf_by_hand() -> None:
    """Two components with half the weight each: one whose values at the levels are the levels
    themselves (P(X <= t) = t between the first and last level), one shifted by 1. At t = 0.5: 0.5 x
    0.5 + 0.5 x 0 = 0.25; at 1.5: 0.5 x 1 + 0.5 x 0.5 = 0.75; below everything 0, above 1."""
    levels = arrivals.TPOT_LEVELS
    values = np.stack([levels, levels + 1.0])[None, :, :]
    weights = np.array([[0.5, 0.5]])
    cdf = arrivals.mixture_cdf(values, weights, np.array([[-1.0, 0.5, 1.5, 3.0]]))
    assert cdf[0] == pytest.approx([0.0, 0.25, 0.75, 1.0], rel=1e-12)


def test_tpot_percentile_over_output_lengths() -> None:
    """70B on four H100s, 16k prompts and outputs of 50 to 800 tokens at 50% of the service rate:
    the workload's P99 TPOT is the 0.99 point of the mixture over its output-length bins
    (``mixture_cdf`` reaches 0.99 there), above the P99 of the longest bin alone and below that
    of the shortest (a short life meets few prompts and spreads more); ``tpot_margin`` at an SLO
    of that P99 is 0, and its sign says which side of it an SLO is."""
    import dataclasses

    hw = hardware("meta-llama/Llama-3.3-70B-Instruct", "H100-SXM-80GB", tp=4, weight_dtype="fp8")
    inp = Lengths.percentiles({5: 9000, 50: 16000, 90: 24000, 99: 30000}, "long prompts")
    out = Lengths.percentiles({5: 50, 50: 200, 90: 500, 99: 800}, "long outputs")
    _, held = memory_limit(hw, inp.mean + out.mean)
    curve = service_curve(hw, COEF, Requests(inp.mean, out.mean, max_running=held), input_lengths=inp, output_lengths=out, kv_slots=held)  # fmt: skip
    assert curve.spread_output_len.size > 1 and curve.output_weights.sum() == pytest.approx(1.0)
    parts = arrivals.arrival_parts(curve, np.array([0.5 * curve.service_rate]), 1.0, curve.service_scv)
    p99 = arrivals.tpot_quantile(curve, parts, 0.99)[0]
    values, weights = arrivals.tpot_components(curve, parts, np.array([0]))
    assert arrivals.mixture_cdf(values, weights, np.array([p99]))[0] == pytest.approx(0.99, abs=1e-6)

    def one_bin(k: int) -> float:
        one = dataclasses.replace(curve, spread_output_len=curve.spread_output_len[[k]], output_weights=np.array([1.0]))
        return float(arrivals.tpot_quantile(one, parts, 0.99)[0])

    assert one_bin(-1) < p99 < one_bin(0)
    assert arrivals.tpot_margin(curve, parts, 0.99, p99)[0] == pytest.approx(0.0, abs=1e-5)
    assert (
        arrivals.tpot_margin(curve, parts, 0.99, 1.2 * p99)[0]
        > 0
        > arrivals.tpot_margin(curve, parts, 0.99, 0.8 * p99)[0]
    )


def step_beside(hw, coef: Coefficients, decodes: float, context: float):
    """Seconds of one step of ``decodes`` sequences at ``context`` beside ``prefill`` prompt
    tokens with ``pairs`` attention pairs per layer (``step_time``), as a function of the two."""
    from gpucap.physics.step import step_work
    from gpucap.physics.steptime import step_time

    def t(prefill: float = 0.0, pairs: float = 0.0) -> float:
        w = step_work(hw, decode_tokens=decodes, decode_context=context, prefill_tokens=prefill, prefill_pairs=pairs)
        return float(step_time(hw, w, coef).total_s)

    return t


def test_a_long_prompt_stalls_the_decodes_chunk_by_chunk() -> None:
    """``prompt_costs``: a prompt longer than the budget beside the decodes runs in chunks of
    M - B tokens, each step with the B decodes, and is charged what those steps take beyond as
    many decode-only steps. By hand: M = 8,192 (vLLM's default budget), B = 64, so chunks of
    8,128 tokens; a 20,000-token prompt (Llama 3.1 8B: full attention, pairs I^2 / 2) is three
    chunks of 8,128, 8,128 and 3,744 tokens with pairs P(8128), P(16256) - P(8128) and P(20000)
    - P(16256); two such prompts are five chunks, the third taking the first prompt's last 3,744
    tokens and the second's first 4,384."""
    from gpucap.queueing.promptqueue import GROUP_SIZES
    from gpucap.queueing.servicecurve import prompt_costs

    hw = hardware("meta-llama/Llama-3.1-8B", "H100-SXM-80GB")
    coef = Coefficients.for_engine("vllm")
    b, ctx, i = 64.0, 3000.0, 20000.0
    t = step_beside(hw, coef, b, ctx)

    def p(n: float) -> float:
        return n * n / 2.0

    dec, stall, room = prompt_costs(hw, coef, np.array([b]), ctx, np.array([i, 4000.0]))
    assert dec[0] == pytest.approx(t())
    one = t(8128, p(8128)) + t(8128, p(16256) - p(8128)) + t(3744, p(20000) - p(16256)) - 3 * t()
    assert stall[0, 0, 0] == pytest.approx(one, rel=1e-9)
    two = (
        t(8128, p(8128))
        + t(8128, p(16256) - p(8128))
        + t(8128, p(20000) - p(16256) + p(4384))
        + t(8128, p(12512) - p(4384))
        + t(7488, p(20000) - p(12512))
        - 5 * t()
    ) / 2
    assert GROUP_SIZES[1] == 2 and stall[0, 0, 1] == pytest.approx(two, rel=1e-9)
    # a prompt within the budget is one step: 4,000 tokens alone, or two of them in 8,000
    assert stall[0, 1, 0] == pytest.approx(t(4000, p(4000)) - t(), rel=1e-9)
    assert stall[0, 1, 1] == pytest.approx((t(8000, 2 * p(4000)) - t()) / 2, rel=1e-9)
    assert room[0, 0] == pytest.approx(i / 8128)


def test_many_chunks_are_taken_in_pieces() -> None:
    """Past ``CHUNK_PIECES`` chunks the stall is summed over even pieces of them: with a 512-token
    budget and 64 decodes (448 prompt tokens a step) a 20,000-token prompt is 45 chunks, 44 of
    448 tokens and one of 288, chunk j with pairs ``(e^2 - a^2) / 2``; the pieces may only fall
    below the sum chunk by chunk (a step's time is a sum of maxima of lines), here by under 0.1%.
    A budget that the decodes fill leaves a token a step and still gives a finite stall."""
    import dataclasses

    from gpucap.queueing.servicecurve import CHUNK_PIECES, prompt_costs

    base = hardware("meta-llama/Llama-3.1-8B", "H100-SXM-80GB")
    hw = dataclasses.replace(base, engine=dataclasses.replace(base.engine, max_num_batched_tokens=512))
    coef = Coefficients.for_engine("vllm")
    b, ctx, i = 64.0, 3000.0, 20000.0
    t = step_beside(hw, coef, b, ctx)

    edges = np.minimum(np.arange(46) * 448.0, i)
    assert edges[-2] == 44 * 448 and 45 > CHUNK_PIECES
    exact = sum(t(e - a, (e * e - a * a) / 2) for a, e in zip(edges[:-1], edges[1:], strict=True)) - 45 * t()
    _, stall, _ = prompt_costs(hw, coef, np.array([b]), ctx, np.array([i]))
    assert exact * (1 - 1e-3) <= stall[0, 0, 0] <= exact * (1 + 1e-12)
    full = dataclasses.replace(hw, engine=dataclasses.replace(hw.engine, max_num_batched_tokens=32))
    _, stall, room = prompt_costs(full, coef, np.array([b]), ctx, np.array([i]))
    assert np.isfinite(stall).all() and stall[0, 0, 0] > 0 and room[0, 0] == i


def test_no_tpot_outlasts_the_longest_step() -> None:
    """Each step gives every running request a token (vLLM takes the decodes first, then prompt
    chunks within the budget), so TPOT is at most the longest step: the decode-only step and a
    budget's room of prompt chunks. For one prompt length longer than the room, that room is
    ``(M - B) / I`` of the prompt, so the step lasts ``t_dec + s_1(I) (M - B) / I``, s_1 the
    prompt's whole stall (checked chunk by chunk above). At 97% of the service rate of 20,000-token
    prompts the stalls' P99 over a life would pass it; the P99 TPOT does not. SGLang runs a step
    of prompts while the decodes wait: no such bound."""
    import dataclasses

    hw = hardware("meta-llama/Llama-3.1-8B", "H100-SXM-80GB")
    coef = Coefficients.for_engine("vllm")
    inp, out = Lengths.fixed(20000), Lengths.percentiles({5: 20, 50: 100, 95: 400}, "outputs")
    cap = min(memory_limit(hw, inp.mean + out.mean)[1], 1024.0)
    curve = service_curve(
        hw, coef, Requests(inp.mean, out.mean, max_running=cap), input_lengths=inp, output_lengths=out
    )
    assert curve.room_share[:, 0] == pytest.approx(20000.0 / (8192.0 - curve.decode_batch), rel=1e-4)
    by_hand = curve.decode_step_s + curve.stall_s[:, 0, 0] / curve.room_share[:, 0]
    assert curve.longest_step_s == pytest.approx(by_hand, rel=1e-9)
    lat = open_loop_latency(curve, request_rate=0.97 * curve.service_rate, stats=("p99",))  # fmt: skip
    assert float(lat.tpot_s["p99"]) <= curve.longest_step_s.max() * (1 + 1e-9)
    uncapped = dataclasses.replace(curve, decodes_every_step=False)
    free = open_loop_latency(uncapped, request_rate=0.97 * curve.service_rate, stats=("p99",))  # fmt: skip
    assert float(free.tpot_s["p99"]) > curve.longest_step_s.max()
    assert np.isinf(uncapped.longest_step_s).all()
    sglang = hardware("meta-llama/Llama-3.1-8B", "H100-SXM-80GB", engine="sglang")
    assert not service_curve(sglang, coef, Requests(2000.0, 100.0, max_running=64.0)).decodes_every_step
