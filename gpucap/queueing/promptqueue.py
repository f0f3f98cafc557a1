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
queue): ``D' = t_dec + S``, S the stalls of the ~``lambda D`` prompts the step before gathered.
How many prompts share a step matters on its own where a step's cost is not linear in its
prompts: a pipeline (pp > 1) runs a
lone prompt's micro-batch while the other stages wait, and a mixture-of-experts step, or a
memory-bound decode step with compute to spare, takes its first prompt cheaper than the next.
With ``c(n) = n s_n`` the cost of n prompts in one step (``s_n`` interpolated in log n between
the costs found at 1, 2, 4 and 8 prompts), the count is a Markov chain, ``n' ~ Poisson(lambda
(t_dec + c(n)))`` (``step_groups``): after a decode-only step the next prompt most often rides
alone, after a long prompt step several ride together. Its stationary distribution gives each
prompt's expected cost, ``E[c(n)] / E[n]``, weighted by the prompts (``group_costs``), and the
steps' lengths ``t_dec + c(n)`` (``group_chain``; the spread of the prompts' lengths as two points
about each). An arrival finds a step in progress with the length-biased probability ``pi_n D_n /
E[D]``, waits for its rest ``U D``, and rides in the next with the ~``lambda D`` prompts that
arrived during it: ``TTFT = own step + U D + rho D``, ``rho`` the prompts' share of the time.
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

**Entries.** A prompt stalls the running requests when it enters the replica, and it enters only
into a free slot: a request that starts with F slots free meets at most ``y = F + mu T`` prompts
in its life T, mu the full replica's completions/s (each completion frees one slot; while slots
are free, fewer than mu finish). Where Poisson's count would pass that, T is the fixed point with
the count at the cap, ``T = (O - 1) t_dec + S(y)`` with S a sum of y stalls drawn from the
lengths, and the life is the shorter of the two. Near saturation it can hold the tail (a burst of
prompts beyond the free slots waits for completions instead of stalling the batch at once; on
the tail grid's 70B tp4 16k case at 90%, at one output length, it took P99 TPOT from 529 to 427
ms); it never binds on the mean, and binds less the nearer prompts entering at the completion rate
come to filling the time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.special import gammaln, ndtri

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
    decode_step_s: Array,
    *,
    output_len: float | Array,
    rate: Array,
    burstiness: float | Array,
    stall_s: Array,
    weights: Array,
    z: float | Array,
    entries: tuple[Array, float] | None = None,
) -> Array:
    """TPOT of a request whose life meets prompts at ``rate`` (module docstring, "Decode stalls"),
    with the stalls' sum at the quantile of normal score ``z``, skew included (Cornish-Fisher); 0
    for the mean. ``decode_step_s`` the decode-only step, (rows,) or (rows, columns), the result
    shaped as it; ``stall_s`` (rows, K) the time s(I) each prompt length adds to the steps it rides
    in; ``burstiness`` one shape or one per row; ``z`` and ``output_len`` one each, or one per
    column of a 2-D ``decode_step_s``. ``entries``: the slots free when the life starts (shaped
    as ``decode_step_s``) and the full replica's completions/s, which cap the prompts it can meet
    (module docstring, "Entries"); None: not capped. Inf where prompts alone fill the time
    (``lambda E[s] >= 1``)."""
    d = np.maximum(np.asarray(output_len, dtype=float) - 1.0, 1.0)
    lam = np.asarray(rate, dtype=float)
    w = weights[None, :]
    rho_s = lam * (stall_s * w).sum(axis=1)
    ca2 = 1.0 / np.asarray(burstiness, dtype=float)
    k2, k3 = ca2 * lam * (stall_s**2 * w).sum(axis=1), ca2 * ca2 * lam * (stall_s**3 * w).sum(axis=1)
    if np.ndim(decode_step_s) == 2:
        rho_s, k2, k3 = rho_s[:, None], k2[:, None], k3[:, None]
    base = d * np.asarray(decode_step_s, dtype=float)
    free = 1.0 - rho_s
    with np.errstate(divide="ignore", invalid="ignore"):
        if np.ndim(z) == 0 and z == 0.0:  # the mean: E[T] = (O - 1) t_dec + rho_s E[T]
            return np.where(free > 0.0, base / np.maximum(free, 1e-300) / d, np.inf)
        # k2 and k3 grow with T, so the skew term is a constant and the fixed point a quadratic in
        # x = sqrt(T): (1 - rho_s) x^2 - z sqrt(k2 / T) x - ((O - 1) t_dec + (z^2 - 1) k3 / (6 k2)) = 0
        sigma = np.sqrt(k2)
        lead = base + (z * z - 1.0) * np.where(k2 > 0, k3 / np.maximum(k2, 1e-300), 0.0) / 6.0
        root = (z * sigma + np.sqrt(np.maximum(z * z * k2 + 4.0 * np.maximum(free, 0.0) * lead, 0.0))) / (2.0 * free)
        life = np.maximum(root * root, base)
        if entries is not None:
            life = np.minimum(life, _entry_capped_life(base, entries, stall_s, weights, z))
    return np.where(free > 0.0, life / d, np.inf)


def _entry_capped_life(
    base: Array, entries: tuple[Array, float], stall_s: Array, weights: Array, z: float | Array
) -> Array:
    """The life T at normal score ``z`` with the prompts it meets at their cap (module docstring,
    "Entries"): ``y = F + mu T`` prompts, ``S = y E[s] + z sqrt(y Var s) + (z^2 - 1) k3 / (6 Var
    s)`` (a sum of y stalls drawn from the lengths; k3 their third central moment), so ``T = base
    + S`` is a quadratic in ``sqrt(y)``; inf where prompts entering at the completion rate fill the
    time (``mu E[s] >= 1``)."""
    free_slots, mu = entries
    w = weights[None, :]
    mean = (stall_s * w).sum(axis=1)
    var = np.maximum((stall_s**2 * w).sum(axis=1) - mean**2, 0.0)
    k3 = (((stall_s - mean[:, None]) ** 3) * w).sum(axis=1)
    if np.ndim(base) == 2:
        mean, var, k3 = mean[:, None], var[:, None], k3[:, None]
    a = 1.0 / mu - mean
    skew = (z * z - 1.0) * np.where(var > 0, k3 / np.maximum(var, 1e-300), 0.0) / 6.0
    c = base + free_slots / mu + skew
    sigma = np.sqrt(var)
    caps = a > 0.0
    a = np.where(caps, a, 1.0)
    x = (z * sigma + np.sqrt(np.maximum(z * z * var + 4.0 * a * c, 0.0))) / (2.0 * a)
    return np.where(caps, np.maximum((x * x - free_slots) / mu, base), np.inf)


def normal_quantile(q: float) -> float:
    """z with Phi(z) = q."""
    return float(ndtri(q))


GROUP_STATES = 12  # prompts a step may carry in ``step_groups``' chain; the last holds the rest (costs flat past 8)
GROUP_SQUARINGS = 6  # the chain run 2^6 = 64 steps from an empty step (``step_groups``)
LOG_FACTORIALS = gammaln(np.arange(GROUP_STATES) + 1.0)
GROUP_SIZES = (1.0, 2.0, 4.0, 8.0)  # prompts in a step at which ``group_costs`` is given its costs


@dataclass(frozen=True)
class StepChain:
    """The steps a replica runs back to back while prompts arrive (module docstring, "Steps"): the
    step an arrival finds in progress as points ``length_s`` (rows, P) of probability ``weight``
    (rows, P), and ``rho`` (rows,), the prompts' share of the time."""

    length_s: Array
    weight: Array
    rho: Array


def cost_at_size(cost_at_sizes: Array, n: Array) -> Array:
    """A prompt's cost when ``n`` share a step (``n`` broadcast against the leading axes), from
    its costs at ``GROUP_SIZES`` (last axis): linear in log n between them, held beyond the ends."""
    at = np.interp(np.log(np.maximum(n, 1.0)), np.log(GROUP_SIZES), np.arange(len(GROUP_SIZES), dtype=float))
    hat = np.maximum(1.0 - np.abs(np.asarray(at)[..., None] - np.arange(len(GROUP_SIZES))), 0.0)
    return np.asarray((cost_at_sizes * hat).sum(axis=-1), dtype=float)


def per_prompt_costs(cost_at_sizes: Array) -> Array:
    """``s_n`` for n = 0..GROUP_STATES-1 (a new last axis) from the costs at ``GROUP_SIZES`` (last
    axis, ``cost_at_size``); ``s_0`` is ``s_1`` (never charged)."""
    return cost_at_size(cost_at_sizes[..., None, :], np.arange(GROUP_STATES, dtype=float))


def step_groups(rate: Array, decode_step_s: Array, per_prompt_s: Array) -> Array:
    """Stationary share of steps that carry n = 0..GROUP_STATES-1 prompts (rows, N) (module
    docstring, "Steps"): ``n' ~ Poisson(lambda (t_dec + n s_n))``, the last state holding the tail;
    ``rate`` and ``decode_step_s`` (rows,), ``per_prompt_s`` (rows, N) the cost ``s_n``. The chain
    forgets its start about as fast as ``lambda s`` (the prompts' share of time) shrinks, so the
    row of ``P^(2^GROUP_SQUARINGS)`` is its stationary distribution to ``(lambda s)^64``."""
    lam = np.asarray(rate, dtype=float)[:, None, None]
    n = np.arange(GROUP_STATES, dtype=float)
    length = np.asarray(decode_step_s, dtype=float)[:, None, None] + (n * per_prompt_s)[:, :, None]  # (rows, N, 1)
    mean = np.maximum(lam * length, 1e-300)
    move = np.exp(n[None, None, :] * np.log(mean) - mean - LOG_FACTORIALS[None, None, :])  # (rows, from, to)
    move[:, :, -1] = np.maximum(1.0 - move[:, :, :-1].sum(axis=2), 0.0)
    for _ in range(GROUP_SQUARINGS):
        move = move @ move
    pi = move[:, 0, :]
    return pi / pi.sum(axis=1, keepdims=True)


def _riders(rate: Array, decode_step_s: Array, mean_cost: Array) -> tuple[Array, Array]:
    """``(pi, share)``: ``step_groups`` on the costs ``mean_cost`` (rows, N) averaged over the
    lengths, and the share of prompts that ride n to a step (rows, N)."""
    pi = step_groups(rate, decode_step_s, mean_cost)
    riders = pi * np.arange(GROUP_STATES, dtype=float)[None, :]
    total = riders.sum(axis=1, keepdims=True)
    # at a trickle no step carries two: every prompt rides alone
    share = np.where(total > 1e-12, riders / np.maximum(total, 1e-300), np.eye(GROUP_STATES)[1][None, :])
    return pi, share


def group_costs(rate: Array, decode_step_s: Array, mean_cost: Array) -> Array:
    """A prompt's expected cost in the steps it rides in (rows,): ``sum_n w_n s_n`` with ``w_n = n
    pi_n / E[n]`` the share of prompts that ride n to a step (``step_groups``); ``mean_cost``
    (rows, N) the cost ``s_n`` averaged over the prompt lengths (``per_prompt_costs``)."""
    _, share = _riders(rate, decode_step_s, mean_cost)
    return (share * mean_cost).sum(axis=1)


def group_chain(rate: Array, decode_step_s: Array, per_length: Array, weights: Array) -> tuple[Array, StepChain]:
    """Each prompt length's expected cost in the steps it rides in (rows, K), as ``group_costs``,
    and the steps themselves (``StepChain``): a step that carries n prompts lasts ``t_dec + n
    s_n``, with the spread of their lengths as two points at ``+- sqrt(n Var s_n(I))`` (none for
    one length; the lower one held at ``t_dec``); an arrival finds one in progress with
    probability ``pi_n D / E[D]`` (length-biased), and the prompts' share of the time is
    ``E[n s_n] / E[D]``. ``per_length`` (rows, K, N): ``s_n(I)`` (``per_prompt_costs``),
    ``weights`` (K,) the lengths' probabilities."""
    w = np.asarray(weights, dtype=float)
    dec = np.asarray(decode_step_s, dtype=float)
    mean_cost = np.einsum("rkn,k->rn", per_length, w)
    pi, share = _riders(rate, dec, mean_cost)
    costs = np.einsum("rkn,rn->rk", per_length, share)
    n = np.arange(GROUP_STATES, dtype=float)[None, :]
    work = n * mean_cost  # (rows, N)
    spread = np.sqrt(np.maximum(n * (np.einsum("rkn,k->rn", per_length**2, w) - mean_cost**2), 0.0))
    if np.any(spread > 0.0):
        length = dec[:, None] + np.concatenate([np.maximum(work - spread, 0.0), work + spread], axis=1)
        prob = np.concatenate([pi, pi], axis=1) / 2.0
    else:
        length, prob = dec[:, None] + work, pi
    busy = prob * length
    chain = StepChain(
        length_s=length,
        weight=busy / busy.sum(axis=1, keepdims=True),
        rho=(pi * work).sum(axis=1) / (pi * (dec[:, None] + work)).sum(axis=1),
    )
    return costs, chain
