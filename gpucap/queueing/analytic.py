"""Tail latency of one replica under open-loop arrivals (DESIGN.md section 5, "Open loop").

The replica is a queue whose speed depends on how many requests it holds. With n requests in the
engine and R = ``max_running`` batch slots, min(n, R) run and the rest wait, first come first
served, for a slot. m running finish at

    c(m, lambda) = m / (TTFT(m) + (O - 1) t_dec(m) / (1 - lambda s(lambda, m))),

the closed loop's prefill time and decode-only step at m (``gpucap.physics.batching.closed_loop``,
at the running requests' length-biased mean context), each decode step stretched by the prompts
that arrive at lambda, a share ``lambda s`` of the time, s a prompt's cost over the prompts a step
carries (``gpucap.queueing.promptqueue.group_costs``). The closed loop's own throughput X(m) is
this at lambda = X(m); under open-loop arrivals the prompts come at lambda whatever m is. The
service rate mu is the fixed point ``mu = c(R, mu)``. Where lengths differ and the KV cache binds,
fewer than R may fit at once: N of them, random (``gpucap.queueing.kvfit``); then min(m, N) run,
the rates are ``E[c(min(m, N))]`` and an arrival that finds n >= N waits. Arrivals: Poisson, or
gamma gaps of shape ``burstiness`` (squared coefficient of variation ``c_a^2 = 1 / burstiness``).

1. Number in system. Below R, continuous batching is processor sharing with a state-dependent
   rate (every running request advances one token a step). Under Poisson arrivals that queue has
   the product form ``pi(n) = pi(0) prod_{k <= n} lambda / mu(k)`` whatever the distribution of
   the work (insensitivity: Cohen, "The multiple phase service network with generalized processor
   sharing", Acta Informatica 12, 1979; Kelly, "Reversibility and Stochastic Networks", 1979,
   section 3.3), with mu(n) the rate n finish. That holds while requests finish independently;
   here every prompt that arrives stalls all running requests at once, so completions come in
   bursts and the number in the replica wanders further than the product form says. The chain is
   taken in its diffusion form (Kobayashi, JACM 21, 1974): drift ``lambda - mu(n)``, variance V,
   so that ``ln pi(n) - ln pi(n-1) = ln(lambda / mu(n)) (lambda + mu(n)) / V(n)``. Departures
   repeat the arrival pattern (each request enters at once and leaves about one sojourn later, as
   in an infinite-server queue), ``c_d^2 = c_a^2``, and the stalls add their compound noise and
   its covariance with the arrivals: ``V = c_a^2 (lambda + mu + c_0^2 lambda E[s^2]) + 2 c_0 lambda
   E[s]``, ``c_0 = mu / (1 - lambda E[s])`` (``gpucap.queueing.states.chain_exponent``). And the
   replica holds n because of how requests came lately: few follow a lull in arrivals, and so few
   prompts stalling the decodes, many follow a burst, with many. So mu(n) is c(n) with its stalls
   at the rate the n finish, where admissions balance completions, not at lambda
   (``ServiceCurve.local_rates``; the two meet where c = lambda, and at R the local rate is mu).
   Without stalls the exponent is ``burstiness``: ``pi(n) ~ prod_k (lambda / mu(k)) ** burstiness``.
   Against the step-level simulation at 90% of the service rate (four runs of 12,000 requests a
   case, the number each arrival finds counted), the share of arrivals that find the replica
   full in six cases: the simulation 0.04-0.40, the model 0.03-0.28 (0.58-0.83 of it; 0.005-0.28
   without the local rates, and the product form down to 2e-14 on a case where the simulation
   has 0.03: ``benchmarks/README.md``, "Tail latency against the engine loop"). Above R the prompts no
   longer come at lambda: a waiting request is admitted, and its prompt prefilled, only when one
   running finishes, so the full replica completes at the rate where prompts enter as fast as
   requests leave, the service rate ``mu = c(R, mu)`` (below), as the local rates have it at R;
   ``c(R, lambda)`` would count the prompts at the lower arrival rate and overstate how fast a
   queue drains.
   The tail is geometric, ``r = (lambda / mu) ** burstiness``; stable iff lambda < mu.
2. Wait for a slot. An arrival that finds n >= R waits for n - R + 1 departures; the count is
   geometric with ratio r, so with exponential gaps the wait is exponential with mean
   ``w_M = 1 / (mu (1 - r))`` (Poisson arrivals, exponential service: M/M/c, ``1 / (R mu -
   lambda)``; Kleinrock, Queueing Systems vol. 1, 1975, section 3.5). A full batch holds each
   request a near-constant time when lengths are fixed, so the mean wait is scaled as in
   Allen-Cunneen by ``(c_a^2 + c_s^2) / 2`` (Allen, Probability, Statistics and Queueing Theory,
   1990), with Cosmetatos' correction for constant service, ``W(M/D/c) = (1 + F) / 2 W(M/M/c)``,
   ``F = (1 - rho)(c - 1)(sqrt(4 + 5c) - 2) / (16 rho c)`` (Cosmetatos, INFOR 13, 1975; Tijms, A
   First Course in Stochastic Models, 2003), counted for the constant share ``1 - c_s^2``:
   ``w = w_M (c_a^2 + c_s^2 + (1 - c_s^2) min(F, 1)) / (2 c_a^2)`` (``wait_scale``; w_M already
   carries one c_a^2: ``1 - r ~ (1 - rho) / c_a^2``). ``c_s^2 = service_scv``: 0 for fixed
   lengths, 1 for exponential-like ones. One slot has F = 0, which gives M/D/1's exact mean wait
   ``rho / (2 mu (1 - rho))`` (Pollaczek-Khinchine). P(wait) stays the chain's (Erlang C under
   Poisson arrivals).
3. Latency of an arrival that finds n others (arrivals see the time-stationary distribution, exact
   for Poisson by PASTA):
   - n < R: it runs at once at concurrency m = n + 1. Its prompt rides in the step after the one
     in progress, with the other prompts gathered meanwhile, unless prompts are queued for the
     token budget ahead of it (``gpucap.queueing.promptqueue``):
     TTFT = ``TTFT_closed(m) + U d + rho d`` with probability 1 - p: the closed-loop prefill and
     front-end time, the rest of the step in progress d (U uniform on [0, 1); d from the steps'
     length-biased distribution, ``group_chain``; none when n = 0) and the prompts gathered during
     it (``rho = lambda E[s]``, the prompts' share of time);
     TTFT = ``TTFT_closed(m) + W + min(rho W, full step)`` with probability p: the budget's wait
     (GI/G/1, Cramer-Lundberg tail, ``prompt_wait``) and the prompts that arrived during it. Each
     arrival's own prompt adds ``TTFT(I) - TTFT(I_mean)`` alone, over bins of its length.
   - n >= R (or n >= N where the KV cache binds): TTFT = ``TTFT_closed(R) + W`` plus its own
     prompt's extra, W exponential with mean w (step 2) times the completions its prompt's first
     chunk waits for (``ServiceCurve.own_wait_scale``), per length bin; m = R.
   - TPOT = ``TPOT_closed(m_life)``, the batch averaged over the request's life, or where longer
     the decode-only step stretched by the prompts met during the life (``stalled_tpot``), of
     which there are at most the slots free when it starts and the completions during the life
     let in ("Entries" in ``gpucap.queueing.promptqueue``). The
     requests it found leave, about evenly, while new ones arrive, so the life average of the
     batch is ``(m + mean m) / 2`` plus the arrivals' noise; its variance is ``Var(m) / 4 + c_a^2
     mean(m) / 3`` (the arrival count of a window of length T, ``lambda T = mean m``, integrated
     over the window). So ``m_life = mean m + k (m - mean m)`` with ``k^2 = 1/4 + c_a^2 mean m /
     (3 Var m)``, at most 1.
   - e2e = TTFT + (O - 1) TPOT.

Percentiles come from these mixtures: a grid search on the mixture CDF for TTFT and e2e
(``gpucap.queueing.brackets``); for TPOT, two populations mixed by the share that waits: the
arrivals that run at once (the quantile of m, interpolated between states, carried through the
non-decreasing TPOT(m), with the stalls at the same quantile), and those that wait, which run in
a full replica where a prompt enters each time a request finishes, so the stalls they meet
spread as a renewal count (``c_s^2`` times Poisson's variance; ``arrivals.gated_stalls``). In
the simulation at 90% of the service rate the second population's TPOT is the narrower (8B, 16k
prompts: P99 114 ms against 160 ms for the first). Each population is split again over bins of
the output length, since a short life averages fewer prompts and its TPOT spreads more: the
workload's percentile is the mixture's, whose upper tail is heavier than any one length's
(``arrivals.tpot_components``, ``mixture_cdf``). The prompt lengths' distribution enters through
the budget's queue, the steps and the stalls (``input_lengths``), the output lengths' through how
widely the stalls spread TPOT (``output_lengths``). Agreement with the step-level simulation on a grid of models,
lengths, splits and loads: ``gpucap.planning.tailcheck``, ``benchmarks/tailgrid.py``. TTFT and
TPOT of the closed loop are made non-decreasing in m (running maximum). The front end's own queue
(``t_request_s`` each, serially) is left out: ``lambda t_request`` is small where a replica's
engine saturates first.

Where each part lives: the service curve, c(m, lambda) and mu in ``gpucap.queueing.servicecurve``;
the chain and the wait for a slot (steps 1 and 2) in ``gpucap.queueing.states``; the mixtures of
step 3 in ``gpucap.queueing.arrivals``; this module puts them together per request rate.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpucap.physics.memory import ArrayLike
from gpucap.physics.step import Array
from gpucap.queueing.arrivals import arrival_parts, tpot_margin, tpot_quantile
from gpucap.queueing.benchstats import sample_stats
from gpucap.queueing.servicecurve import ServiceCurve
from gpucap.types import QUANTILES, STATISTICS

Bools = npt.NDArray[np.bool_]

RATE_GRID = 16  # utilizations tried by max_request_rate: this many log-spaced up to 1/2, as many above
RATE_REFINE = 12  # points per even cut of the bracket between the last pass and the first miss
RATE_PRECISION = 625  # the bracket is refined to 1/625 of the first (an even cut, then a cut around the crossing)...
RATE_TOLERANCE = 1e-3  # ... or to 0.1% of the rate, whichever is wider
LOWEST_UTILIZATION = 1e-6
HIGHEST_UTILIZATION = 1.0 - 1e-4


@dataclass(frozen=True)
class QueueLatency:
    """Latency of one replica at each request rate. Times in seconds; TTFT and e2e are inf where
    unstable (TPOT is then the full batch's)."""

    request_rate: Array  # lambda, requests/s per replica
    service_rate: float  # most requests/s the replica completes (all max_running slots busy)
    utilization: Array  # lambda / service_rate
    ttft_s: dict[str, Array]  # keyed by gpucap.types.STATISTICS
    tpot_s: dict[str, Array]
    e2e_s: dict[str, Array]  # request latency, first byte sent to last token
    stable: Bools
    wait_probability: Array  # share of requests that find every slot taken


def check_burstiness(burstiness: float) -> float:
    if not (np.isfinite(burstiness) and burstiness > 0):
        raise ValueError(f"burstiness must be a positive number (1 = Poisson), got {burstiness!r}")
    return float(burstiness)


def _check_scv(service_scv: float) -> float:
    if not (np.isfinite(service_scv) and service_scv >= 0):
        raise ValueError(f"service_scv must be a number >= 0, got {service_scv!r}")
    return float(service_scv)


def _check_rate(request_rate: ArrayLike) -> Array:
    lam = np.asarray(request_rate, dtype=float)
    if np.any(~np.isfinite(lam)) or np.any(lam < 0):
        raise ValueError(f"request_rate must be finite and >= 0 requests/s, got {request_rate!r}")
    return lam


def summarize(values: ArrayLike) -> dict[str, float]:
    """Mean and percentiles (``gpucap.types.STATISTICS``) of a sample, ignoring NaN."""
    return sample_stats(np.asarray(values, dtype=float), {s: 100 * q for s, q in QUANTILES.items()})


def _latency(
    curve: ServiceCurve, rate: Array, burstiness: float, service_scv: float, stats: tuple[str, ...] = STATISTICS
) -> QueueLatency:
    lam = np.asarray(rate, dtype=float)
    flat = lam.reshape(-1)
    stable = flat < curve.service_rate
    ttft = {s: np.full(flat.shape, np.inf) for s in stats}
    e2e = {s: np.full(flat.shape, np.inf) for s in stats}
    tpot = {s: np.full(flat.shape, float(curve.tpot_s[-1])) for s in stats}
    p_wait = np.ones(flat.shape)
    if stable.any():
        parts = arrival_parts(curve, flat[stable], burstiness, service_scv)
        p_wait[stable] = parts.states.wait_probability
        for s in stats:
            if s == "mean":
                ttft[s][stable], e2e[s][stable] = parts.ttft.mean(), parts.e2e.mean()
                tpot[s][stable] = parts.tpot_mean()
            else:
                q = QUANTILES[s]
                ttft[s][stable], e2e[s][stable] = parts.ttft.quantile(q), parts.e2e.quantile(q)
                tpot[s][stable] = tpot_quantile(curve, parts, q)
        drains = np.ones(flat.shape, dtype=bool)
        drains[stable] = parts.prompt.stable  # prompts faster than the budget takes them: no steady state
        for s in stats:
            ttft[s][~drains], e2e[s][~drains] = np.inf, np.inf
        stable &= drains
    shape = lam.shape
    return QueueLatency(
        request_rate=lam,
        service_rate=curve.service_rate,
        utilization=lam / curve.service_rate,
        ttft_s={s: v.reshape(shape) for s, v in ttft.items()},
        tpot_s={s: v.reshape(shape) for s, v in tpot.items()},
        e2e_s={s: v.reshape(shape) for s, v in e2e.items()},
        stable=stable.reshape(shape),
        wait_probability=p_wait.reshape(shape),
    )


def open_loop_latency(
    curve: ServiceCurve,
    *,
    request_rate: ArrayLike,
    burstiness: float = 1.0,
    service_scv: float | None = None,
    stats: tuple[str, ...] = STATISTICS,
) -> QueueLatency:
    """Mean and P50/P95/P99 TTFT, TPOT and e2e of one replica at each ``request_rate`` (requests/s,
    any shape), for Poisson (``burstiness`` 1) or gamma arrivals; the model is in the module
    docstring.

    ``curve``: the replica serving the workload (``service_curve``: its hardware, coefficients,
    lengths and batch slots), made once and shared by every rate and by ``max_request_rate``.
    ``service_scv``: squared coefficient of variation of the time a request holds a slot when
    all are busy; 0 for fixed input and output lengths, about 1 for exponential-like output
    lengths; None: the curve's, from the lengths (``ServiceCurve.service_scv``). ``stats``: only
    these statistics (the others are absent from the result).
    """
    lam = _check_rate(request_rate)
    unknown = [s for s in stats if s not in STATISTICS]
    if unknown:
        raise ValueError(f"stats must be among {', '.join(STATISTICS)}, got {unknown}")
    b, scv = _variability(curve, burstiness, service_scv)
    return _latency(curve, lam, b, scv, stats=tuple(stats))


def _variability(curve: ServiceCurve, burstiness: float, service_scv: float | None) -> tuple[float, float]:
    """The arrivals' burstiness and the service time's squared coefficient of variation, checked
    (None: the curve's own, from its lengths)."""
    b = check_burstiness(burstiness)
    return b, curve.service_scv if service_scv is None else _check_scv(service_scv)


def max_request_rate(
    curve: ServiceCurve,
    *,
    ttft_slo_s: float | None = None,
    tpot_slo_s: float | None = None,
    stat: str = "p99",
    burstiness: float = 1.0,
    service_scv: float | None = None,
) -> float:
    """Largest request rate (requests/s) of one replica whose ``stat`` TTFT and TPOT meet the SLOs
    given; 0.0 when even a trickle misses them. ``curve``, ``burstiness`` and ``service_scv`` as
    in ``open_loop_latency``.

    The statistics rise with the rate, so the rate is searched on utilizations from 1e-6 to
    1 - 1e-4 (log-spaced in rho below 1/2 and in 1 - rho above), then refined between the last
    rate that met the SLOs and the first that missed, in cuts of 12 points (an even cut, then
    points the final width apart around where the margin, taken as linear in the bracket, crosses
    zero) until the bracket is 1/625 of the first (to rounding) or 0.1% of the rate: three
    evaluations of the model where the crossing falls among the points. The rate returned is one
    that was evaluated and met them, below the limit by at most that (the first bracket is at most
    77% of the rate below rho = 1/2 and 30% of 1 - rho above: 0.12% of the rate at worst).
    """
    if stat not in STATISTICS:
        raise ValueError(f"stat must be one of {', '.join(STATISTICS)}, got {stat!r}")
    if ttft_slo_s is None and tpot_slo_s is None:
        raise ValueError("give ttft_slo_s, tpot_slo_s or both")
    for name, v in (("ttft_slo_s", ttft_slo_s), ("tpot_slo_s", tpot_slo_s)):
        if v is not None and not v > 0:
            raise ValueError(f"{name} must be a positive number of seconds, got {v!r}")
    b, scv = _variability(curve, burstiness, service_scv)

    def margin(rates: Array) -> Array:
        """How far each rate is inside the SLOs (>= 0: it meets them; -1 where unstable): the least
        of ``(CDF(SLO) - q) / (1 - q)`` for a percentile (a percentile is within its SLO when the
        CDF at the SLO reaches the percentile's level; ``tpot_margin`` for TPOT) and ``1 - figure
        / SLO`` for a mean."""
        parts = arrival_parts(curve, rates, b, scv)
        out = np.full(rates.shape, np.inf)
        q = QUANTILES.get(stat, 0.0)
        if ttft_slo_s is not None:
            if stat == "mean":
                out = np.minimum(out, 1.0 - parts.ttft.mean() / ttft_slo_s)
            else:
                out = np.minimum(out, (parts.ttft.cdf(np.full(rates.shape, float(ttft_slo_s))) - q) / (1.0 - q))
        if tpot_slo_s is not None:
            if stat == "mean":
                out = np.minimum(out, 1.0 - parts.tpot_mean() / tpot_slo_s)
            else:
                out = np.minimum(out, tpot_margin(curve, parts, q, tpot_slo_s))
        return np.where(parts.prompt.stable, out, -1.0)

    low = np.geomspace(LOWEST_UTILIZATION, 0.5, RATE_GRID)
    high = 1.0 - np.geomspace(0.5, 1.0 - HIGHEST_UTILIZATION, RATE_GRID + 1)[1:]
    rates = curve.service_rate * np.concatenate([low, high])
    slack = margin(rates)
    miss = np.flatnonzero(slack < 0.0)
    if miss.size == 0:
        return float(rates[-1])
    if miss[0] == 0:
        return 0.0
    k = miss[0]
    (lo, hi), (m_lo, m_hi) = (float(rates[k - 1]), float(rates[k])), (float(slack[k - 1]), float(slack[k]))
    width = max((hi - lo) / RATE_PRECISION, RATE_TOLERANCE * lo)
    cuts = 0
    # (to rounding: points ``width`` apart can leave a bracket a few ulps wider, not worth a call)
    while hi - lo > width * (1.0 + 1e-9):
        if cuts and m_hi > -1.0:
            # a narrow bracket: the margin is near linear in it; look at points ``width`` apart
            # around where it crosses zero, then cut evenly again if the crossing is not among them
            guess = lo + (hi - lo) * m_lo / (m_lo - m_hi)
            rates = guess + width * (np.arange(RATE_REFINE, dtype=float) - (RATE_REFINE - 1) / 2.0)
            rates = rates[(rates > lo) & (rates < hi)]
        else:
            rates = np.linspace(lo, hi, RATE_REFINE + 2)[1:-1]
        cuts += 1
        slack = margin(rates)
        miss = np.flatnonzero(slack < 0.0)
        if miss.size == 0:
            lo, m_lo = float(rates[-1]), float(slack[-1])
        else:
            if miss[0] > 0:
                lo, m_lo = float(rates[miss[0] - 1]), float(slack[miss[0] - 1])
            hi, m_hi = float(rates[miss[0]]), float(slack[miss[0]])
        if miss.size == 0 or miss[0] == 0:
            cuts = 0  # the crossing was outside the points: cut evenly next
    return lo
