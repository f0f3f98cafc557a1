"""The queue of prompts for the step's token budget, and the stalls prompts put into decoding.

A replica runs every decoding sequence in every step and fills the rest of the step's token
budget (``max_num_batched_tokens`` M) with prompt chunks, first come first served. Prompts are a
queue of their own in front of that budget: when several arrive close together (Poisson arrivals
bunch), the later ones wait for the earlier ones' prefill, and every decoding sequence waits
through each prompt step. Averaged over time the closed loop carries both (its prompt share and
its budget term); the tails need the queue itself.

**Prompt wait.** The budget is a single server of prompt work. A prompt of I tokens holds it

    q(I) = s(I) + t_dec(B) x I / (M - B)

seconds: ``s(I) = t_step(B decodes + I prompt tokens) - t_step(B decodes)``, the time its tokens add
to the steps they ride in, plus its share of the decode part of those steps while the budget is
full (B decoding sequences). With arrivals at rate lambda (gamma gaps of shape k = burstiness) the
wait W for the server is GI/G/1's; its tail is exponential, ``P(W > t) ~ C exp(-theta t)``, with
theta the positive root of Lundberg's equation

    E[exp(theta q)] = E[exp(theta A)]^-1 = (1 + theta / (k lambda))^k      (A: a gap between arrivals)

and, for Poisson arrivals, ``C = (1 - rho) / (lambda E[q exp(theta q)] - 1)`` with ``rho = lambda
E[q]`` (the Cramer-Lundberg approximation: Asmussen, Applied Probability and Queues, 2nd ed. 2003,
XIII.5, and section VIII.5 for M/G/1). Gamma arrivals keep that C (an approximation). Since
``P(W > 0) = rho`` under Poisson arrivals, W is taken as 0 with probability ``1 - p`` and
``d + Exp(theta)`` otherwise: ``p = min(rho, C)``, ``d = max(0, ln(C / rho) / theta)``, which is the
tail above where it matters (P90, P99) and the right probability of waiting at all.

**Steps.** Steps run back to back; the prompts that arrive during one ride in the next (a gated
queue): ``D' = t_dec + S``, S the stalls of the ~``lambda D`` prompts the step before gathered. In
steady state ``E[D] = t_dec / (1 - rho)`` (``rho = lambda E[s]``) and ``Var D = lambda E[s^2] E[D]
/ (1 - rho^2)`` (``Var D = E[Var(S | D)] + Var E[S | D] = lambda E[s^2] E[D] + rho^2 Var D``).
``D - t_dec`` is taken as gamma with that mean and variance. An arrival finds a step in progress
with the length-biased density ``d f(d) / E[D]``, waits for its rest ``U d``, and rides in the
next with the ~``lambda d`` prompts that arrived during it: ``TTFT = own step + U d + rho d``.
Prompts the budget cannot take in one step queue beyond it: that is the wait above.

**Decode stalls.** A request decodes its O - 1 tokens in O - 1 steps; the prompts that arrive
during its life T each stretch one or more of those steps by s(I). So ``T = (O - 1) t_dec + S``,
S a compound sum over the ~``lambda T`` arrivals in the window: mean ``rho_s T`` with ``rho_s =
lambda E[s]``, variance ``k2 = c_a^2 lambda E[s^2] T`` and third cumulant ``k3 = c_a^4 lambda E[s^3] T``
(``c_a^2 = 1 / k``; a compound Poisson sum's cumulants are ``lambda T E[s^j]``). S at the quantile
of normal score z, with its skew ``g = k3 / k2^1.5`` (Cornish-Fisher: ``z + (z^2 - 1) g / 6``;
Cornish and Fisher, Revue de l'Institut International de Statistique 5, 1937), gives the fixed point

    T = (O - 1) t_dec + rho_s T + (z + (z^2 - 1) g(T) / 6) sqrt(k2(T)),      TPOT_q = T / (O - 1),

a quadratic in ``sqrt(T)`` (k2 and k3 grow as T, so ``g sqrt(k2) = k3 / k2`` does not). A short output lives through few
prompts and its TPOT spreads widely (a long prompt's stall is rare and large: the skew); a long
output averages them out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.special import gammaincinv
from scipy.stats import norm

from gpucap.queueing.brackets import first_true

Array = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]

ROOT_POINTS, ROOT_ROUNDS = 63, 4  # log theta: the bracket's 28 nats to 28 / 64^4 = 2e-6
THETA_SPAN = 1e6  # bracket: theta from 1 / (THETA_SPAN x mean q) to THETA_SPAN / shortest q


@dataclass(frozen=True)
class PromptWait:
    """The wait of a prompt for the token budget, per rate: 0 with probability ``1 - p``, else
    ``shift + Exp(rate)``; ``rho`` the budget's utilization by prompts (>= 1: it never drains)."""

    rho: Array
    p: Array
    shift_s: Array
    rate: Array  # theta, 1/s

    @property
    def stable(self) -> npt.NDArray[np.bool_]:
        return self.rho < 1.0

    def mean_s(self) -> Array:
        return np.where(self.stable, self.p * (self.shift_s + 1.0 / self.rate), np.inf)


def lundberg_root(rate: Array, burstiness: float, hold_s: Array, weights: Array) -> Array:
    """theta > 0 with ``E[exp(theta q)] = (1 + theta / (k lambda))^k`` per row (module docstring);
    ``hold_s`` (rows, K) the holding times q of K prompt lengths of probability ``weights`` (K,).
    Rows with ``lambda E[q] >= 1`` have no root: NaN."""
    lam = np.asarray(rate, dtype=float)[:, None]
    k = float(burstiness)
    weights = np.asarray(weights, dtype=float)
    top = hold_s.max(axis=1)
    mean_q = (hold_s * weights[None, :]).sum(axis=1)
    lo = np.log(1.0 / (THETA_SPAN * np.maximum(mean_q, 1e-300)))
    hi = np.log(THETA_SPAN / np.maximum(hold_s.min(axis=1), 1e-300))

    def above(log_theta: Array) -> Bools:
        """Past the root at each (row, point): g > 0 (g < 0 between 0 and the root, its slope at
        0 being E[q] - 1/lambda; g is convex)."""
        theta = np.exp(log_theta)[:, :, None]  # (rows, P, 1)
        # log E[exp(theta q)], taken out at the longest q so that it cannot overflow
        scaled = np.exp(theta * (hold_s - top[:, None])[:, None, :]) @ weights[:, None]
        log_mgf = theta[:, :, 0] * top[:, None] + np.log(scaled[:, :, 0])
        g = log_mgf - k * np.log1p(theta[:, :, 0] / (k * lam))
        return g > 0.0

    lo, hi = first_true(lo, hi, above, points=ROOT_POINTS, rounds=ROOT_ROUNDS)
    stable = lam[:, 0] * mean_q < 1.0
    return np.where(stable, np.exp(0.5 * (lo + hi)), np.nan)


def prompt_wait(rate: Array, burstiness: float, hold_s: Array, weights: Array) -> PromptWait:
    """The budget's wait (module docstring) per row: ``rate`` (rows,) arrivals/s, ``hold_s``
    (rows, K) the time each prompt length holds the budget, ``weights`` (K,) their probabilities."""
    lam = np.asarray(rate, dtype=float)
    rho = lam * (hold_s * weights[None, :]).sum(axis=1)
    theta = lundberg_root(lam, burstiness, hold_s, weights)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        slope = lam * (weights[None, :] * hold_s * np.exp(np.minimum(theta[:, None] * hold_s, 700.0))).sum(axis=1)
        c = (1.0 - rho) / (slope - 1.0)
        c = np.where(np.isfinite(c) & (c > 0), c, rho)
        p = np.minimum(rho, c)
        shift = np.where(c > rho, np.log(c / np.maximum(rho, 1e-300)) / theta, 0.0)
    ok = rho < 1.0
    return PromptWait(
        rho=rho,
        p=np.where(ok, p, 1.0),
        shift_s=np.where(ok, shift, np.inf),
        rate=np.where(ok, theta, 1e-300),
    )


def stalled_tpot(
    decode_step_s: Array, *, output_len: float, rate: Array, burstiness: float, stall_s: Array, weights: Array, z: float
) -> Array:
    """TPOT of a request whose life meets prompts at ``rate`` (module docstring, "Decode stalls"),
    with the stalls' sum at the quantile of normal score ``z``, skew included (Cornish-Fisher); 0
    for the mean. ``decode_step_s`` the decode-only step, (rows,) or (rows, columns), the result
    shaped as it; ``stall_s`` (rows, K) the time s(I) each prompt length adds to the steps it rides
    in. Inf where prompts alone fill the time (``lambda E[s] >= 1``)."""
    d = max(float(output_len) - 1.0, 1.0)
    lam = np.asarray(rate, dtype=float)
    w = weights[None, :]
    rho_s = lam * (stall_s * w).sum(axis=1)
    ca2 = 1.0 / float(burstiness)
    k2, k3 = ca2 * lam * (stall_s**2 * w).sum(axis=1), ca2 * ca2 * lam * (stall_s**3 * w).sum(axis=1)
    if np.ndim(decode_step_s) == 2:
        rho_s, k2, k3 = rho_s[:, None], k2[:, None], k3[:, None]
    base = d * np.asarray(decode_step_s, dtype=float)
    free = 1.0 - rho_s
    with np.errstate(divide="ignore", invalid="ignore"):
        if z == 0.0:  # the mean: E[T] = (O - 1) t_dec + rho_s E[T]
            return np.where(free > 0.0, base / np.maximum(free, 1e-300) / d, np.inf)
        # k2 and k3 grow with T, so the skew term is a constant and the fixed point a quadratic in
        # x = sqrt(T): (1 - rho_s) x^2 - z sqrt(k2 / T) x - ((O - 1) t_dec + (z^2 - 1) k3 / (6 k2)) = 0
        sigma = np.sqrt(k2)
        lead = base + (z * z - 1.0) * np.where(k2 > 0, k3 / np.maximum(k2, 1e-300), 0.0) / 6.0
        root = (z * sigma + np.sqrt(np.maximum(z * z * k2 + 4.0 * np.maximum(free, 0.0) * lead, 0.0))) / (2.0 * free)
        life = np.maximum(root * root, base)
    return np.where(free > 0.0, life / d, np.inf)


def normal_quantile(q: float) -> float:
    """z with Phi(z) = q."""
    return float(norm.ppf(q))


# quantile bins of the step in progress (its length-biased distribution), with their
# representative levels: finer towards the tail, which P90 and P99 read
STEP_LEVELS = (0.25, 0.65, 0.875, 0.97, 0.995)
STEP_BIN_WEIGHTS = (0.5, 0.3, 0.15, 0.04, 0.01)


@dataclass(frozen=True)
class StepChain:
    """The steps a replica runs back to back while prompts arrive (module docstring, "Steps"): the
    step an arrival finds in progress as points ``length_s`` (rows, P) of probability ``weight``
    (rows, P), and ``rho`` (rows,), the prompts' share of the time."""

    length_s: Array
    weight: Array
    rho: Array


def step_chain(decode_step_s: Array, *, rate: Array, stall_s: Array, weights: Array) -> StepChain:
    """Steps of ``D = t_dec + sum of s(I)`` over the prompts gathered in the step before (module
    docstring, "Steps"), per row: ``decode_step_s`` (rows,), ``stall_s`` (rows, K) of probability
    ``weights`` (K,), prompts at ``rate`` (rows,)."""
    lam = np.asarray(rate, dtype=float)
    dec = np.asarray(decode_step_s, dtype=float)
    s1 = (stall_s * weights[None, :]).sum(axis=1)
    s2 = (stall_s**2 * weights[None, :]).sum(axis=1)
    rho = np.minimum(lam * s1, 1.0 - 1e-6)
    mean = dec / (1.0 - rho)
    var = lam * s2 * mean / (1.0 - rho * rho)
    extra = mean - dec
    shape = np.where(var > 0, extra * extra / np.maximum(var, 1e-300), np.inf)
    scale = np.where(extra > 0, var / np.maximum(extra, 1e-300), 0.0)
    levels = np.asarray(STEP_LEVELS)[None, :]
    # length-biased: D f(D) / E[D] = (t_dec f(x) + x f(x)) / E[D], x = D - t_dec ~ Gamma(shape, scale),
    # and x f(x) is Gamma(shape + 1)'s density times shape x scale
    finite = np.isfinite(shape) & (shape > 0)
    a = np.where(finite, shape, 1.0)[:, None]
    plain = np.where(finite[:, None], gammaincinv(a, levels) * scale[:, None], extra[:, None])
    biased = np.where(finite[:, None], gammaincinv(a + 1.0, levels) * scale[:, None], extra[:, None])
    share = (extra / mean)[:, None]  # weight of the x f(x) part
    length = np.concatenate([dec[:, None] + plain, dec[:, None] + biased], axis=1)
    w = np.asarray(STEP_BIN_WEIGHTS)
    weight = np.concatenate([(1.0 - share) * w[None, :], share * w[None, :]], axis=1)
    return StepChain(length_s=length, weight=weight, rho=rho)
