"""The service curve of one replica: the closed loop's figures at every concurrency m = 1..R
and what each prompt length costs the steps it rides in, from which the completion rates
c(m, lambda) and the service rate mu follow (``gpucap.queueing.analytic``'s docstring, step 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt

from gpucap.config import Hardware
from gpucap.physics.attention import prefill_pairs_per_layer
from gpucap.physics.batching import closed_loop
from gpucap.physics.coefficients import Coefficients
from gpucap.physics.requests import Requests
from gpucap.physics.step import Array, step_work
from gpucap.physics.steptime import step_time
from gpucap.queueing.brackets import crossing
from gpucap.queueing.kvfit import held_moments, slot_shares
from gpucap.queueing.lengths import Lengths
from gpucap.queueing.promptqueue import GROUP_SIZES, cost_at_size, group_costs, per_prompt_costs
from gpucap.queueing.scheduler import policy_for

Ints = npt.NDArray[np.int64]

CURVE_POINTS = 64  # concurrencies at which the closed loop is solved; log-interpolated between
# bins of a request's own prompt length in the TTFT mixture: finer towards the tail, which P90
# and P99 read
OWN_EDGES = (0.5, 0.8, 0.95, 0.99)
CHAIN_POINTS = 3  # concurrencies at which the chain of prompts per step is solved (``ServiceCurve.mean_stall_s``)
PROMPT_POINTS = 16  # prompt lengths the budget queue is solved at (quantile bins of the distribution)
OUTPUT_BINS = 8  # output-length bins of TPOT's percentiles (quantile bins; ``_output_bins``)
CHUNK_PIECES = 16  # chunks of a prompt's stall evaluated one by one; beyond, in this many even pieces
SECANT_STEPS = 8  # ServiceCurve.service_rate's secant steps before a bracket search
MAX_PROMPT_SHARE = 1.0 - 1e-6  # the prompts' share of a replica's time, lambda s, kept below 1


@dataclass(frozen=True)
class ServiceCurve:
    """Closed-loop figures of one replica at every concurrency m = 1..R (index m - 1)."""

    slots: int
    output_len: float
    spread_output_len: Array  # (J,) per output bin, the length whose TPOT spreads as the bin's (``_output_bins``)
    output_weights: Array  # (J,) the bins' shares of the requests
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
    decodes_every_step: bool = True  # every step gives each running request a token (``Policy.decodes_with_prompts``)

    def mean_stall_s(self, rate: Array) -> Array:
        """s(lambda, m) (rows, R): the mean time a prompt
        adds to the steps at concurrency m when prompts arrive at ``rate`` (rows,), over the
        prompts a step carries (``gpucap.queueing.promptqueue.group_costs``). Solved at
        ``CHAIN_POINTS`` concurrencies and interpolated in log m between them."""
        lam = np.asarray(rate, dtype=float)
        points = self._chain_points[0]
        return self._between_points(self._point_stalls(np.repeat(lam[:, None], points.size, axis=1)))

    def _point_stalls(self, rate: Array) -> Array:
        """``group_costs`` (rows, points) at the chain's concurrencies (columns), prompts arriving
        at ``rate`` (rows, points): one rate per row and point."""
        at = np.broadcast_to(self._chain_points[0][None, :], rate.shape).reshape(-1)
        return group_costs(rate.reshape(-1), self.decode_step_s[at], self.mean_cost_s[at]).reshape(rate.shape)

    def _between_points(self, by_point: Array) -> Array:
        """(rows, R) from values at the chain's concurrencies (rows, points), linear in log m."""
        _, j, frac = self._chain_points
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
        (rows,): ``m / (TTFT(m) + (O - 1) t_dec(m) / (1 - lambda s(lambda, m)))``
        (``gpucap.queueing.analytic``, step 1); where lengths differ and the KV cache binds, min(m, N) of them run
        (``slot_shares``), ``E[c(min(m, N))]``."""
        lam = np.asarray(rate, dtype=float)
        return self.rates_and_stalls(lam, self.mean_stall_s(lam))

    def rates_and_stalls(self, rate: Array, stall_s: Array) -> Array:
        """``completion_rates`` with the mean stall per prompt ``s(lambda, m)`` (rows, R) given
        (``mean_stall_s``), for a caller that needs the stalls too."""
        lam = np.asarray(rate, dtype=float)[:, None]
        busy = np.minimum(lam * stall_s, MAX_PROMPT_SHARE)
        life = self.ttft_s[None, :] + (self.output_len - 1.0) * self.decode_step_s[None, :] / (1.0 - busy)
        return self._fitting(np.arange(1, self.slots + 1, dtype=float)[None, :] / life)

    def _fitting(self, done: Array) -> Array:
        """Completion rates (rows, R) where the KV cache holds N of the requests at once
        (``slot_shares``): with m in the replica, min(m, N) run, the mean of c over N."""
        if self.slot_shares[-1] >= 1.0:
            return done
        p = self.slot_shares[None, :]
        below = np.concatenate([np.zeros((done.shape[0], 1)), np.cumsum(p * done, axis=1)[:, :-1]], axis=1)
        return np.asarray(below + self.fits_at_least[None, :] * done, dtype=float)

    @cached_property
    def local_rates(self) -> Array:
        """c(m) (R,), requests/s finishing with m running when the prompts that stall them
        enter as fast as the m finish: ``c = m / (TTFT(m) + (O - 1) t_dec(m) / (1 - c s(c, m)))``,
        the smaller root of ``A s c^2 - (A + B + m s) c + m = 0`` (A = TTFT(m), B = (O - 1)
        t_dec(m)) for the stall s, and s at the rate c itself (``mean_stall_s``'s chain of prompts
        per step), solved at its ``CHAIN_POINTS`` concurrencies and interpolated in log m between.

        ``completion_rates`` charges every m the stalls of prompts arriving at the mean rate
        lambda. The replica is at m because of how requests came lately: few in it follow a lull
        in arrivals, and so few prompts stalling the decodes, many follow a burst, with many; in
        between, admissions balance completions. The engine loop's completion rate by state is
        flatter in just that way (8B, 16k prompts at 90% of mu: 0.82 requests/s at 1-5 in the
        replica where the mean-rate model gives 0.47, 1.05 at 19-23 where it gives 1.27;
        benchmarks/README.md). Full (m = R), a waiting prompt enters as a request finishes, so
        c(R) is the service rate mu (within 1e-4 in the tail grid's cases, where the KV cache
        binds too). Where it binds, ``E[c(min(m, N))]`` as there."""
        points = self._chain_points[0]
        m = np.arange(1, self.slots + 1, dtype=float)
        a, b = self.ttft_s, (self.output_len - 1.0) * self.decode_step_s

        def finishing(stall: Array, at: npt.NDArray[np.int64] | slice) -> Array:
            """The smaller root, written to stay exact as s goes to 0 (where it is m / (A + B))."""
            s_, a_, m_ = stall, a[at], m[at]
            half = a_ + b[at] + m_ * s_
            return np.asarray(2.0 * m_ / (half + np.sqrt(np.maximum(half * half - 4.0 * a_ * s_ * m_, 0.0))))

        def beyond(rate: Array) -> Array:
            """``c - c(s(c))`` at each point, rising in c (the stalls grow with it)."""
            return np.asarray(rate - finishing(self._point_stalls(rate[None, :])[0], points))

        top = finishing(np.zeros(points.size), points)  # no stalls: the fastest the m can finish
        fixed = crossing(np.zeros(points.size), top, beyond)
        stall = self._between_points(self._point_stalls(fixed[None, :]))[0]
        return self._fitting(finishing(stall, slice(None))[None, :])[0]

    @cached_property
    def longest_step_s(self) -> Array:
        """(R,) the longest step at each concurrency: the decode-only step and a budget's room
        full of prompt chunks of the length whose chunks cost most, ``t_dec + max_I G s_G(I)``
        with ``G = (M - B) / I`` the prompts a full step carries (``cost_at_size``). Where the
        scheduler takes the running decodes first and fills the rest of the budget with prompt
        chunks (vLLM V1, TensorRT-LLM: ``gpucap.queueing.scheduler``), each step gives every
        running request one token, so no request's TPOT exceeds this; inf where a step of prompts
        holds the decodes back (SGLang's prefill first)."""
        if not self.decodes_every_step:
            return np.full(self.slots, np.inf)
        carried = 1.0 / np.maximum(self.room_share, 1e-300)  # (R, K) prompts of each length a full step carries
        full = cost_at_size(self.stall_s, carried) * carried
        return np.asarray(self.decode_step_s + full.max(axis=1), dtype=float)

    @cached_property
    def stall_spread(self) -> Array:
        """``E[s^2] / E[s]^2`` (R,) over the prompt lengths, of what each adds to a step it rides
        in alone (``stall_s``, one prompt a step): 1 for one length, more the wider they spread."""
        alone = self.stall_s[:, :, 0]
        first, second = alone @ self.prompt_weights, (alone * alone) @ self.prompt_weights
        return np.asarray(second / np.maximum(first * first, 1e-300), dtype=float)

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
        # throughput (exact at once where prompts cost nothing: c constant); false position in the
        # bracket [0, top] where they leave it
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
        return float(crossing(np.array([0.0]), np.array([top]), lambda lam: lam - done(lam))[0])


def service_curve(
    hw: Hardware,
    coef: Coefficients,
    requests: Requests,
    *,
    input_lengths: Lengths | None = None,
    output_lengths: Lengths | None = None,
    kv_slots: float | None = None,
) -> ServiceCurve:
    """``closed_loop`` at up to ``CURVE_POINTS`` concurrencies from 1 to R = floor(max_running)
    (``requests``: the mean lengths and the batch slots, one number each; text, nothing cached),
    interpolated in log m to every whole m (one vectorized call); and at the same points the
    decode-only step and what each prompt length (``input_lengths``, default ``input_len`` for
    every request) costs the token budget and the decodes (``gpucap.queueing.promptqueue``);
    ``output_lengths`` (default ``output_len`` for every request) sets how widely the stalls
    spread TPOT. ``kv_slots``: the requests of mean length the KV cache holds (``memory_limit``);
    with it, how many of the workload's lengths fit at once (``gpucap.queueing.kvfit``); None: R
    always fit."""
    requests.refuse("service_curve", extras=True)
    given = (requests.input_len, requests.output_len, requests.max_running)
    if any(np.ndim(v) for v in given):
        raise ValueError(
            f"service_curve takes one workload: one input_len, output_len and max_running, got {given!r}; "
            "give the lengths' spread as input_lengths and output_lengths"
        )
    input_len, output_len, max_running = (float(v) for v in given)
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
    served = Requests(input_len, output_len, max_running=slots)
    # waits=False: the wait for the step in progress is the model's own (below)
    pt = closed_loop(hw, coef, served, concurrency=grid, waits=False, context_tokens=ctx)
    m = np.arange(1, slots + 1, dtype=float)

    def interp(y: Array) -> Array:
        return np.exp(np.interp(np.log(m), np.log(grid), np.log(y)))

    tokens, weights = _prompt_points(input_lengths, input_len)
    spread_len, spread_weights = _output_bins(output_lengths, output_len)
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
        spread_output_len=spread_len,
        output_weights=spread_weights,
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
        decodes_every_step=policy_for(hw.engine.engine).decodes_with_prompts,
    )


def _service_scv(out: Lengths, own_extra: Array, own_weights: Array, *, ttft_s: float, tpot_s: float) -> float:
    """c_s^2 of the time a request holds its slot when all R are busy, from the lengths:
    ``S = TTFT(R) + e(I) + (O - 1) TPOT(R)``, e(I) its own prompt's extra time to first token
    (``_own_extra``) and O its output, taken independent: ``Var S = Var e + TPOT^2 Var O`` over
    ``E[S]^2``. Fixed lengths give 0 (Allen-Cunneen's constant service), exponential-like
    outputs near 1 (step 2 of ``gpucap.queueing.analytic``)."""
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
        hw, coef, Requests(np.append(lengths, input_len), output_len), concurrency=1.0, waits=False
    ).ttft_s
    return np.asarray(alone[:-1] - alone[-1], dtype=float), w / w.sum(), lengths


def _output_bins(lengths: Lengths | None, mean: float) -> tuple[Array, Array]:
    """The output lengths as ``OUTPUT_BINS`` quantile bins for TPOT's percentiles, which are a
    mixture over them (a short output's TPOT spreads more, so the workload's upper tail is heavier
    than any one length's): each bin's share of the requests and the length O whose TPOT spreads
    as the bin's. The prompts a life meets add a sum whose spread over its O - 1 steps goes as
    ``(O - 1)^-1/2``, so over a bin ``O - 1 = E[(O - 1)^-1/2]^-2``. One bin at ``mean`` for
    fixed lengths."""
    if lengths is None or lengths.is_fixed:
        return np.array([float(mean)]), np.array([1.0])
    values, weights, starts = _quantile_bins(lengths, OUTPUT_BINS)
    share = np.add.reduceat(weights, starts)
    spread = np.add.reduceat(weights * np.maximum(values - 1.0, 1.0) ** -0.5, starts) / share
    return 1.0 + spread**-2, share


def _quantile_bins(lengths: Lengths, bins: int) -> tuple[Array, Array, Ints]:
    """The distribution's values in order, their probabilities, and where each of at most
    ``bins`` quantile bins of them starts (for ``np.add.reduceat``)."""
    values, weights = np.asarray(lengths.values, dtype=float), np.asarray(lengths.weights, dtype=float)
    order = np.argsort(values)
    values, weights = values[order], weights[order] / weights.sum()
    edges = np.searchsorted(np.cumsum(weights), np.linspace(0, 1, bins + 1)[1:-1], side="right")
    return values, weights, np.unique(np.concatenate([[0], np.minimum(edges, values.size - 1)]))


def _prompt_points(lengths: Lengths | None, mean: float) -> tuple[Array, Array]:
    """Prompt lengths and their probabilities: the distribution's values merged into at most
    ``PROMPT_POINTS`` quantile bins (each at its mean length), or the one mean length."""
    if lengths is None or lengths.is_fixed:
        return np.array([float(mean)]), np.array([1.0])
    values, weights, starts = _quantile_bins(lengths, PROMPT_POINTS)
    if values.size <= PROMPT_POINTS:
        return values, weights
    w = np.add.reduceat(weights, starts)
    v = np.add.reduceat(weights * values, starts) / w
    return v, w


def prompt_costs(
    hw: Hardware, coef: Coefficients, decode_batch: Array, context: float, prompt_tokens: Array
) -> tuple[Array, Array, Array]:
    """At each decode batch B (rows) and prompt length I (columns): the decode-only step
    ``t_dec(B)`` (rows,); the time each prompt adds to the steps that carry G of that length,
    ``s_G(I) = (sum_j t_step(B decodes + chunk j) - k t_dec(B)) / G`` (rows, K, G) for G in
    ``GROUP_SIZES`` (a mixture-of-experts step reads the experts once for all its tokens, so s
    falls with G); and ``I / (M - B)`` (rows, K), the prompt's share of a full budget (M =
    ``max_num_batched_tokens``; ``gpucap.queueing.promptqueue``).

    The G prompts' G I tokens go through the budget in ``k = ceil(G I / (M - B))`` steps, each
    with the B decodes beside at most M - B prompt tokens, as the engine loop chunks them
    (``gpucap.queueing.engine.Engine._mixed_step``; vLLM schedules the running decodes first and
    fills the budget with prompt tokens): chunk j takes tokens [a, e) of the prompts one after
    another, with their causal pairs ``P(o_e) - P(o_a) + (p_e - p_a) P(I)`` (``P`` the pairs of
    a prefix, ``prefill_pairs_per_layer``; p and o the prompt and offset a token falls in). Each
    of the k steps also advances every decode by a token, so the prompts are charged what the k
    steps take beyond k decode-only steps; one step carrying them all would charge k - 1 decode
    steps too many.

    Beyond ``CHUNK_PIECES`` chunks (a small budget, or prompts many budgets long) consecutive
    chunks are taken in that many even pieces, each as its chunks at their mean tokens and pairs,
    which keeps the work bounded. A step's time is a sum of maxima of lines in its tokens and
    pairs, so a piece gives at most what its chunks give one by one, the same where they sit on
    one side of every roofline's kink (a 20,000-token prompt in 45 chunks: 0.01% less).

    Under pipeline parallelism a prompt's chunk rides in one micro-batch, which every stage runs
    in turn while the others wait for it: a step that carries chunks of n < pp prompts lasts as
    if it carried ``pp / n`` times their tokens, as the engine loop charges it; pp or more fill
    the pipeline."""
    b = np.asarray(decode_batch, dtype=float)[:, None, None, None]
    i = np.asarray(prompt_tokens, dtype=float)[None, :, None, None]
    g = np.asarray(GROUP_SIZES, dtype=float)[None, None, :, None]
    budget = float(hw.engine.max_num_batched_tokens or 8192)
    dec = np.asarray(step_time(hw, step_work(hw, decode_tokens=b[:, 0, 0, 0], decode_context=context), coef).total_s)
    pp = float(hw.layout.pp)
    room = np.maximum(budget - b, 1.0)  # prompt tokens a step takes beside the decodes
    total = g * i
    chunks = np.ceil(total / room)  # k, per (row, length, group)
    pieces = np.minimum(chunks, CHUNK_PIECES)
    piece = np.arange(min(int(chunks.max()), CHUNK_PIECES), dtype=float)  # last axis
    used = piece < pieces
    first_c = np.floor(piece * chunks / pieces)
    count = np.where(used, np.floor((piece + 1.0) * chunks / pieces) - first_c, 0.0)  # chunks in the piece
    start = np.minimum(first_c * room, total)  # the piece's tokens [a, e) of the G prompts in turn
    end = np.minimum((first_c + count) * room, total)
    first_p, last_p = np.floor(start / i), np.floor(np.maximum(end - 1.0, 0.0) / i)
    end_p = np.floor(end / i)
    pairs = (
        (end_p - first_p) * prefill_pairs_per_layer(hw.spec, i)
        - prefill_pairs_per_layer(hw.spec, start - first_p * i)
        + prefill_pairs_per_layer(hw.spec, end - end_p * i)
    )
    per_chunk = np.maximum(count, 1.0)
    prompts = np.maximum((last_p - first_p + 1.0) / per_chunk, 1.0)  # prompts a chunk carries
    spread = pp / np.minimum(pp, prompts)  # micro-batches' worth of tokens charged
    tokens = np.where(used, (end - start) / per_chunk * spread, 0.0)
    work = step_work(
        hw,
        decode_tokens=b,
        decode_context=context,
        prefill_tokens=tokens,
        prefill_pairs=np.where(used, pairs / per_chunk, 0.0) * spread,
    )
    steps = count * np.asarray(step_time(hw, work, coef).total_s, dtype=float)
    extra = steps.sum(axis=-1) - chunks[..., 0] * dec[:, None, None]
    stall = np.maximum(extra, 0.0) / g[..., 0]
    room_share = np.broadcast_to(i[:, :, 0, 0] / room[:, :, 0, 0], stall.shape[:2])
    return np.asarray(dec, dtype=float), stall, np.ascontiguousarray(room_share)
