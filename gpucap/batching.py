"""Continuous batching in steady state (DESIGN.md section 5): TTFT, TPOT and throughput of one
replica as functions of concurrency (closed loop), of request rate (open loop), and for the
finite "send N prompts at once" runs that publish maximum throughput.

Every function takes numpy arrays for the load and solves all of them in one vectorized call.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .engine import Coefficients
from .memory import ArrayLike
from .step import Array, Hardware, StepTime, prefill_pairs_per_layer, step_time, step_work

FIXED_POINT_ITERATIONS = 200
DRAIN_NODES = 16
OPEN_LOOP_GRID = 96  # concurrencies per rate, log-spaced up to max_running
OPEN_LOOP_LOWEST = 1e-3
LENGTH_DISTRIBUTIONS = ("fixed", "uniform", "dataset")


@dataclass(frozen=True)
class LoadPoint:
    """Steady state of one replica at a load. Times in seconds, rates per second."""

    concurrency: Array  # requests in the system (running + waiting)
    running: Array  # requests holding a batch slot
    decode_batch: Array  # sequences decoding in a step, on average
    ttft_s: Array
    tpot_s: Array
    requests_per_s: Array
    output_tokens_per_s: Array
    decode_step: StepTime  # the average step a decoding sequence waits for
    prefill_step: StepTime  # a step carrying a new request's prefill chunk


def _steps(hw: Hardware, coef: Coefficients, *, batch: Array, context: Array, prefill: Array, pairs: Array) -> StepTime:
    work = step_work(hw, decode_tokens=batch, decode_context=context, prefill_tokens=prefill, prefill_pairs=pairs)
    return step_time(hw, work, coef)


def _frontend_rate(coef: Coefficients) -> float:
    """Requests/s the serving front end can pass: ``1 / t_request_s`` (no limit at 0)."""
    return 1.0 / coef.t_request_s if coef.t_request_s > 0 else np.inf


def closed_loop(
    hw: Hardware,
    coef: Coefficients,
    *,
    concurrency: ArrayLike,
    input_len: ArrayLike,
    output_len: ArrayLike,
    max_running: ArrayLike = np.inf,
) -> LoadPoint:
    """Steady state with ``concurrency`` requests always in the system (each finished request is
    replaced at once, as ``vllm bench serve --max-concurrency`` does).

    ``R = min(C, max_running)`` requests run; the rest wait. With a prefill of I tokens in
    ``s = ceil(I / (M - B))`` chunk steps (M = max_num_batched_tokens, B decoding sequences) and
    X requests/s, Little's law and the step roofline give the fixed point

        TPOT = t_step(B decode + P prompt tokens),  P = min(X I TPOT, M - B),
        TTFT_run = s x t_step(B + I / s) + t_request,
        X = min(R / (TTFT_run + (O - 1) TPOT), (M - B) / (I TPOT), 1 / t_request),
        B = X (O - 1) TPOT,

    and TTFT = max(TTFT_run, R / X - (O - 1) TPOT) + (C - R) / X: the prefill and the request's
    own pass through the front end (or the queue for prompt-token budget or the front end), and
    the wait for a slot. Output tokens/s = X x O.
    """
    c = np.asarray(concurrency, dtype=float)
    i = np.asarray(input_len, dtype=float)
    o = np.asarray(output_len, dtype=float)
    c, i, o = np.broadcast_arrays(c, i, o)
    r = np.minimum(c, max_running)
    m = float(hw.engine.max_num_batched_tokens or 8192)
    ctx = i + o / 2.0
    pairs_one = prefill_pairs_per_layer(hw.spec, i)
    decoding = np.maximum(o - 1.0, 0.0)
    b = r * decoding / (decoding + 1.0)
    tpot = _steps(hw, coef, batch=b, context=ctx, prefill=0.0 * b, pairs=0.0 * b).total_s
    for _ in range(FIXED_POINT_ITERATIONS):
        budget = np.maximum(m - b, 1.0)  # prompt tokens a step takes beside the decodes
        chunks = np.maximum(1.0, np.ceil(i / budget))
        pre = _steps(hw, coef, batch=b, context=ctx, prefill=i / chunks, pairs=pairs_one / chunks)
        ttft_run = chunks * pre.total_s + coef.t_request_s  # its prefill and its pass through the front end
        # the loop's rate at the current TPOT, capped by the prompt tokens the steps can take and
        # by the front end; the prompt tokens each step then carries
        x = np.minimum(r / (ttft_run + decoding * tpot), budget / (i * tpot))
        x = np.minimum(x, _frontend_rate(coef))
        prompt = np.minimum(x * i * tpot, budget)
        dec = _steps(hw, coef, batch=b, context=ctx, prefill=prompt, pairs=pairs_one * prompt / i)
        b_new, tpot_new = x * decoding * dec.total_s, dec.total_s
        converged = np.all(np.abs(b_new - b) <= 1e-7 * np.maximum(b, 1.0)) and np.all(
            np.abs(tpot_new - tpot) <= 1e-7 * tpot
        )
        b, tpot = 0.5 * b + 0.5 * b_new, 0.5 * tpot + 0.5 * tpot_new
        if converged:
            break
    x = np.minimum(
        np.minimum(r / (ttft_run + decoding * dec.total_s), budget / (i * dec.total_s)), _frontend_rate(coef)
    )
    # time a running request spends before its first token: its prefill, or longer when the
    # front end admits requests more slowly than the engine would finish them
    ttft_run = np.maximum(ttft_run, r / x - decoding * dec.total_s)
    wait = (c - r) / x
    return LoadPoint(
        concurrency=c,
        running=r,
        decode_batch=b,
        ttft_s=ttft_run + wait,
        tpot_s=dec.total_s,
        requests_per_s=x,
        output_tokens_per_s=x * o,
        decode_step=dec,
        prefill_step=pre,
    )


def static_batch(
    hw: Hardware, coef: Coefficients, *, batch: ArrayLike, input_len: ArrayLike, output_len: ArrayLike
) -> LoadPoint:
    """One batch of B requests run to the end together (static batching, e.g. trtllm-bench
    ``--concurrency`` runs reported per batch): the whole prefill in chunks of M tokens, then
    O - 1 decode steps at batch B with mean context I + O / 2.

    TTFT = ceil(B I / M) x t_step(M prefill tokens); TPOT = t_step(B decode);
    throughput = B O / (TTFT + (O - 1) TPOT).
    """
    bb, i, o = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (batch, input_len, output_len)))
    m = float(hw.engine.max_num_batched_tokens or 8192)
    total_prefill = bb * i
    chunks = np.maximum(1.0, np.ceil(total_prefill / m))
    pairs = bb * prefill_pairs_per_layer(hw.spec, i)
    zero = 0.0 * bb
    pre = _steps(hw, coef, batch=zero, context=i, prefill=total_prefill / chunks, pairs=pairs / chunks)
    dec = _steps(hw, coef, batch=bb, context=i + o / 2.0, prefill=zero, pairs=zero)
    ttft = chunks * pre.total_s
    duration = ttft + np.maximum(o - 1.0, 0.0) * dec.total_s
    x = bb / duration
    return LoadPoint(
        concurrency=bb,
        running=bb,
        decode_batch=bb,
        ttft_s=ttft,
        tpot_s=dec.total_s,
        requests_per_s=x,
        output_tokens_per_s=x * o,
        decode_step=dec,
        prefill_step=pre,
    )


def _decode_steps_s(hw: Hardware, coef: Coefficients, *, batch: Array, context: Array) -> Array:
    zero = 0.0 * batch
    return _steps(hw, coef, batch=batch, context=context, prefill=zero, pairs=zero).total_s


def drain_time(
    hw: Hardware,
    coef: Coefficients,
    *,
    batch: Array,
    input_len: Array,
    output_len: Array,
    lengths: str,
    staggered: bool,
) -> Array:
    """Seconds to finish ``batch`` running requests when no new request arrives.

    fixed lengths, all started together (one wave): ``(O - 1) x t_step(B)``.
    fixed lengths, staggered (end of a steady state): remaining outputs are uniform on [0, O], so
    the batch shrinks linearly: ``O x mean_u t_step(B (1 - u))``.
    uniform lengths on [0, 2 O] (``--random-range-ratio 0``): the same linear shrink over 2 O
    steps, started together or staggered alike.
    dataset lengths, taken as exponential with mean O (ShareGPT-like long tail; memoryless, so the
    same whether staggered or not): the batch after k steps is ``B exp(-k / O)``, and
    ``sum_k t_step(B e^{-k/O}) = O x integral_1^B t_step(b) / b db``.
    """
    b = np.maximum(batch, 1.0)
    ctx = input_len + output_len / 2.0
    if lengths == "fixed" and not staggered:
        return np.maximum(output_len - 1.0, 0.0) * _decode_steps_s(hw, coef, batch=b, context=ctx)
    nodes = (np.arange(DRAIN_NODES) + 0.5) / DRAIN_NODES  # midpoint rule on [0, 1]
    if lengths in ("fixed", "uniform"):
        span = output_len if lengths == "fixed" else 2.0 * output_len
        t = _decode_steps_s(hw, coef, batch=np.maximum(b[..., None] * (1.0 - nodes), 1.0), context=ctx[..., None])
        return span * t.mean(axis=-1)
    log_b = np.log(b)
    t = _decode_steps_s(hw, coef, batch=np.exp(log_b[..., None] * nodes), context=ctx[..., None])
    return output_len * log_b * t.mean(axis=-1)


def saturation_run(
    hw: Hardware,
    coef: Coefficients,
    *,
    num_prompts: ArrayLike,
    input_len: ArrayLike,
    output_len: ArrayLike,
    max_running: ArrayLike,
    lengths: str = "fixed",
) -> LoadPoint:
    """N prompts sent at once to one replica ("max throughput" runs), throughput = N O / duration.

    The run the benchmark makes: R = min(N, max_running) requests start with a prefill burst of
    R x I tokens; while requests wait, the engine runs R in steady state (each finished request
    replaced, throughput X_ss), which admits the other N - R in ``(N - R) / X_ss``; then the last
    R drain (``drain_time``). With ``lengths="dataset"`` the output lengths are taken as
    exponential with mean O, so the drain is the long tail where a few long requests run alone;
    ``"uniform"`` takes them uniform on [0, 2 O].

        duration = burst(R I) + (N - R) / X_ss + drain(R)

    Reported TTFT is then mostly queueing: the mean wait ``(N - R) / (2 X_ss)`` plus the prefill.
    """
    if lengths not in LENGTH_DISTRIBUTIONS:
        raise ValueError(f"lengths must be one of {', '.join(LENGTH_DISTRIBUTIONS)}, got {lengths!r}")
    n, i, o, cap = np.broadcast_arrays(
        *(np.asarray(v, dtype=float) for v in (num_prompts, input_len, output_len, max_running))
    )
    running = np.maximum(np.minimum(n, cap), 1.0)
    steady = closed_loop(hw, coef, concurrency=running, input_len=i, output_len=o)
    burst = static_batch(hw, coef, batch=running, input_len=i, output_len=1.0 + 0.0 * o)
    waiting = np.maximum(n - running, 0.0)
    with np.errstate(invalid="ignore"):
        admit = np.where(waiting > 0, waiting / steady.requests_per_s, 0.0)
    kw = dict(batch=running, input_len=i, output_len=o, lengths=lengths)
    drain = np.where(
        waiting > 0, drain_time(hw, coef, staggered=True, **kw), drain_time(hw, coef, staggered=False, **kw)
    )
    with np.errstate(invalid="ignore"):
        duration = np.maximum(burst.ttft_s + admit + drain, n / _frontend_rate(coef))
    finite = np.isfinite(n)
    tput = np.where(finite, n * o / np.where(finite, duration, 1.0), steady.output_tokens_per_s)
    x = tput / o
    queue_wait = waiting / (2.0 * steady.requests_per_s)
    return LoadPoint(
        concurrency=n,
        running=running,
        decode_batch=steady.decode_batch,
        ttft_s=np.where(waiting > 0, steady.ttft_s + queue_wait, burst.ttft_s / 2.0),
        tpot_s=steady.tpot_s,
        requests_per_s=x,
        output_tokens_per_s=tput,
        decode_step=steady.decode_step,
        prefill_step=steady.prefill_step,
    )


def open_loop(
    hw: Hardware,
    coef: Coefficients,
    *,
    request_rate: ArrayLike,
    input_len: ArrayLike,
    output_len: ArrayLike,
    max_running: ArrayLike,
) -> LoadPoint:
    """Mean steady state under arrivals at ``request_rate`` requests/s (Poisson in the benchmark).

    By Little's law the mean number in the system C satisfies X(C) = lambda; X rises with C, so
    C is interpolated (in log C) from the closed-loop model on a grid of concurrencies. At or
    above the service rate (the most X reaches up to max_running) the queue grows without bound:
    TTFT is infinite and throughput is the service rate. (Means only; the tail under Poisson
    arrivals needs a queueing model.)
    """
    lam, i, o, cap = np.broadcast_arrays(
        *(np.asarray(v, dtype=float) for v in (request_rate, input_len, output_len, max_running))
    )
    full = closed_loop(hw, coef, concurrency=cap, input_len=i, output_len=o)
    # X(C) on a log grid of concurrencies for every rate at once, then interpolate C(lambda)
    frac = np.geomspace(OPEN_LOOP_LOWEST / OPEN_LOOP_GRID, 1.0, OPEN_LOOP_GRID)
    grid_c = np.maximum(cap[..., None] * frac, OPEN_LOOP_LOWEST)
    grid_x = closed_loop(hw, coef, concurrency=grid_c, input_len=i[..., None], output_len=o[..., None]).requests_per_s
    # X(C) can dip where the prompt-token budget starts to bind; a rate is carried by the smallest
    # concurrency that reaches it, so use the running maximum
    grid_x = np.maximum.accumulate(grid_x, axis=-1)
    flat_x, flat_c = grid_x.reshape(-1, OPEN_LOOP_GRID), np.log(grid_c).reshape(-1, OPEN_LOOP_GRID)
    flat_lam = lam.reshape(-1)
    log_c = np.array([np.interp(flat_lam[k], flat_x[k], flat_c[k]) for k in range(flat_lam.size)])
    point = closed_loop(hw, coef, concurrency=np.exp(log_c).reshape(lam.shape), input_len=i, output_len=o)
    service = np.maximum(grid_x[..., -1], full.requests_per_s)
    overloaded = lam >= service
    x = np.where(overloaded, service, lam)
    return LoadPoint(
        concurrency=np.where(overloaded, np.inf, point.concurrency),
        running=np.where(overloaded, cap, point.running),
        decode_batch=np.where(overloaded, full.decode_batch, point.decode_batch),
        ttft_s=np.where(overloaded, np.inf, point.ttft_s),
        tpot_s=np.where(overloaded, full.tpot_s, point.tpot_s),
        requests_per_s=x,
        output_tokens_per_s=x * o,
        decode_step=point.decode_step,
        prefill_step=point.prefill_step,
    )
