"""What an arrival pays: its TTFT as a mixture over the states it may find (the step in
progress, the queue for the token budget, the wait for a slot, its own prompt's length) and its
TPOT over the batch it lives with, with their means and quantiles (``gpucap.queueing.analytic``'s
docstring, step 3).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt
from scipy.special import ndtr

from gpucap.physics.step import Array
from gpucap.queueing.brackets import first_true
from gpucap.queueing.promptqueue import (
    PromptWait,
    StepChain,
    cost_at_size,
    group_chain,
    normal_quantile,
    prompt_wait,
    stalled_tpot,
)
from gpucap.queueing.servicecurve import ServiceCurve
from gpucap.queueing.states import EXACT_STATES, States, state_distribution

Bools = npt.NDArray[np.bool_]

QUANTILE_POINTS = 63  # points a round of the quantile search
QUANTILE_ROUNDS = 4  # rounds: the quantile to 64^-4 (6e-8) of its first bracket
STATE_GROUP_EDGES = (0.5, 0.8, 0.95, 0.99)  # running states merged for the TTFT mixture, by probability


def _at(values: Array, n: Array) -> Array:
    """A per-concurrency figure (index m - 1) at fractional states n (concurrency n + 1)."""
    return np.interp(n, np.arange(values.size, dtype=float), values)


@dataclass(frozen=True)
class Mixture:
    """Per rate (rows): X = base_j + U span_j (U uniform on [0, 1)) with probability weight_j, or
    tail_base_t + an exponential of mean tail_mean_t with probability tail_weight_t (the waits for
    a slot, t over the prompt-length bins). Component j also
    waits for the token budget with probability queue_p_j, from base_j + queue_offset_j:
    ``W = queue_shift + Exp(queue_rate)``,
    and then shares its last step with the prompts that arrived while it waited, ``min(queue_gain
    W, queue_cap)`` more (in place of the step in progress, which the wait holds;
    ``gpucap.queueing.promptqueue``)."""

    weight: Array  # (rows, K)
    base: Array  # (rows, K)
    span: Array  # (rows, K)
    tail_weight: Array  # (rows, T)
    tail_base: Array  # (rows, T)
    tail_mean: Array  # (rows, T)
    queue_p: Array  # (rows, K)
    queue_offset: Array  # (rows, K) added to the base in the queued branch
    queue_shift: Array  # (rows,)
    queue_rate: Array  # (rows,)
    queue_gain: Array  # (rows,)
    queue_cap: Array  # (rows,)

    def _wait(self, t: Array) -> Array:
        """The budget wait W that, with the prompts behind it, ends at ``t`` past the base
        (``t`` (rows, P, K))."""
        gain, cap = self.queue_gain[:, None, None], self.queue_cap[:, None, None]
        knee = cap * (1.0 + gain) / np.maximum(gain, 1e-300)
        return np.where(t < knee, t / (1.0 + gain), t - cap)

    def mean(self) -> Array:
        d, theta, gain = self.queue_shift, self.queue_rate, self.queue_gain
        w_cap = self.queue_cap / np.maximum(gain, 1e-300)
        capped = np.where(w_cap <= d, w_cap, d - np.expm1(-theta * np.maximum(w_cap - d, 0.0)) / theta)
        queued = (d + 1.0 / theta + gain * capped)[:, None]
        own = (1.0 - self.queue_p) * (self.base + self.span / 2) + self.queue_p * (
            self.base + self.queue_offset + queued
        )
        return (self.weight * own).sum(axis=1) + (self.tail_weight * (self.tail_base + self.tail_mean)).sum(axis=1)

    def cdf(self, t: Array) -> Array:
        """P(X <= t) for each row's t: ``t`` (rows,), or (rows, P) for P points a row."""
        t = np.asarray(t, dtype=float)
        pts = t[:, :, None] if t.ndim == 2 else t[:, None, None]  # (rows, P, 1)
        base, span = self.base[:, None, :], self.span[:, None, :]
        inv_span = 1.0 / np.maximum(span, 1e-300)  # a point mass counts once t passes it
        below = np.clip((pts - base) * inv_span, 0.0, 1.0)
        waited = self._wait(pts - base - self.queue_offset[:, None, :]) - self.queue_shift[:, None, None]
        rate = self.queue_rate[:, None, None]
        queued = np.where(waited > 0.0, -np.expm1(-rate * np.maximum(waited, 0.0)), 0.0)
        p = self.queue_p[:, None, :]
        own = ((1.0 - p) * below + p * queued) @ self.weight[:, :, None]  # (rows, P, 1)
        past = np.maximum(pts - self.tail_base[:, None, :], 0.0)  # (rows, P, T)
        tail = -np.expm1(-past / self.tail_mean[:, None, :]) @ self.tail_weight[:, :, None]
        out = own[:, :, 0] + tail[:, :, 0]
        return out if t.ndim == 2 else out[:, 0]

    def quantile(self, q: float) -> Array:
        """Smallest t with P(X <= t) >= q, to ``64^-4`` (6e-8) of a first bracket a few times the
        answer (``gpucap.queueing.brackets.first_true``)."""
        # every tail component at the longest mean with all the tails' weight: above the quantile
        spread = self.tail_mean.max(axis=1) * np.log(np.maximum(self.tail_weight.sum(axis=1) / (1.0 - q), 1.0))
        tail_q = self.tail_base.max(axis=1) + spread
        queue_q = self.queue_shift + np.log(np.maximum(self.queue_p.max(axis=1) / (1.0 - q), 1.0)) / self.queue_rate
        lo = self.base.min(axis=1)
        top = (self.base + self.span).max(axis=1)
        hi = np.maximum(top + queue_q * (1.0 + self.queue_gain) + self.queue_cap, tail_q) + 1e-12
        _, hi = first_true(lo, hi, lambda t: self.cdf(t) >= q, points=QUANTILE_POINTS, rounds=QUANTILE_ROUNDS)
        return hi


@dataclass(frozen=True)
class Stalls:
    """What stretches a request's decode steps at each rate (rows): prompts arriving at ``rate``
    while it runs, each adding ``stall_s`` (rows, K) of probability ``weights``; ``burstiness``
    the shape of their gaps (1: Poisson; per row where it differs)."""

    rate: Array  # (rows,)
    stall_s: Array  # (rows, K)
    weights: Array  # (K,)
    burstiness: float | Array


@dataclass
class Parts:
    """Latency of the arrivals at each stable rate: the TTFT mixture; TPOT by bin and the e2e
    mixture when asked (the rate search reads only TTFT and a TPOT quantile)."""

    curve: ServiceCurve
    ttft: Mixture
    states: States
    life: tuple[Array, Array]  # mean m, k (rows, 1): life-average batch = mean m + k (m - mean m)
    stalls: Stalls
    prompt: PromptWait
    first: Array  # (bins,) TTFT of an arrival that runs at once, by state
    chain: StepChain
    p_queue: Array  # (rows,)
    queue: tuple[Array, Array, Array, Array]
    gated: Stalls  # the prompts a request meets when it runs in a full replica (``gated_stalls``)

    @cached_property
    def tpot(self) -> Array:
        """(rows, bins) TPOT of an arrival that runs at once."""
        return _life_tpot(self.curve, self.life, self.states.state[None, :] + 1.0, self.stalls)

    @cached_property
    def tpot_wait(self) -> Array:
        """(rows,) TPOT of one that waits for a slot."""
        return _life_tpot(self.curve, self.life, np.full((1, 1), float(self.curve.slots)), self.stalls)[:, 0]

    def tpot_mean(self) -> Array:
        return (self.states.weight * self.tpot).sum(axis=1) + self.states.wait_probability * self.tpot_wait

    @cached_property
    def e2e(self) -> Mixture:
        """Request latency (for means and Little's law): the step in progress at its mean, per state."""
        st, chain, curve = self.states, self.chain, self.curve
        busy = st.state > 0
        o1 = max(curve.output_len - 1.0, 0.0)
        d_mean = (chain.weight * chain.length_s).sum(axis=1)[:, None]
        span = np.where(busy[None, :], d_mean, 0.0)
        base = self.first + o1 * self.tpot + chain.rho[:, None] * span
        q_p = np.where(busy[None, :], self.p_queue[:, None], 0.0)
        tail_base = float(curve.ttft_s[-1]) + o1 * self.tpot_wait
        pw, wm = st.wait_probability, st.wait_mean_s
        return Mixture(
            st.weight, base, span, pw[:, None], tail_base[:, None], wm[:, None], q_p, -chain.rho[:, None] * span,
            *self.queue,
        )  # fmt: skip


def _life_tpot(
    curve: ServiceCurve,
    life: tuple[Array, Array],
    m: Array,
    stalls: Stalls,
    z: float | Array = 0.0,
    spread_len: float | Array | None = None,
) -> Array:
    """TPOT at the life-average batch of an arrival that runs at concurrency m: the closed loop's,
    or where it is longer, the decode-only step stretched by the prompts met during the life with
    their sum at its normal quantile ``z`` (one, or one per column of m), over a life of
    ``spread_len`` output tokens (one, or one per column; None: the first output bin's), at most
    as many as the slots free at m and the completions let in (``gpucap.queueing.promptqueue.stalled_tpot``,
    "Entries"), no longer than the longest step (``ServiceCurve.longest_step_s``): a token a step,
    whatever the prompts. The mean (z = 0) at the mean output length."""
    mean_m, k = life
    n_life = mean_m + k * (m - mean_m) - 1.0
    closed = _at(curve.tpot_s, n_life)
    dec = _at(curve.decode_step_s, n_life)
    mean = np.ndim(z) == 0 and z == 0.0
    stalled = stalled_tpot(
        dec,
        output_len=curve.output_len if mean else (curve.spread_output_len[0] if spread_len is None else spread_len),
        rate=stalls.rate,
        burstiness=stalls.burstiness,
        stall_s=stalls.stall_s,
        weights=stalls.weights,
        z=z,
        entries=None if mean else (np.maximum(curve.slots - m, 0.0), curve.service_rate),
    )
    if curve.decodes_every_step:
        stalled = np.minimum(stalled, _at(curve.longest_step_s, n_life))
    return np.maximum(closed, stalled)


def _at_rows(values: Array, n: Array) -> Array:
    """A per-concurrency table (R, ...) at each row's fractional state n (rows,): (rows, ...),
    linear between the neighbouring whole states (held at the ends)."""
    at = np.clip(np.asarray(n, dtype=float), 0.0, values.shape[0] - 1.0)
    lo = np.floor(at).astype(np.int64)
    hi = np.minimum(lo + 1, values.shape[0] - 1)
    frac = (at - lo).reshape(-1, *([1] * (values.ndim - 1)))
    return values[lo] * (1.0 - frac) + values[hi] * frac


def _prompt_costs_at(curve: ServiceCurve, rate: Array, n: Array) -> tuple[Array, Array, StepChain]:
    """s(I) and q(I) (rows, K) at each rate's mean state n, and the steps (``group_chain``). Each
    step's prompts are the ones the step before gathered (a gated queue); a prompt costs ``s_N(I)`` at the N prompts it shares a
    step with, over the chain of prompts per step (``gpucap.queueing.promptqueue.group_costs``: a
    mixture-of-experts step shares its expert reads, a pipeline fills with pp prompts). The
    budget's queue forms only when steps are full, each then carrying ``G = (M - B) / I`` prompts
    of that length: queued, a prompt holds the budget for its share of such a step,
    ``q(I) = s_G(I) + t_dec I / (M - B)``."""
    dec = _at_rows(curve.decode_step_s, n)
    stall, chain = group_chain(
        np.asarray(rate, dtype=float), dec, _at_rows(curve.per_length_s, n), curve.prompt_weights
    )
    room = _at_rows(curve.room_share, n)  # I / (M - B) = 1 / G
    full = cost_at_size(_at_rows(curve.stall_s, n), 1.0 / np.maximum(room, 1e-300))
    return stall, full + dec[:, None] * room, chain


def _state_groups(st: States, first: Array) -> tuple[Array, Array, Bools]:
    """The states an arrival finds, merged for the TTFT mixture: n = 0 (no step in progress), then
    the running states cut at the cumulative shares ``STATE_GROUP_EDGES`` of their probability;
    each group's probability and its probability-weighted TTFT ``first``. Returns ``(weight,
    first, busy)``, (rows, G) and (G,)."""
    w = st.weight  # (rows, bins), bin 0 is n = 0
    running = w[:, 1:]
    total = np.maximum(running.sum(axis=1, keepdims=True), 1e-300)
    mid = (np.cumsum(running, axis=1) - 0.5 * running) / total  # each state's place in the running share
    group = np.searchsorted(np.asarray(STATE_GROUP_EDGES), mid)
    onehot = group[:, :, None] == np.arange(len(STATE_GROUP_EDGES) + 1)[None, None, :]
    gw = np.einsum("rb,rbg->rg", running, onehot)
    gf = np.einsum("rb,rbg->rg", running * first[None, 1:], onehot) / np.maximum(gw, 1e-300)
    weight = np.concatenate([w[:, :1], gw], axis=1)
    firsts = np.concatenate([np.broadcast_to(first[:1], (w.shape[0], 1)), gf], axis=1)
    busy = np.arange(weight.shape[1]) > 0
    return weight, firsts, busy


def arrival_parts(curve: ServiceCurve, rate: Array, burstiness: float, service_scv: float) -> Parts:
    """The mixtures of ``gpucap.queueing.analytic`` (step 3) for stable rates (rows)."""
    st = state_distribution(curve, rate, burstiness, service_scv)
    lam = np.asarray(rate, dtype=float)[:, None]
    n = st.state
    first = _at(curve.ttft_s, n)  # TTFT at concurrency n + 1
    busy = n > 0  # a step in progress, made of the n present
    mean_n = st.mean_m - 1.0
    stall_s, hold_s, chain = _prompt_costs_at(curve, lam[:, 0], mean_n)
    prompt = prompt_wait(lam[:, 0], burstiness, hold_s, curve.prompt_weights)
    # only an arrival that finds others running can find prompts ahead of it
    others = (st.weight * busy[None, :]).sum(axis=1)
    # (rows where prompts outrun the budget have no steady state: kept finite here, set to inf by
    # the callers from ``prompt.stable``)
    p_queue = np.where(prompt.stable, np.minimum(1.0, prompt.p / np.maximum(others, 1e-300)), 0.0)
    # a prompt that waited W shares its last step with the prompt work that arrived meanwhile,
    # rho W, up to a full step: t(B, M - B) = (M - B) q(I) / I, less its own q(I)
    hold = hold_s @ curve.prompt_weights
    mean_tokens = float(curve.prompt_tokens @ curve.prompt_weights)
    room = np.maximum(curve.budget_tokens - _at(curve.decode_batch, mean_n), 1.0)
    queue = (
        np.where(prompt.stable, prompt.shift_s, 0.0),
        np.where(prompt.stable, prompt.rate, 1.0),
        np.where(prompt.stable, prompt.rho, 0.0),
        np.maximum(room * hold / mean_tokens - hold, 0.0),
    )
    # a life meets the prompts of the others admitted meanwhile: none with one slot, all with many
    stalls = Stalls(lam[:, 0] * (1.0 - 1.0 / curve.slots), stall_s, curve.prompt_weights, burstiness)
    life = (st.mean_m[:, None], st.life_shrink[:, None])
    pw, wm = st.wait_probability, st.wait_mean_s
    # an arrival that waits for a slot: the full batch's TTFT and its own prompt's, after the wait
    # for as many completions as its prompt needs (``ServiceCurve.own_wait_scale``), per length bin
    tail = (
        pw[:, None] * curve.own_weights[None, :],
        np.broadcast_to(float(curve.ttft_s[-1]) + curve.own_extra_s[None, :], (pw.size, curve.own_weights.size)),
        wm[:, None] * curve.own_wait_scale[None, :],
    )
    ttft = _ttft_mixture(curve, st, first, chain, p_queue, queue, tail)
    gated = gated_stalls(stalls, service_scv)
    return Parts(curve, ttft, st, life, stalls, prompt, first, chain, p_queue, queue, gated)


def _ttft_mixture(
    curve: ServiceCurve,
    st: States,
    first: Array,
    chain: StepChain,
    p_queue: Array,
    queue: tuple[Array, Array, Array, Array],
    tail: tuple[Array, Array, Array],
) -> Mixture:
    """TTFT as a mixture over what an arrival finds (``_state_groups``), the step in progress
    (``chain``: it waits for the rest, ``U d``, and its own step carries the ``rho d`` of prompts
    gathered meanwhile) or the budget's queue (probability ``p_queue``, in place of the step), and
    its own prompt's length bin (``own_extra_s``)."""
    rows = first.shape[0] if first.ndim > 1 else st.weight.shape[0]
    gw, gf, gbusy = _state_groups(st, first)
    d = np.where(gbusy[None, :, None], chain.length_s[:, None, :], 0.0)  # (rows, G, P)
    w = gw[:, :, None] * chain.weight[:, None, :]
    base = gf[:, :, None] + chain.rho[:, None, None] * d
    offset = -chain.rho[:, None, None] * d  # the queued branch waits W in place of the step
    qp = np.where(gbusy[None, :, None], p_queue[:, None, None], 0.0) * np.ones_like(d)
    j = curve.own_weights.size
    extra = curve.own_extra_s[None, None, None, :]

    def spread(x: Array) -> Array:
        return np.broadcast_to(x[..., None], (*x.shape, j)).reshape(rows, -1)

    return Mixture(
        (w[..., None] * curve.own_weights[None, None, None, :]).reshape(rows, -1),
        (base[..., None] + extra).reshape(rows, -1),
        spread(d),
        *tail,
        spread(qp),
        spread(offset),
        *queue,
    )


def gated_stalls(stalls: Stalls, service_scv: float) -> Stalls:
    """The prompts a request meets while it runs in a full replica: one enters each time a
    request finishes, so their count over a life of T is a renewal count, variance ``c_s^2``
    times its mean (Cox, Renewal Theory, 1962, section 6.3), not Poisson's; the stalls' sum has
    variance ``mu T (c_s^2 E[s]^2 + Var(s))`` against ``lambda T E[s^2]`` for Poisson arrivals. Taken
    as the Poisson sum with its shape scaled by ``g = (c_s^2 E[s]^2 + Var(s)) / E[s^2]`` (its
    variance g times, its third cumulant g^2 times); ``c_s^2`` is ``service_scv``."""
    w = stalls.weights
    first, second = stalls.stall_s @ w, (stalls.stall_s * stalls.stall_s) @ w
    spread = np.maximum(second - first * first, 0.0)
    g = (service_scv * first * first + spread) / np.maximum(second, 1e-300)
    return Stalls(stalls.rate, stalls.stall_s, w, stalls.burstiness / np.maximum(g, 1e-9))


TPOT_SCORES = np.linspace(-3.0, 3.9, 40)  # normal scores at which each population's TPOT is found
TPOT_LEVELS = ndtr(TPOT_SCORES)
NO_WAIT = 1e-9  # a share of waiting arrivals below this leaves TPOT to those that run at once
TPOT_POINTS, TPOT_ROUNDS = 31, 4  # the mixture's quantile: 32 cuts a round, to 32^-4 of the bracket


def _running_states(st: States, levels: Array) -> Array:
    """(rows, L) the state n at each of ``levels`` of the distribution of n among the arrivals that
    run at once (the state itself among the one-state bins, interpolated between bin centres among
    the log-spaced ones)."""
    w = st.weight / np.maximum(st.weight.sum(axis=1, keepdims=True), 1e-300)
    cum = np.cumsum(w, axis=1)
    mid = cum - 0.5 * w
    a = np.asarray(levels, dtype=float)[None, None, :]
    if mid.shape[1] > 1:
        j = np.clip((mid[:, :, None] < a).sum(axis=1), 1, mid.shape[1] - 1)  # (rows, L)
        m0, m1 = np.take_along_axis(mid, j - 1, axis=1), np.take_along_axis(mid, j, axis=1)
        frac = np.clip((a[0] - m0) / np.maximum(m1 - m0, 1e-300), 0.0, 1.0)
        n_q = st.state[j - 1] + frac * (st.state[j] - st.state[j - 1])
    else:
        n_q = np.full((mid.shape[0], a.shape[2]), st.state[0])
    # where a level falls in a one-state bin (n < EXACT_STATES), it is that state: spreading the
    # mass of n = 0 towards n = 1 would double a light load's P99 TPOT
    k = np.minimum((cum[:, :, None] < a).sum(axis=1), cum.shape[1] - 1)
    return np.where(st.state[k] < EXACT_STATES, st.state[k], n_q)


def _one_population(curve: ServiceCurve, parts: Parts) -> Bools:
    """Rows whose TPOT is one population at one output length: almost none wait (``NO_WAIT``)
    and the outputs are one bin; their quantile is found at its own level (``_alone_quantile``)."""
    alone = parts.states.wait_probability <= NO_WAIT
    return alone if curve.spread_output_len.size == 1 else np.zeros_like(alone)


def _alone_quantile(curve: ServiceCurve, parts: Parts, rows: npt.NDArray[np.intp], q: float) -> Array:
    """q-quantile of TPOT where one population runs at one output length: the level's quantile
    of the concurrency m they run at, through the non-decreasing life TPOT(m), with the prompts
    met during the life at the same level."""
    st = parts.states
    life = (parts.life[0][rows], parts.life[1][rows])
    n_q = _running_states(dataclasses.replace(st, weight=st.weight[rows]), np.array([q]))
    return _life_tpot(curve, life, n_q + 1.0, _rows(parts.stalls, rows), normal_quantile(q))[:, 0]


def tpot_components(curve: ServiceCurve, parts: Parts, rows: npt.NDArray[np.intp]) -> tuple[Array, Array]:
    """TPOT's populations at ``TPOT_LEVELS`` for some rows: ``(values, weights)``, (rows, C, L)
    and (rows, C). Two populations of arrivals by the share that waits for a slot: those that run
    at once (the level's quantile of the concurrency m they run at, through the non-decreasing life
    TPOT(m), with the prompts met during the life at the same level: the high states and the
    bursts of prompts come together), and those that wait, which run in a full replica (m = R)
    whose prompts enter as requests finish (``gated_stalls``); each over the output-length bins
    (``ServiceCurve.spread_output_len``, ``output_weights``): C = 2 J components."""
    st = parts.states
    p = st.wait_probability[rows]
    lens, shares = curve.spread_output_len, curve.output_weights
    j, levels = lens.size, TPOT_LEVELS.size
    life = (parts.life[0][rows], parts.life[1][rows])
    states = _running_states(dataclasses.replace(st, weight=st.weight[rows]), TPOT_LEVELS)
    z, o = np.tile(TPOT_SCORES, j), np.repeat(lens, levels)
    run = _life_tpot(curve, life, np.tile(states + 1.0, (1, j)), _rows(parts.stalls, rows), z, o)
    full = np.full((rows.size, j * levels), float(curve.slots))
    wait = _life_tpot(curve, life, full, _rows(parts.gated, rows), z, o)
    values = np.concatenate([run.reshape(-1, j, levels), wait.reshape(-1, j, levels)], axis=1)
    weights = np.concatenate([(1.0 - p)[:, None] * shares[None, :], p[:, None] * shares[None, :]], axis=1)
    return np.maximum.accumulate(values, axis=2), weights


def mixture_cdf(values: Array, weights: Array, t: Array) -> Array:
    """P(X <= t) of a mixture whose components (rows, C) have the values ``values`` (rows, C, L)
    at ``TPOT_LEVELS`` of their distribution, linear between them, none below the first and all
    above the last; ``t`` (rows,) or (rows, P)."""
    pts = np.asarray(t, dtype=float)
    at = pts[:, :, None, None] if pts.ndim == 2 else pts[:, None, None, None]  # (rows, P, 1, 1)
    v = values[:, None, :, :]  # (rows, 1, C, L)
    count = (v <= at).sum(axis=3)  # (rows, P, C): values at or below t
    top = values.shape[2] - 1
    lo, hi = np.clip(count - 1, 0, top)[..., None], np.clip(count, 0, top)[..., None]
    v0 = np.take_along_axis(v, lo, axis=3)[..., 0]
    v1 = np.take_along_axis(v, hi, axis=3)[..., 0]
    l0, l1 = TPOT_LEVELS[lo[..., 0]], TPOT_LEVELS[hi[..., 0]]
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = np.where(v1 > v0, (at[..., 0] - v0) / (v1 - v0), 0.0)
    level = np.where(count == 0, 0.0, np.where(count > top, 1.0, l0 + np.clip(frac, 0.0, 1.0) * (l1 - l0)))
    out = (level * weights[:, None, :]).sum(axis=2)
    return out if pts.ndim == 2 else out[:, 0]


def tpot_quantile(curve: ServiceCurve, parts: Parts, q: float) -> Array:
    """q-quantile of TPOT over its populations (``tpot_components``): where their mixture's
    distribution reaches q (``mixture_cdf``, linear between the levels), found to ``32^-4`` (1e-6)
    of the bracket between the lowest and highest value; where almost none wait and the outputs
    are one bin, the one population's quantile at q itself (``_alone_quantile``)."""
    p = parts.states.wait_probability
    out = np.empty(p.size)
    one = _one_population(curve, parts)
    alone, rest = np.flatnonzero(one), np.flatnonzero(~one)
    if alone.size:
        out[alone] = _alone_quantile(curve, parts, alone, q)
    if rest.size:
        values, weights = tpot_components(curve, parts, rest)
        finite = np.isfinite(values)
        lo = np.where(finite[:, :, 0], values[:, :, 0], np.inf).min(axis=1) * (1.0 - 1e-9)
        hi = np.where(finite, values, 0.0).max(axis=(1, 2)) * (1.0 + 1e-9)
        # where the finite values hold less than q, the quantile is among the infinite ones
        reached = np.isfinite(lo) & (mixture_cdf(values, weights, hi) >= q)
        lo, hi = np.where(reached, lo, 0.0), np.where(reached, hi, 1.0)
        _, found = first_true(
            lo, hi, lambda t: mixture_cdf(values, weights, t) >= q, points=TPOT_POINTS, rounds=TPOT_ROUNDS
        )
        out[rest] = np.where(reached, found, np.inf)
    return out


def tpot_margin(curve: ServiceCurve, parts: Parts, q: float, slo_s: float) -> Array:
    """How far TPOT's q-quantile is inside ``slo_s`` (>= 0: it meets it; 0 where it is at it):
    ``(P(TPOT <= slo) - q) / (1 - q)`` over the populations, or ``1 - quantile / slo`` where there
    is one (``_one_population``)."""
    p = parts.states.wait_probability
    out = np.empty(p.size)
    one = _one_population(curve, parts)
    alone, rest = np.flatnonzero(one), np.flatnonzero(~one)
    if alone.size:
        out[alone] = 1.0 - _alone_quantile(curve, parts, alone, q) / slo_s
    if rest.size:
        values, weights = tpot_components(curve, parts, rest)
        out[rest] = (mixture_cdf(values, weights, np.full(rest.size, float(slo_s))) - q) / (1.0 - q)
    return out


def _rows(stalls: Stalls, rows: npt.NDArray[np.intp]) -> Stalls:
    """The stalls of some rows."""
    b = stalls.burstiness
    return Stalls(
        stalls.rate[rows], stalls.stall_s[rows], stalls.weights, b if np.ndim(b) == 0 else np.asarray(b)[rows]
    )
