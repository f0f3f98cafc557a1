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
   section 3.3), mu(n) = c(n, lambda) above. For gamma arrivals the chain is taken in its
   diffusion form (Kobayashi, JACM 21, 1974): drift ``lambda - mu(n)``, variance ``c_a^2 lambda +
   c_d^2 mu(n)``, so that
   ``ln pi(n) - ln pi(n-1) = ln(lambda / mu(n)) (lambda + mu(n)) / (c_a^2 lambda + c_d^2 mu(n))``.
   Departures repeat the arrival pattern (each request enters at once and leaves about one
   sojourn later, as in an infinite-server queue), ``c_d^2 = c_a^2``, and the exponent is
   ``burstiness``: ``pi(n) ~ prod_k (lambda / mu(k)) ** burstiness``. Above R the prompts no
   longer come at lambda: a waiting request is admitted, and its prompt prefilled, only when one
   running finishes, so the full replica completes at the rate where prompts enter as fast as
   requests leave, the service rate ``mu = c(R, mu)`` (below), not at ``mu(R) = c(R, lambda)``,
   which counts the prompts at the lower arrival rate and so overstates how fast a queue drains.
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
     the decode-only step stretched by the prompts met during the life (``stalled_tpot``). The
     requests it found leave, about evenly, while new ones arrive, so the life average of the
     batch is ``(m + mean m) / 2`` plus the arrivals' noise; its variance is ``Var(m) / 4 + c_a^2
     mean(m) / 3`` (the arrival count of a window of length T, ``lambda T = mean m``, integrated
     over the window). So ``m_life = mean m + k (m - mean m)`` with ``k^2 = 1/4 + c_a^2 mean m /
     (3 Var m)``, at most 1.
   - e2e = TTFT + (O - 1) TPOT.

Percentiles come from these mixtures: a grid search on the mixture CDF for TTFT and e2e
(``gpucap.queueing.brackets``); for TPOT the quantile of m (interpolated between states) carried
through the non-decreasing TPOT(m), with the stalls at the same quantile. The prompt lengths' distribution enters through the budget's queue,
the steps and the stalls (``input_lengths``), the output lengths' through how widely the stalls
spread TPOT (``output_lengths``). Agreement with the step-level simulation on a grid of models,
lengths, splits and loads: ``gpucap.planning.tailcheck``, ``benchmarks/tailgrid.py``. TTFT and
TPOT of the closed loop are made non-decreasing in m (running maximum). The front end's own queue
(``t_request_s`` each, serially) is left out: ``lambda t_request`` is small where a replica's
engine saturates first.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt

from gpucap.config import Hardware
from gpucap.physics.attention import prefill_pairs_per_layer
from gpucap.physics.batching import closed_loop
from gpucap.physics.coefficients import Coefficients
from gpucap.physics.memory import ArrayLike
from gpucap.physics.step import Array, step_time, step_work
from gpucap.queueing.benchstats import sample_stats
from gpucap.queueing.brackets import first_true
from gpucap.queueing.kvfit import held_moments, slot_shares
from gpucap.queueing.lengths import Lengths
from gpucap.queueing.promptqueue import (
    GROUP_SIZES,
    PromptWait,
    StepChain,
    cost_at_size,
    group_chain,
    group_costs,
    normal_quantile,
    per_prompt_costs,
    prompt_wait,
    stalled_tpot,
)
from gpucap.types import QUANTILES, STATISTICS

Bools = npt.NDArray[np.bool_]
Ints = npt.NDArray[np.int64]

CURVE_POINTS = 64  # concurrencies at which the closed loop is solved; log-interpolated between
EXACT_STATES = 48  # states kept one by one; above, merged into log-spaced bins
STATE_BINS = 64  # bins above EXACT_STATES
QUANTILE_POINTS = 63  # points a round of the quantile search
QUANTILE_ROUNDS = 4  # rounds: the quantile to 64^-4 (6e-8) of its first bracket
RATE_GRID = 16  # utilizations tried by max_request_rate: this many log-spaced up to 1/2, as many above
RATE_REFINE = 12  # points per even cut of the bracket between the last pass and the first miss
RATE_PRECISION = 625  # the bracket is refined to 1/625 of the first (two even cuts of 24 points)...
RATE_TOLERANCE = 1e-3  # ... or to 0.1% of the rate, whichever is wider
# bins of a request's own prompt length in the TTFT mixture: finer towards the tail, which P90
# and P99 read
OWN_EDGES = (0.5, 0.8, 0.95, 0.99)
STATE_GROUP_EDGES = (0.5, 0.8, 0.95, 0.99)  # running states merged for the TTFT mixture, by probability
CHAIN_POINTS = 3  # concurrencies at which the chain of prompts per step is solved (``ServiceCurve.mean_stall_s``)
PROMPT_POINTS = 16  # prompt lengths the budget queue is solved at (quantile bins of the distribution)
LOWEST_UTILIZATION = 1e-6
HIGHEST_UTILIZATION = 1.0 - 1e-4
SECANT_STEPS = 8  # ServiceCurve.service_rate's secant steps before a bracket search
MAX_PROMPT_SHARE = 1.0 - 1e-6  # the prompts' share of a replica's time, lambda s, kept below 1


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
    spread_output_len: float  # the output length whose stalls spread as the workload's do (``_spread_length``)
    requests_per_s: Array  # X(m), the closed loop's throughput
    ttft_s: Array  # non-decreasing in m
    tpot_s: Array  # non-decreasing in m
    decode_step_s: Array  # a decode-only step of the closed loop's decode batch
    decode_batch: Array  # that batch
    comm_share: Array  # the link's share of a decode step
    budget_tokens: float  # max_num_batched_tokens
    prompt_tokens: Array  # (K,) prompt lengths of the workload
    prompt_weights: Array  # (K,) their probabilities
    stall_s: Array  # (R, K, G) time each prompt adds to a step that carries G of its length, s_G(I)
    room_share: Array  # (R, K) the prompt's tokens over the budget's room, I / (M - B)
    own_extra_s: Array  # (J,) TTFT alone of a prompt of each length bin over the mean prompt's
    own_weights: Array  # (J,) their probabilities
    slot_shares: Array  # (R,) P(N = k) requests fit in the KV cache at once, k = 1..R (``gpucap.queueing.kvfit``)
    own_tokens: Array  # (J,) the mean prompt of each of those bins
    own_wait_scale: Array  # (J,) completions a waiting prompt of each length bin waits for (``_own_wait_scale``)
    service_scv: float = 0.0  # c_s^2 of the time a request holds a slot when all are busy (``_service_scv``)

    def mean_stall_s(self, rate: Array) -> Array:
        """s(lambda, m) (rows, R): the mean time a prompt
        adds to the steps at concurrency m when prompts arrive at ``rate`` (rows,), over the
        prompts a step carries (``gpucap.queueing.promptqueue.group_costs``). Solved at
        ``CHAIN_POINTS`` concurrencies and interpolated in log m between them."""
        lam = np.asarray(rate, dtype=float)
        points, j, frac = self._chain_points
        at = np.tile(points, lam.size)
        costs = group_costs(np.repeat(lam, points.size), self.decode_step_s[at], self.mean_cost_s[at])
        by_point = costs.reshape(lam.size, points.size)
        return by_point[:, j] * (1.0 - frac) + by_point[:, j + 1] * frac

    @cached_property
    def _chain_points(self) -> tuple[Ints, Ints, Array]:
        """``mean_stall_s``'s concurrencies (indices m - 1) and, for every m, the pair of them it
        sits between in log m and how far along."""
        points = np.unique(np.round(np.geomspace(1, self.slots, min(CHAIN_POINTS, self.slots)))).astype(np.int64) - 1
        if points.size == 1:
            return np.array([0, 0]), np.zeros(self.slots, dtype=np.int64), np.zeros(self.slots)
        m = np.log(np.arange(1, self.slots + 1, dtype=float))
        grid = np.log(points + 1.0)
        j = np.clip(np.searchsorted(grid, m, side="right") - 1, 0, points.size - 2)
        return points, j, np.clip((m - grid[j]) / (grid[j + 1] - grid[j]), 0.0, 1.0)

    @cached_property
    def per_length_s(self) -> Array:
        """s_n(I) (R, K, N): ``stall_s`` at n = 0..GROUP_STATES-1 prompts a step
        (``gpucap.queueing.promptqueue.per_prompt_costs``)."""
        return per_prompt_costs(self.stall_s)

    @cached_property
    def mean_cost_s(self) -> Array:
        """s_n (R, N): ``per_length_s`` averaged over the prompt lengths."""
        return np.einsum("mkn,k->mn", self.per_length_s, self.prompt_weights)

    def completion_rates(self, rate: Array) -> Array:
        """c(m, lambda) (rows, R), requests/s finishing with m running under arrivals at ``rate``
        (rows,): ``m / (TTFT(m) + (O - 1) t_dec(m) / (1 - lambda s(lambda, m)))`` (module
        docstring, step 1); where lengths differ and the KV cache binds, min(m, N) of them run
        (``slot_shares``), ``E[c(min(m, N))]``."""
        lam = np.asarray(rate, dtype=float)[:, None]
        busy = np.minimum(lam * self.mean_stall_s(lam[:, 0]), MAX_PROMPT_SHARE)
        life = self.ttft_s[None, :] + (self.output_len - 1.0) * self.decode_step_s[None, :] / (1.0 - busy)
        done = np.arange(1, self.slots + 1, dtype=float)[None, :] / life
        if self.slot_shares[-1] >= 1.0:
            return done
        # with m in the replica, min(m, N) run: the mean of c over the requests that fit, N
        p = self.slot_shares[None, :]
        below = np.concatenate([np.zeros((done.shape[0], 1)), np.cumsum(p * done, axis=1)[:, :-1]], axis=1)
        return below + self.fits_at_least[None, :] * done

    @cached_property
    def fits_at_least(self) -> Array:
        """P(N >= m) (R,), m = 1..R: the KV cache holds at least m of the requests at once."""
        return np.cumsum(self.slot_shares[::-1])[::-1]

    @cached_property
    def service_rate(self) -> float:
        """mu, the largest request rate the replica carries: the lambda with ``lambda = c(R,
        lambda)`` (every slot busy, arrivals as fast as completions)."""
        top = self.slots / (self.ttft_s[-1] + (self.output_len - 1.0) * self.decode_step_s[-1])

        def done(lam: Array) -> Array:
            """c(R, lambda) at each of ``lam``."""
            return self.completion_rates(lam)[:, -1]

        # secant steps on g = lambda - c(R, lambda), increasing in lambda, from the closed loop's
        # throughput (exact at once where prompts cost nothing: c constant); a bracket search
        # where they do not settle within the bracket [0, top]
        x = np.array([self.requests_per_s[-1], 0.98 * self.requests_per_s[-1]])
        g = x - done(x)
        for _ in range(SECANT_STEPS):
            if g[1] == g[0]:
                break
            nxt = x[1] - g[1] * (x[1] - x[0]) / (g[1] - g[0])
            if not 0.0 < nxt <= top:
                break
            x, g = np.array([x[1], nxt]), np.array([g[1], nxt - done(np.array([nxt]))[0]])
            if abs(x[1] - x[0]) <= 1e-10 * x[1]:
                return float(x[1])
        lo, hi = first_true(np.array([0.0]), np.array([top]), lambda lam: lam >= done(lam[0])[None, :], rounds=3)
        return float(0.5 * (lo[0] + hi[0]))


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
    hw: Hardware,
    coef: Coefficients,
    *,
    input_len: float,
    output_len: float,
    max_running: float,
    input_lengths: Lengths | None = None,
    output_lengths: Lengths | None = None,
    kv_slots: float | None = None,
) -> ServiceCurve:
    """``closed_loop`` at up to ``CURVE_POINTS`` concurrencies from 1 to R = floor(max_running),
    interpolated in log m to every whole m (one vectorized call); and at the same points the
    decode-only step and what each prompt length (``input_lengths``, default ``input_len`` for
    every request) costs the token budget and the decodes (``gpucap.queueing.promptqueue``);
    ``output_lengths`` (default ``output_len`` for every request) sets how widely the stalls
    spread TPOT. ``kv_slots``: the requests of mean length the KV cache holds (``memory_limit``);
    with it, how many of the workload's lengths fit at once (``gpucap.queueing.kvfit``); None: R
    always fit."""
    for name, v in (("input_len", input_len), ("output_len", output_len)):
        if not (np.isfinite(v) and v >= 1):
            raise ValueError(f"{name} must be a number of tokens >= 1, got {v!r}")
    if not (np.isfinite(max_running) and max_running >= 1):
        raise ValueError(f"max_running must be a finite number of batch slots >= 1, got {max_running!r}")
    slots = int(np.floor(max_running))
    grid = np.unique(np.round(np.geomspace(1.0, slots, min(CURVE_POINTS, slots))))
    inp = input_lengths if input_lengths is not None else Lengths.fixed(input_len)
    out = output_lengths if output_lengths is not None else Lengths.fixed(output_len)
    ctx, held_sd = held_moments(inp, out)  # the running requests' mean context: length-biased
    pt = closed_loop(
        hw, coef, concurrency=grid, input_len=input_len, output_len=output_len, max_running=slots, waits=False,
        context_tokens=ctx,
    )  # the wait for the step in progress is the model's own (below)  # fmt: skip
    m = np.arange(1, slots + 1, dtype=float)

    def interp(y: Array) -> Array:
        return np.exp(np.interp(np.log(m), np.log(grid), np.log(y)))

    tokens, weights = _prompt_points(input_lengths, input_len)
    own_extra, own_weights, own_tokens = _own_extra(hw, coef, tokens, weights, input_len, output_len)
    decode_s, stall, room = prompt_costs(hw, coef, pt.decode_batch, ctx, tokens)

    def interp_cols(y: Array) -> Array:
        """``interp`` of each column (any trailing shape)."""
        flat = y.reshape(y.shape[0], -1)
        cols = [interp(np.maximum(flat[:, k], 1e-300)) for k in range(flat.shape[1])]
        return np.stack(cols, axis=1).reshape((m.size, *y.shape[1:]))

    return ServiceCurve(
        slots=slots,
        output_len=float(output_len),
        spread_output_len=_spread_length(output_lengths, output_len),
        requests_per_s=interp(pt.requests_per_s),
        ttft_s=np.maximum.accumulate(interp(pt.ttft_s)),
        tpot_s=np.maximum.accumulate(interp(pt.tpot_s)),
        decode_step_s=interp(decode_s),
        decode_batch=interp(np.maximum(pt.decode_batch, 1e-300)),
        comm_share=np.interp(np.log(m), np.log(grid), pt.decode_step.comm_share),
        budget_tokens=float(hw.engine.max_num_batched_tokens or 8192),
        prompt_tokens=tokens,
        prompt_weights=weights,
        stall_s=interp_cols(stall),
        room_share=interp_cols(room),
        own_extra_s=own_extra,
        own_weights=own_weights,
        slot_shares=_slot_shares(slots, kv_slots, input_len + output_len, ctx, held_sd),
        own_tokens=own_tokens,
        own_wait_scale=_own_wait_scale(
            own_tokens, slots, kv_slots, input_len + output_len, float(hw.engine.max_num_batched_tokens or 8192)
        ),
        service_scv=_service_scv(out, own_extra, own_weights, ttft_s=float(pt.ttft_s[-1]), tpot_s=float(pt.tpot_s[-1])),
    )


def _service_scv(out: Lengths, own_extra: Array, own_weights: Array, *, ttft_s: float, tpot_s: float) -> float:
    """c_s^2 of the time a request holds its slot when all R are busy, from the lengths:
    ``S = TTFT(R) + e(I) + (O - 1) TPOT(R)``, e(I) its own prompt's extra time to first token
    (``_own_extra``) and O its output, taken independent: ``Var S = Var e + TPOT^2 Var O`` over
    ``E[S]^2``. Fixed lengths give 0 (Allen-Cunneen's constant service), exponential-like
    outputs near 1 (step 2 of the module docstring)."""
    mean_o, var_o = out.moment(1), out.moment(2) - out.moment(1) ** 2
    mean_e, var_e = (
        float(own_weights @ own_extra),
        float(own_weights @ (own_extra * own_extra)) - float(own_weights @ own_extra) ** 2,
    )
    mean_s = ttft_s + mean_e + max(mean_o - 1.0, 0.0) * tpot_s
    if not mean_s > 0:
        return 0.0
    return float(max(var_e, 0.0) + tpot_s**2 * max(var_o, 0.0)) / mean_s**2


def _own_wait_scale(tokens: Array, slots: int, kv_slots: float | None, length: float, budget: float) -> Array:
    """Completions a prompt of each length waits for once the replica is full: one where the
    batch slots bind (any completion frees a slot); where the KV cache binds, enough to free
    its first chunk, ``max(1, min(I, M) / (I_mean + O_mean))`` (a completion frees a mean
    request's tokens; vLLM admits a prompt with room for its first chunk of at most M tokens)."""
    if kv_slots is None or kv_slots > slots + 1.0:
        return np.ones(tokens.size)
    return np.maximum(1.0, np.minimum(tokens, budget) / length)


def _slot_shares(slots: int, kv_slots: float | None, length: float, held_mean: float, held_sd: float) -> Array:
    """``ServiceCurve.slot_shares``: all R fit without ``kv_slots``; else ``kvfit.slot_shares``
    on ``kv_slots`` x ``length`` (I + O) tokens of context."""
    hard = np.zeros(slots)
    hard[-1] = 1.0
    if kv_slots is None:
        return hard
    if not (np.isfinite(kv_slots) and kv_slots > 0):
        raise ValueError(f"kv_slots must be a positive number of requests, got {kv_slots!r}")
    return slot_shares(float(kv_slots) * length, slots, held_mean, held_sd)


def _own_extra(
    hw: Hardware, coef: Coefficients, tokens: Array, weights: Array, input_len: float, output_len: float
) -> tuple[Array, Array, Array]:
    """``(extra, weights, lengths)``: a request's own prefill beyond the mean prompt's: ``TTFT(I) - TTFT(I_mean)`` alone on the
    replica (``closed_loop`` at concurrency 1), over bins of the prompt lengths cut at the
    quantiles ``OWN_EDGES`` (each at its mean length); (0,), (1,) for one length. The queueing model
    runs at the mean lengths; the slowest first tokens are the longest prompts' own."""
    if tokens.size == 1:
        return np.zeros(1), np.ones(1), np.array([float(input_len)])
    edges = np.searchsorted(np.cumsum(weights), np.asarray(OWN_EDGES) - 1e-12, side="right")
    starts = np.unique(np.concatenate([[0], np.minimum(edges, tokens.size - 1)]))
    w = np.add.reduceat(weights, starts)
    lengths = np.add.reduceat(weights * tokens, starts) / w
    alone = closed_loop(
        hw, coef, concurrency=1.0, input_len=np.append(lengths, input_len), output_len=output_len, waits=False
    ).ttft_s
    return np.asarray(alone[:-1] - alone[-1], dtype=float), w / w.sum(), lengths


def _spread_length(lengths: Lengths | None, mean: float) -> float:
    """The output length O whose TPOT spreads as the workload's: the prompts a life meets add
    a sum whose spread over the life's O - 1 steps goes as ``(O - 1)^-1/2``, so over a mix of
    lengths ``O - 1 = E[(O - 1)^-1/2]^-2``."""
    if lengths is None or lengths.is_fixed:
        return float(mean)
    d = np.maximum(np.asarray(lengths.values, dtype=float) - 1.0, 1.0)
    w = np.asarray(lengths.weights, dtype=float)
    return float(1.0 + (w @ d**-0.5 / w.sum()) ** -2)


def _prompt_points(lengths: Lengths | None, mean: float) -> tuple[Array, Array]:
    """Prompt lengths and their probabilities: the distribution's values merged into at most
    ``PROMPT_POINTS`` quantile bins (each at its mean length), or the one mean length."""
    if lengths is None or lengths.is_fixed:
        return np.array([float(mean)]), np.array([1.0])
    values, weights = np.asarray(lengths.values, dtype=float), np.asarray(lengths.weights, dtype=float)
    order = np.argsort(values)
    values, weights = values[order], weights[order] / weights.sum()
    if values.size <= PROMPT_POINTS:
        return values, weights
    edges = np.searchsorted(np.cumsum(weights), np.linspace(0, 1, PROMPT_POINTS + 1)[1:-1], side="right")
    starts = np.unique(np.concatenate([[0], edges]))
    w = np.add.reduceat(weights, starts)
    v = np.add.reduceat(weights * values, starts) / w
    return v, w


def prompt_costs(
    hw: Hardware, coef: Coefficients, decode_batch: Array, context: float, prompt_tokens: Array
) -> tuple[Array, Array, Array]:
    """At each decode batch B (rows) and prompt length I (columns): the decode-only step
    ``t_dec(B)`` (rows,); the time each prompt adds to a step that carries G of that length,
    ``s_G(I) = (t_step(B decodes + G I prompt tokens with their causal pairs) - t_dec(B)) / G``
    (rows, K, G) for G in ``GROUP_SIZES`` (a mixture-of-experts step reads the experts once
    for all its tokens, so s falls with G); and ``I / (M - B)`` (rows, K), the prompt's share of a
    full budget (M = ``max_num_batched_tokens``; ``gpucap.queueing.promptqueue``).

    Under pipeline parallelism a prompt's chunk rides in one micro-batch, which every stage runs
    in turn while the others wait for it: a step that carries G < pp prompts lasts as if it
    carried ``pp / G`` times their tokens, as the engine loop charges it
    (``gpucap.queueing.engine.Engine._mixed_step``); pp or more fill the pipeline."""
    b = np.asarray(decode_batch, dtype=float)[:, None, None]
    i = np.asarray(prompt_tokens, dtype=float)[None, :, None]
    g = np.asarray(GROUP_SIZES, dtype=float)[None, None, :]
    budget = float(hw.engine.max_num_batched_tokens or 8192)
    dec = np.asarray(step_time(hw, step_work(hw, decode_tokens=b[:, 0, 0], decode_context=context), coef).total_s)
    pp = float(hw.layout.pp)
    charged = g * pp / np.minimum(pp, g)  # prompts' worth of tokens the step is charged
    pairs = prefill_pairs_per_layer(hw.spec, i)
    work = step_work(
        hw, decode_tokens=b, decode_context=context, prefill_tokens=charged * i, prefill_pairs=charged * pairs
    )
    mixed = np.asarray(step_time(hw, work, coef).total_s, dtype=float)
    stall = np.maximum(mixed - dec[:, None, None], 0.0) / g
    room = np.broadcast_to(i[:, :, 0] / np.maximum(budget - b[:, :, 0], 1.0), stall.shape[:2])
    return np.asarray(dec, dtype=float), stall, np.ascontiguousarray(room)


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


@functools.lru_cache(maxsize=256)
def _bins(slots: int) -> Ints:
    """Left edges of the state bins over n = 0..R-1: one per state up to EXACT_STATES, then log."""
    if slots <= EXACT_STATES + STATE_BINS:
        return np.arange(slots, dtype=np.int64)
    log_edges = np.unique(np.round(np.geomspace(EXACT_STATES, slots, STATE_BINS + 1)[:-1]))
    return np.concatenate([np.arange(EXACT_STATES), log_edges]).astype(np.int64)


def state_distribution(curve: ServiceCurve, rate: Array, burstiness: float, service_scv: float) -> _States:
    """The chain of the module docstring (steps 1 and 2) for every stable rate (rows)."""
    lam = np.maximum(np.asarray(rate, dtype=float), 1e-300)[:, None]
    done = curve.completion_rates(lam[:, 0])  # (rows, R): c(k, lambda), k = 1..R
    log_ratio = np.log(lam) - np.log(done)  # ln(lambda / c(k))
    log_pi = np.concatenate([np.zeros((lam.shape[0], 1)), np.cumsum(burstiness * log_ratio, axis=1)], axis=1)
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
class _Stalls:
    """What stretches a request's decode steps at each rate (rows): prompts arriving at ``rate``
    while it runs, each adding ``stall_s`` (rows, K) of probability ``weights``."""

    rate: Array  # (rows,)
    stall_s: Array  # (rows, K)
    weights: Array  # (K,)
    burstiness: float


@dataclass
class _Parts:
    """Latency of the arrivals at each stable rate: the TTFT mixture; TPOT by bin and the e2e
    mixture when asked (the rate search reads only TTFT and a TPOT quantile)."""

    curve: ServiceCurve
    ttft: _Mixture
    states: _States
    life: tuple[Array, Array]  # mean m, k (rows, 1): life-average batch = mean m + k (m - mean m)
    stalls: _Stalls
    prompt: PromptWait
    first: Array  # (bins,) TTFT of an arrival that runs at once, by state
    chain: StepChain
    p_queue: Array  # (rows,)
    queue: tuple[Array, Array, Array, Array]

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
    def e2e(self) -> _Mixture:
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
        return _Mixture(
            st.weight, base, span, pw[:, None], tail_base[:, None], wm[:, None], q_p, -chain.rho[:, None] * span,
            *self.queue,
        )  # fmt: skip


def _life_tpot(curve: ServiceCurve, life: tuple[Array, Array], m: Array, stalls: _Stalls, z: float = 0.0) -> Array:
    """TPOT at the life-average batch of an arrival that runs at concurrency m: the closed loop's,
    or where it is longer, the decode-only step stretched by the prompts met during the life with
    their sum at its normal quantile ``z`` (``gpucap.queueing.promptqueue.stalled_tpot``)."""
    mean_m, k = life
    n_life = mean_m + k * (m - mean_m) - 1.0
    closed = _at(curve.tpot_s, n_life)
    dec = _at(curve.decode_step_s, n_life)
    stalled = stalled_tpot(
        dec,
        output_len=curve.output_len if z == 0.0 else curve.spread_output_len,
        rate=stalls.rate,
        burstiness=stalls.burstiness,
        stall_s=stalls.stall_s,
        weights=stalls.weights,
        z=z,
    )
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


def _state_groups(st: _States, first: Array) -> tuple[Array, Array, Bools]:
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


def _parts(curve: ServiceCurve, rate: Array, burstiness: float, service_scv: float) -> _Parts:
    """The mixtures of the module docstring (step 3) for stable rates (rows)."""
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
    stalls = _Stalls(lam[:, 0] * (1.0 - 1.0 / curve.slots), stall_s, curve.prompt_weights, burstiness)
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
    return _Parts(curve, ttft, st, life, stalls, prompt, first, chain, p_queue, queue)


def _ttft_mixture(
    curve: ServiceCurve,
    st: _States,
    first: Array,
    chain: StepChain,
    p_queue: Array,
    queue: tuple[Array, Array, Array, Array],
    tail: tuple[Array, Array, Array],
) -> _Mixture:
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

    return _Mixture(
        (w[..., None] * curve.own_weights[None, None, None, :]).reshape(rows, -1),
        (base[..., None] + extra).reshape(rows, -1),
        spread(d),
        *tail,
        spread(qp),
        spread(offset),
        *queue,
    )


def _tpot_quantile(curve: ServiceCurve, parts: _Parts, q: float) -> Array:
    """q-quantile of TPOT: the q-quantile of the concurrency m an arrival runs at (R for waiting
    ones; the state itself among the one-state bins, interpolated between bin centres among the
    log-spaced ones) through the non-decreasing life TPOT(m), with the prompts met during the
    life at their q-quantile."""
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
    return _life_tpot(curve, parts.life, m_q[:, None], parts.stalls, normal_quantile(q))[:, 0]


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
    hw: Hardware,
    coef: Coefficients,
    *,
    request_rate: ArrayLike,
    input_len: float,
    output_len: float,
    max_running: float,
    burstiness: float = 1.0,
    service_scv: float | None = None,
    stats: tuple[str, ...] = STATISTICS,
    curve: ServiceCurve | None = None,
    input_lengths: Lengths | None = None,
    output_lengths: Lengths | None = None,
) -> QueueLatency:
    """Mean and P50/P95/P99 TTFT, TPOT and e2e of one replica at each ``request_rate`` (requests/s,
    any shape), for Poisson (``burstiness`` 1) or gamma arrivals; the model is in the module
    docstring.

    ``max_running``: batch slots (the smaller of the engine's ``max_num_seqs`` and the requests
    the KV cache holds). ``service_scv``: squared coefficient of variation of the time a request
    holds a slot when all are busy; 0 for fixed input and output lengths, about 1 for
    exponential-like output lengths; None: the curve's, from the lengths (``_service_scv``).
    ``stats``: only these statistics (the others are absent from the result). ``curve``: the replica's ``service_curve`` when already computed for these
    inputs (the planner reuses the one ``max_request_rate`` made). ``input_lengths``: the prompt
    lengths' distribution (mean ``input_len``) for the queue for the token budget;
    ``output_lengths`` (mean ``output_len``) for the spread of TPOT; default every request of the
    mean lengths.
    """
    lam = _check_rate(request_rate)
    b = check_burstiness(burstiness)
    scv = None if service_scv is None else _check_scv(service_scv)
    unknown = [s for s in stats if s not in STATISTICS]
    if unknown:
        raise ValueError(f"stats must be among {', '.join(STATISTICS)}, got {unknown}")
    if curve is None:
        curve = service_curve(
            hw, coef, input_len=input_len, output_len=output_len, max_running=max_running,
            input_lengths=input_lengths, output_lengths=output_lengths,
        )  # fmt: skip
    return _latency(curve, lam, b, curve.service_scv if scv is None else scv, stats=tuple(stats))


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
    service_scv: float | None = None,
    curve: ServiceCurve | None = None,
    input_lengths: Lengths | None = None,
    output_lengths: Lengths | None = None,
) -> float:
    """Largest request rate (requests/s) of one replica whose ``stat`` TTFT and TPOT meet the SLOs
    given; 0.0 when even a trickle misses them.

    The statistics rise with the rate, so the rate is searched on utilizations from 1e-6 to
    1 - 1e-4 (log-spaced in rho below 1/2 and in 1 - rho above), then refined between the last
    rate that met the SLOs and the first that missed, in even cuts of 24 until the bracket is 1/625
    of the first or 0.1% of the rate. The rate returned is one that was evaluated and met them, below the limit
    by at most that (the first bracket is at most 77% of the rate below rho = 1/2 and 30% of 1 - rho
    above: 0.12% of the rate at worst).
    """
    if stat not in STATISTICS:
        raise ValueError(f"stat must be one of {', '.join(STATISTICS)}, got {stat!r}")
    if ttft_slo_s is None and tpot_slo_s is None:
        raise ValueError("give ttft_slo_s, tpot_slo_s or both")
    for name, v in (("ttft_slo_s", ttft_slo_s), ("tpot_slo_s", tpot_slo_s)):
        if v is not None and not v > 0:
            raise ValueError(f"{name} must be a positive number of seconds, got {v!r}")
    b = check_burstiness(burstiness)
    given = None if service_scv is None else _check_scv(service_scv)
    if curve is None:
        curve = service_curve(
            hw, coef, input_len=input_len, output_len=output_len, max_running=max_running,
            input_lengths=input_lengths, output_lengths=output_lengths,
        )  # fmt: skip
    scv = curve.service_scv if given is None else given

    def margin(rates: Array) -> Array:
        """How far each rate is inside the SLOs (>= 0: it meets them; -1 where unstable): the least
        of ``(CDF(SLO) - q) / (1 - q)`` for a TTFT percentile (a percentile is within its SLO when
        the CDF at the SLO reaches the percentile's level) and ``1 - figure / SLO`` otherwise."""
        parts = _parts(curve, rates, b, scv)
        out = np.full(rates.shape, np.inf)
        q = QUANTILES.get(stat, 0.0)
        if ttft_slo_s is not None:
            if stat == "mean":
                out = np.minimum(out, 1.0 - parts.ttft.mean() / ttft_slo_s)
            else:
                out = np.minimum(out, (parts.ttft.cdf(np.full(rates.shape, float(ttft_slo_s))) - q) / (1.0 - q))
        if tpot_slo_s is not None:
            tpot = parts.tpot_mean() if stat == "mean" else _tpot_quantile(curve, parts, q)
            out = np.minimum(out, 1.0 - tpot / tpot_slo_s)
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
    while hi - lo > width:
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
