"""Tail latency of one replica under open-loop arrivals (DESIGN.md section 5, "Open loop").

The replica is a queue whose speed depends on how many requests it holds. With n requests in the
engine and R = ``max_running`` batch slots, min(n, R) run and finish at ``mu(n) = X(min(n, R))``,
the closed-loop throughput at that concurrency (``gpucap.physics.batching.closed_loop``); the rest wait,
first come first served, for a slot. Arrivals: Poisson, or gamma gaps of shape ``burstiness``
(squared coefficient of variation ``c_a^2 = 1 / burstiness``).

1. Number in system. Below R, continuous batching is processor sharing with a state-dependent
   rate (every running request advances one token a step). Under Poisson arrivals that queue has
   the product form ``pi(n) = pi(0) prod_{k <= n} lambda / mu(k)`` whatever the distribution of
   the work (insensitivity: Cohen, "The multiple phase service network with generalized processor
   sharing", Acta Informatica 12, 1979; Kelly, "Reversibility and Stochastic Networks", 1979,
   section 3.3). For gamma arrivals the chain is taken in its diffusion form (Kobayashi, JACM 21,
   1974): drift ``lambda - mu(n)``, variance ``c_a^2 lambda + c_d^2 mu(n)``, so that
   ``ln pi(n) - ln pi(n-1) = ln(lambda / mu(n)) (lambda + mu(n)) / (c_a^2 lambda + c_d^2 mu(n))``.
   Departures repeat the arrival pattern (each request enters at once and leaves about one
   sojourn later, as in an infinite-server queue), ``c_d^2 = c_a^2``, and the exponent is
   ``burstiness``: ``pi(n) ~ prod_k (lambda / mu(k)) ** burstiness``. Above R the same ratio with
   mu(R) gives a geometric tail ``r = (lambda / mu(R)) ** burstiness``; stable iff lambda < mu(R).
2. Wait for a slot. An arrival that finds n >= R waits for n - R + 1 departures; the count is
   geometric with ratio r, so with exponential gaps the wait is exponential with mean
   ``w_M = 1 / (mu(R) (1 - r))`` (Poisson arrivals, exponential service: M/M/c, ``1 / (R mu -
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
   - n < R: it runs at once at concurrency m = n + 1. TTFT = ``TTFT_closed(m) + U s``: the
     closed-loop prefill and front-end time plus the rest of the step in progress (U uniform on
     [0, 1); no step when n = 0). The step is a prompt-carrying one (``prefill_step`` of the
     closed loop at n) with probability ``f = min(1, lambda (TTFT_closed(n) - t_request))``, the
     share of time spent on prompts, else a decode step ``TPOT_closed(n)``.
   - n >= R: TTFT = ``TTFT_closed(R) + W``, W exponential with mean w (step 2); m = R.
   - TPOT = ``TPOT_closed(m_life)``, the batch averaged over the request's life. The requests it
     found leave, about evenly, while new ones arrive, so the life average of the batch is
     ``(m + mean m) / 2`` plus the arrivals' noise; its variance is ``Var(m) / 4 + c_a^2 mean(m) / 3``
     (the arrival count of a window of length T, ``lambda T = mean m``, integrated over the
     window). So ``m_life = mean m + k (m - mean m)`` with ``k^2 = 1/4 + c_a^2 mean m / (3 Var m)``,
     at most 1.
   - e2e = TTFT + (O - 1) TPOT.

Percentiles come from these mixtures: bisection on the mixture CDF for TTFT and e2e; for TPOT the
quantile of m (interpolated between states) carried through the non-decreasing TPOT(m). TTFT and
TPOT of the closed loop are made non-decreasing in m (running maximum). The front end's own queue
(``t_request_s`` each, serially) is left out: ``lambda t_request`` is small where a replica's
engine saturates first.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpucap.config import Hardware
from gpucap.physics.batching import _frontend_latency, closed_loop
from gpucap.physics.coefficients import Coefficients
from gpucap.physics.memory import ArrayLike
from gpucap.physics.step import Array
from gpucap.queueing.benchstats import sample_stats
from gpucap.types import QUANTILES, STATISTICS

Bools = npt.NDArray[np.bool_]
Ints = npt.NDArray[np.int64]

CURVE_POINTS = 64  # concurrencies at which the closed loop is solved; log-interpolated between
EXACT_STATES = 48  # states kept one by one; above, merged into log-spaced bins
STATE_BINS = 64  # bins above EXACT_STATES
BISECTION_STEPS = 32
RATE_GRID = 24  # utilizations tried by max_request_rate: this many log-spaced up to 1/2, as many above
RATE_REFINE = (16, 16, 16)  # points per refinement round between the last pass and the first miss
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


@dataclass(frozen=True)
class ServiceCurve:
    """Closed-loop figures of one replica at every concurrency m = 1..R (index m - 1)."""

    slots: int
    output_len: float
    front_end_s: float
    requests_per_s: Array  # mu(m)
    ttft_s: Array  # non-decreasing in m
    tpot_s: Array  # non-decreasing in m
    prefill_step_s: Array  # a step that carries a prompt chunk

    @property
    def service_rate(self) -> float:
        return float(self.requests_per_s[-1])


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


def service_curve(
    hw: Hardware, coef: Coefficients, *, input_len: float, output_len: float, max_running: float
) -> ServiceCurve:
    """``closed_loop`` at up to ``CURVE_POINTS`` concurrencies from 1 to R = floor(max_running),
    interpolated in log m to every whole m (one vectorized call)."""
    for name, v in (("input_len", input_len), ("output_len", output_len)):
        if not (np.isfinite(v) and v >= 1):
            raise ValueError(f"{name} must be a number of tokens >= 1, got {v!r}")
    if not (np.isfinite(max_running) and max_running >= 1):
        raise ValueError(f"max_running must be a finite number of batch slots >= 1, got {max_running!r}")
    slots = int(np.floor(max_running))
    grid = np.unique(np.round(np.geomspace(1.0, slots, min(CURVE_POINTS, slots))))
    pt = closed_loop(
        hw, coef, concurrency=grid, input_len=input_len, output_len=output_len, max_running=slots, waits=False
    )  # the wait for the step in progress is the model's own (below)
    m = np.arange(1, slots + 1, dtype=float)

    def interp(y: Array) -> Array:
        return np.exp(np.interp(np.log(m), np.log(grid), np.log(y)))

    return ServiceCurve(
        slots=slots,
        output_len=float(output_len),
        front_end_s=_frontend_latency(hw, coef),
        requests_per_s=interp(pt.requests_per_s),
        ttft_s=np.maximum.accumulate(interp(pt.ttft_s)),
        tpot_s=np.maximum.accumulate(interp(pt.tpot_s)),
        prefill_step_s=interp(pt.prefill_step.total_s),
    )


def wait_scale(*, slots: int, utilization: ArrayLike, ca2: float, service_scv: float) -> Array:
    """Mean wait relative to the chain's exponential-gap wait ``w_M`` (module docstring, step 2):
    ``(c_a^2 + c_s^2 + (1 - c_s^2) min(F, 1)) / (2 c_a^2)`` with Cosmetatos'
    ``F = (1 - rho)(c - 1)(sqrt(4 + 5c) - 2) / (16 rho c)``."""
    rho = np.asarray(utilization, dtype=float)
    f = (1.0 - rho) * (slots - 1) * (np.sqrt(4.0 + 5.0 * slots) - 2.0) / (16.0 * np.maximum(rho, 1e-300) * slots)
    return np.asarray((ca2 + service_scv + (1.0 - service_scv) * np.minimum(f, 1.0)) / (2.0 * ca2), dtype=float)


@dataclass(frozen=True)
class _States:
    """What arrivals find, per rate (rows): the bins of n < R and the waiting tail."""

    weight: Array  # (rates, bins) probability of each bin of n < R
    state: Array  # (bins,) representative n of each bin
    wait_probability: Array  # (rates,) P(n >= R)
    wait_mean_s: Array  # (rates,) mean wait given that it waits
    mean_m: Array  # (rates,) mean concurrency an arrival runs at (R for waiting ones)
    life_shrink: Array  # (rates,) k: life-average batch = mean m + k (m - mean m)


def _bins(slots: int) -> Ints:
    """Left edges of the state bins over n = 0..R-1: one per state up to EXACT_STATES, then log."""
    if slots <= EXACT_STATES + STATE_BINS:
        return np.arange(slots, dtype=np.int64)
    log_edges = np.unique(np.round(np.geomspace(EXACT_STATES, slots, STATE_BINS + 1)[:-1]))
    return np.concatenate([np.arange(EXACT_STATES), log_edges]).astype(np.int64)


def state_distribution(curve: ServiceCurve, rate: Array, burstiness: float, service_scv: float) -> _States:
    """The chain of the module docstring (steps 1 and 2) for every stable rate (rows)."""
    lam = np.maximum(np.asarray(rate, dtype=float), 1e-300)[:, None]
    log_ratio = np.log(lam) - np.log(curve.requests_per_s)[None, :]  # ln(lambda / mu(k)), k = 1..R
    log_pi = np.concatenate([np.zeros((lam.shape[0], 1)), np.cumsum(burstiness * log_ratio, axis=1)], axis=1)
    pi = np.exp(log_pi - log_pi.max(axis=1, keepdims=True))  # n = 0..R
    r = np.exp(burstiness * log_ratio[:, -1])
    tail = pi[:, -1] / (1.0 - r)  # sum over n >= R
    edges = _bins(curve.slots)
    weight = np.add.reduceat(pi[:, :-1], edges, axis=1)
    total = weight.sum(axis=1) + tail
    weight, p_wait = weight / total[:, None], tail / total
    n = np.arange(curve.slots, dtype=float)
    state = np.add.reduceat(n, edges) / np.diff(np.append(edges, curve.slots))
    m = state + 1.0
    mean_m = weight @ m + p_wait * curve.slots
    var_m = weight @ (m * m) + p_wait * curve.slots**2 - mean_m**2
    with np.errstate(divide="ignore"):
        k2 = 0.25 + mean_m / (3.0 * burstiness * np.maximum(var_m, 0.0))
    mu = curve.service_rate
    scale = wait_scale(slots=curve.slots, utilization=lam[:, 0] / mu, ca2=1.0 / burstiness, service_scv=service_scv)
    return _States(
        weight=weight,
        state=state,
        wait_probability=p_wait,
        wait_mean_s=scale / (mu * (1.0 - r)),
        mean_m=mean_m,
        life_shrink=np.sqrt(np.minimum(k2, 1.0)),
    )


def _at(values: Array, n: Array) -> Array:
    """A per-concurrency figure (index m - 1) at fractional states n (concurrency n + 1)."""
    return np.interp(n, np.arange(values.size, dtype=float), values)


@dataclass(frozen=True)
class _Mixture:
    """Per rate (rows): X = base_j + U span_j (U uniform on [0, 1)) with probability weight_j, or
    tail_base + an exponential of mean tail_mean with probability tail_weight."""

    weight: Array  # (rows, K)
    base: Array  # (rows, K)
    span: Array  # (rows, K)
    tail_weight: Array  # (rows,)
    tail_base: Array  # (rows,)
    tail_mean: Array  # (rows,)

    def mean(self) -> Array:
        return (self.weight * (self.base + self.span / 2)).sum(axis=1) + self.tail_weight * (
            self.tail_base + self.tail_mean
        )

    def cdf(self, t: Array) -> Array:
        """P(X <= t) for each row's t."""
        inv_span = 1.0 / np.maximum(self.span, 1e-300)  # a point mass counts once t passes it
        below = np.clip((t[:, None] - self.base) * inv_span, 0.0, 1.0)
        tail = -np.expm1(-np.maximum(t - self.tail_base, 0.0) / self.tail_mean)
        return np.einsum("ij,ij->i", self.weight, below) + self.tail_weight * tail

    def quantile(self, q: float) -> Array:
        """Smallest t with P(X <= t) >= q, by bisection."""
        tail_q = self.tail_mean * np.log(np.maximum(self.tail_weight / (1.0 - q), 1.0))
        lo = self.base.min(axis=1)
        hi = np.maximum((self.base + self.span).max(axis=1), self.tail_base + tail_q) + 1e-12
        for _ in range(BISECTION_STEPS):
            t = 0.5 * (lo + hi)
            low = self.cdf(t) < q
            lo, hi = np.where(low, t, lo), np.where(low, hi, t)
        return hi


@dataclass(frozen=True)
class _Parts:
    """Latency of the arrivals at each stable rate: TTFT and e2e mixtures, and TPOT by bin."""

    ttft: _Mixture
    e2e: _Mixture
    tpot: Array  # (rows, bins) TPOT of an arrival that runs at once
    tpot_wait: Array  # (rows,) TPOT of one that waits
    states: _States
    life: tuple[Array, Array]  # mean m, k (rows, 1): life-average batch = mean m + k (m - mean m)

    def tpot_mean(self) -> Array:
        return (self.states.weight * self.tpot).sum(axis=1) + self.states.wait_probability * self.tpot_wait


def _life_tpot(curve: ServiceCurve, life: tuple[Array, Array], m: Array) -> Array:
    """TPOT at the life-average batch of an arrival that runs at concurrency m."""
    mean_m, k = life
    return _at(curve.tpot_s, mean_m + k * (m - mean_m) - 1.0)


def _parts(curve: ServiceCurve, rate: Array, burstiness: float, service_scv: float) -> _Parts:
    """The mixtures of the module docstring (step 3) for stable rates (rows)."""
    st = state_distribution(curve, rate, burstiness, service_scv)
    lam = np.asarray(rate, dtype=float)[:, None]
    n = st.state
    first = _at(curve.ttft_s, n)  # TTFT at concurrency n + 1
    busy = n > 0  # the step in progress, made of the n present
    n_step = np.maximum(n - 1.0, 0.0)
    prompt_time = np.maximum(_at(curve.ttft_s, n_step) - curve.front_end_s, 0.0)
    prompt_share = np.where(busy, np.minimum(1.0, lam * prompt_time), 0.0)  # (rows, bins)
    decode_step = np.where(busy, _at(curve.tpot_s, n_step), 0.0)
    prefill_step = np.where(busy, _at(curve.prefill_step_s, n_step), 0.0)
    rows = (lam.shape[0], 2 * n.size)
    weight = np.concatenate([st.weight * (1.0 - prompt_share), st.weight * prompt_share], axis=1)
    span = np.broadcast_to(np.concatenate([decode_step, prefill_step]), rows)
    life = (st.mean_m[:, None], st.life_shrink[:, None])
    tpot = _life_tpot(curve, life, n[None, :] + 1.0)
    tpot_wait = _life_tpot(curve, life, np.full((1, 1), float(curve.slots)))[:, 0]
    o1 = max(curve.output_len - 1.0, 0.0)
    full_ttft = float(curve.ttft_s[-1])
    pw, wm = st.wait_probability, st.wait_mean_s
    ttft = _Mixture(
        weight, np.broadcast_to(np.concatenate([first, first]), rows), span, pw, np.full_like(pw, full_ttft), wm
    )
    e2e_base = np.concatenate([first + o1 * tpot, first + o1 * tpot], axis=1)
    e2e = _Mixture(weight, e2e_base, span, pw, full_ttft + o1 * tpot_wait, wm)
    return _Parts(ttft=ttft, e2e=e2e, tpot=tpot, tpot_wait=tpot_wait, states=st, life=life)


def _tpot_quantile(curve: ServiceCurve, parts: _Parts, q: float) -> Array:
    """q-quantile of TPOT: the q-quantile of the concurrency m an arrival runs at (R for waiting
    ones; the state itself among the one-state bins, interpolated between bin centres among the
    log-spaced ones) through the non-decreasing life TPOT(m)."""
    st = parts.states
    cum = np.cumsum(st.weight, axis=1)
    mid = cum - 0.5 * st.weight
    rows = np.arange(mid.shape[0])
    if mid.shape[1] > 1:
        j = np.clip((mid < q).sum(axis=1), 1, mid.shape[1] - 1)
        m0, m1 = mid[rows, j - 1], mid[rows, j]
        frac = np.clip((q - m0) / np.maximum(m1 - m0, 1e-300), 0.0, 1.0)
        n_q = st.state[j - 1] + frac * (st.state[j] - st.state[j - 1])
    else:
        n_q = np.full(rows.size, st.state[0])
    # where the quantile falls in a one-state bin (n < EXACT_STATES), it is that state: spreading
    # the mass of n = 0 towards n = 1 would double a light load's P99 TPOT
    k = np.minimum((cum < q).sum(axis=1), cum.shape[1] - 1)
    n_q = np.where(st.state[k] < EXACT_STATES, st.state[k], n_q)
    m_q = np.where(q > cum[:, -1], float(curve.slots), n_q + 1.0)
    return _life_tpot(curve, parts.life, m_q[:, None])[:, 0]


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
        parts = _parts(curve, flat[stable], burstiness, service_scv)
        p_wait[stable] = parts.states.wait_probability
        for s in stats:
            if s == "mean":
                ttft[s][stable], e2e[s][stable] = parts.ttft.mean(), parts.e2e.mean()
                tpot[s][stable] = parts.tpot_mean()
            else:
                q = QUANTILES[s]
                ttft[s][stable], e2e[s][stable] = parts.ttft.quantile(q), parts.e2e.quantile(q)
                tpot[s][stable] = _tpot_quantile(curve, parts, q)
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
    hw: Hardware,
    coef: Coefficients,
    *,
    request_rate: ArrayLike,
    input_len: float,
    output_len: float,
    max_running: float,
    burstiness: float = 1.0,
    service_scv: float = 0.0,
    stats: tuple[str, ...] = STATISTICS,
    curve: ServiceCurve | None = None,
) -> QueueLatency:
    """Mean and P50/P95/P99 TTFT, TPOT and e2e of one replica at each ``request_rate`` (requests/s,
    any shape), for Poisson (``burstiness`` 1) or gamma arrivals; the model is in the module
    docstring.

    ``max_running``: batch slots (the smaller of the engine's ``max_num_seqs`` and the requests
    the KV cache holds). ``service_scv``: squared coefficient of variation of the time a request
    holds a slot when all are busy; 0 for fixed input and output lengths, about 1 for
    exponential-like output lengths. ``stats``: only these statistics (the others are absent from
    the result). ``curve``: the replica's ``service_curve`` when already computed for these
    inputs (the planner reuses the one ``max_request_rate`` made).
    """
    lam = _check_rate(request_rate)
    b = check_burstiness(burstiness)
    scv = _check_scv(service_scv)
    unknown = [s for s in stats if s not in STATISTICS]
    if unknown:
        raise ValueError(f"stats must be among {', '.join(STATISTICS)}, got {unknown}")
    if curve is None:
        curve = service_curve(hw, coef, input_len=input_len, output_len=output_len, max_running=max_running)
    return _latency(curve, lam, b, scv, stats=tuple(stats))


def max_request_rate(
    hw: Hardware,
    coef: Coefficients,
    *,
    input_len: float,
    output_len: float,
    max_running: float,
    ttft_slo_s: float | None = None,
    tpot_slo_s: float | None = None,
    stat: str = "p99",
    burstiness: float = 1.0,
    service_scv: float = 0.0,
    curve: ServiceCurve | None = None,
) -> float:
    """Largest request rate (requests/s) of one replica whose ``stat`` TTFT and TPOT meet the SLOs
    given; 0.0 when even a trickle misses them.

    The statistics rise with the rate, so the rate is searched on utilizations from 1e-6 to
    1 - 1e-4 (log-spaced in rho below 1/2 and in 1 - rho above), then refined three times between
    the last rate that met the SLOs and the first that missed. The rate returned is one that was
    evaluated and met them, below the limit by at most 1/17^3 of the first bracket (about 2e-4 of
    the rate).
    """
    if stat not in STATISTICS:
        raise ValueError(f"stat must be one of {', '.join(STATISTICS)}, got {stat!r}")
    if ttft_slo_s is None and tpot_slo_s is None:
        raise ValueError("give ttft_slo_s, tpot_slo_s or both")
    for name, v in (("ttft_slo_s", ttft_slo_s), ("tpot_slo_s", tpot_slo_s)):
        if v is not None and not v > 0:
            raise ValueError(f"{name} must be a positive number of seconds, got {v!r}")
    b = check_burstiness(burstiness)
    scv = _check_scv(service_scv)
    if curve is None:
        curve = service_curve(hw, coef, input_len=input_len, output_len=output_len, max_running=max_running)

    def ok(rates: Array) -> Bools:
        """Whether each (stable) rate meets the SLOs: a percentile is within its SLO when the
        CDF at the SLO reaches the percentile's level."""
        parts = _parts(curve, rates, b, scv)
        good = np.ones(rates.shape, dtype=bool)
        q = QUANTILES.get(stat, 0.0)
        if ttft_slo_s is not None:
            slo = np.full(rates.shape, float(ttft_slo_s))
            good &= parts.ttft.mean() <= slo if stat == "mean" else parts.ttft.cdf(slo) >= q
        if tpot_slo_s is not None:
            good &= (parts.tpot_mean() if stat == "mean" else _tpot_quantile(curve, parts, q)) <= tpot_slo_s
        return good

    low = np.geomspace(LOWEST_UTILIZATION, 0.5, RATE_GRID)
    high = 1.0 - np.geomspace(0.5, 1.0 - HIGHEST_UTILIZATION, RATE_GRID + 1)[1:]
    rates = curve.service_rate * np.concatenate([low, high])
    miss = np.flatnonzero(~ok(rates))
    if miss.size == 0:
        return float(rates[-1])
    if miss[0] == 0:
        return 0.0
    lo, hi = float(rates[miss[0] - 1]), float(rates[miss[0]])
    for points in RATE_REFINE:
        rates = np.linspace(lo, hi, points + 2)[1:-1]
        miss = np.flatnonzero(~ok(rates))
        if miss.size == 0:
            lo = float(rates[-1])
            continue
        lo, hi = (float(rates[miss[0] - 1]) if miss[0] > 0 else lo), float(rates[miss[0]])
    return lo
