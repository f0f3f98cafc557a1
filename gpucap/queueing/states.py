"""What an arrival finds: the number of requests in one replica as a birth-death chain with
the service curve's completion rates, the waiting tail at the service rate, and the mean wait
for a slot (``gpucap.queueing.analytic``'s docstring, steps 1 and 2).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpucap.physics.memory import ArrayLike
from gpucap.physics.step import Array
from gpucap.queueing.servicecurve import MAX_PROMPT_SHARE, ServiceCurve

Ints = npt.NDArray[np.int64]

EXACT_STATES = 48  # states kept one by one; above, merged into log-spaced bins
STATE_BINS = 64  # bins above EXACT_STATES


def wait_scale(*, slots: int, utilization: ArrayLike, ca2: float, service_scv: float) -> Array:
    """Mean wait relative to the chain's exponential-gap wait ``w_M`` (``gpucap.queueing.analytic``, step 2):
    ``(c_a^2 + c_s^2 + (1 - c_s^2) min(F, 1)) / (2 c_a^2)`` with Cosmetatos'
    ``F = (1 - rho)(c - 1)(sqrt(4 + 5c) - 2) / (16 rho c)``."""
    rho = np.asarray(utilization, dtype=float)
    f = (1.0 - rho) * (slots - 1) * (np.sqrt(4.0 + 5.0 * slots) - 2.0) / (16.0 * np.maximum(rho, 1e-300) * slots)
    return np.asarray((ca2 + service_scv + (1.0 - service_scv) * np.minimum(f, 1.0)) / (2.0 * ca2), dtype=float)


@dataclass(frozen=True)
class States:
    """What arrivals find, per rate (rows): the bins of n < R and the waiting tail."""

    weight: Array  # (rates, bins) probability of each bin of n < R
    state: Array  # (bins,) representative n of each bin
    wait_probability: Array  # (rates,) P(n >= R)
    wait_mean_s: Array  # (rates,) mean wait given that it waits
    mean_m: Array  # (rates,) mean concurrency an arrival runs at (R for waiting ones)
    life_shrink: Array  # (rates,) k: life-average batch = mean m + k (m - mean m)


@functools.lru_cache(maxsize=256)
def _bins(slots: int) -> Ints:
    """Left edges of the state bins over n = 0..R-1: one per state up to EXACT_STATES, then log."""
    if slots <= EXACT_STATES + STATE_BINS:
        return np.arange(slots, dtype=np.int64)
    log_edges = np.unique(np.round(np.geomspace(EXACT_STATES, slots, STATE_BINS + 1)[:-1]))
    return np.concatenate([np.arange(EXACT_STATES), log_edges]).astype(np.int64)


def chain_exponent(curve: ServiceCurve, rate: Array, burstiness: float) -> tuple[Array, Array]:
    """``(c, e)`` (rows, R): the completion rates ``c(k)``, k = 1..R, with the stalls of prompts
    that enter as fast as the k finish (``ServiceCurve.local_rates``: the state follows the
    arrivals of late, so its stalls do), and the exponent of the chain's step ``ln pi(k) - ln
    pi(k - 1) = e(k) ln(lambda / c(k))`` (``gpucap.queueing.analytic``, step 1): ``e = (lambda +
    c) / V`` with the diffusion variance of the number in the replica

        V = c_a^2 (lambda + c + c_0^2 lambda E[s^2]) + 2 c_0 lambda E[s],      c_0 = c / (1 - lambda E[s]).

    Every prompt that arrives stalls all m running requests at once by s, so completions come in
    bursts: over dt they are ``c_0 (dt - S)``, S the compound sum of the stalls (variance
    ``lambda E[s^2] dt``, times c_a^2 for gamma arrivals), and an arrival both adds a request and
    holds back ``c_0 s`` completions (the covariance term). Without stalls ``V = c_a^2 (lambda +
    c)`` and ``e = burstiness``. ``E[s]`` is ``mean_stall_s``; ``E[s^2] = E[s]^2 x stall_spread``."""
    lam = np.maximum(np.asarray(rate, dtype=float), 1e-300)[:, None]
    stall = curve.mean_stall_s(lam[:, 0])  # (rows, R)
    done = np.broadcast_to(curve.local_rates[None, :], stall.shape)
    ca2 = 1.0 / burstiness
    free = 1.0 - np.minimum(lam * stall, MAX_PROMPT_SHARE)
    c0 = done / free
    second = stall * stall * curve.stall_spread[None, :]
    var = ca2 * (lam + done + c0 * c0 * lam * second) + 2.0 * c0 * lam * stall
    return done, (lam + done) / var


def state_distribution(curve: ServiceCurve, rate: Array, burstiness: float, service_scv: float) -> States:
    """The chain of ``gpucap.queueing.analytic`` (steps 1 and 2) for every stable rate (rows)."""
    lam = np.maximum(np.asarray(rate, dtype=float), 1e-300)[:, None]
    done, exponent = chain_exponent(curve, lam[:, 0], burstiness)  # (rows, R): c(k, lambda), e(k), k = 1..R
    log_ratio = np.log(lam) - np.log(done)  # ln(lambda / c(k))
    log_pi = np.concatenate([np.zeros((lam.shape[0], 1)), np.cumsum(exponent * log_ratio, axis=1)], axis=1)
    pi = np.exp(log_pi - log_pi.max(axis=1, keepdims=True))  # n = 0..R
    # above R a waiting prompt enters only when a request finishes, so prompts come at the
    # completion rate, not at lambda: the full replica completes at its service rate mu
    mu = curve.service_rate
    r = np.exp(burstiness * (np.log(lam[:, 0]) - np.log(mu)))
    tail = pi[:, -1] / (1.0 - r)  # sum over n >= R
    edges = _bins(curve.slots)
    # an arrival that finds n waits when the KV cache holds no more than n (P(N <= n))
    blocked = 1.0 - curve.fits_at_least  # (R,), n = 0..R-1: P(N < n + 1)
    weight = np.add.reduceat(pi[:, :-1] * (1.0 - blocked)[None, :], edges, axis=1)
    tail = tail + pi[:, :-1] @ blocked
    total = weight.sum(axis=1) + tail
    weight, p_wait = weight / total[:, None], tail / total
    n = np.arange(curve.slots, dtype=float)
    state = np.add.reduceat(n, edges) / np.diff(np.append(edges, curve.slots))
    m = state + 1.0
    mean_m = weight @ m + p_wait * curve.slots
    var_m = weight @ (m * m) + p_wait * curve.slots**2 - mean_m**2
    with np.errstate(divide="ignore"):
        k2 = 0.25 + mean_m / (3.0 * burstiness * np.maximum(var_m, 0.0))
    scale = wait_scale(slots=curve.slots, utilization=lam[:, 0] / mu, ca2=1.0 / burstiness, service_scv=service_scv)
    return States(
        weight=weight,
        state=state,
        wait_probability=p_wait,
        wait_mean_s=scale / (mu * (1.0 - r)),
        mean_m=mean_m,
        life_shrink=np.sqrt(np.minimum(k2, 1.0)),
    )
