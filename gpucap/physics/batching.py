"""Continuous batching in steady state (DESIGN.md section 5): TTFT, TPOT and throughput of one
replica as functions of concurrency (closed loop), of request rate (open loop), and for the
finite "send N prompts at once" runs that publish maximum throughput.

Every function takes what the replica serves as one ``Requests`` (``gpucap.physics.requests``:
lengths, prefix-cached tokens, batch slots, extras) and numpy arrays for the load, and solves all
of them in one vectorized call.

The requests' ``extras`` (``gpucap.physics.extras.Extras``) change every function the same way, and
leave all results unchanged when absent (``NO_EXTRAS``):

- ``images`` (``gpucap.config.Images``): each request's images add their tokens to the prompt
  (``I = text tokens + images x tokens per image``) and their encoder work to the step that
  schedules the request's prefill; in the closed loop that is ``a x images x encoder work`` per
  step, affine in the arrivals per step ``a`` like the prompt tokens.
- ``speculative`` (``gpucap.physics.speculative.Speculative``): a decode step keeps ``tau`` tokens per
  sequence, so a request decodes in ``(O - 1) / tau`` steps, ``B = a (O - 1) / tau`` sequences
  decode at a time, each puts ``k + 1`` tokens through the step (and through the prompt-token
  budget M), and ``TPOT = t_step / tau``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from gpucap.config import Hardware
from gpucap.physics.coefficients import Coefficients, front_end
from gpucap.physics.extras import NO_EXTRAS, Extras
from gpucap.physics.memory import ArrayLike
from gpucap.physics.requests import Requests
from gpucap.physics.solvers import ClosedLoad, Solution, closed_load, front_end_s, solve, step_times, terms
from gpucap.physics.step import Array, StepTime
from gpucap.physics.steptime import combine

OPEN_LOOP_GRID = 96  # concurrencies per rate, log-spaced up to max_running
OPEN_LOOP_LOWEST = 1e-3
# How prompt tokens share steps with decodes: "apart" runs each prompt chunk in its own step
# beside the decodes, as a scheduler does with whole chunks (gpucap.physics.steady, "Prompt steps
# apart"; checked against the step-level simulation, benchmarks/README.md); "spread" puts the
# average prompt tokens into every step. "auto" is apart, or spread under pipeline parallelism
# (micro-batches interleave prompt and decode steps, which apart does not model).
PROMPT_STEPS = ("auto", "spread", "apart")
# Elements ``closed_loop`` solves in one pass. Larger inputs are solved block by block: every
# element is independent, and the solver's temporaries (six step terms per element) then stay
# small enough for the allocator to reuse instead of mapping fresh pages for each (on this
# machine 1,000,000 elements at once ran at 0.69x the rate of 128,000).
CLOSED_LOOP_BLOCK = 1 << 15


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
    step_wait_s: Array | float = 0.0  # of TTFT: the rest of the step in progress at arrival


def take(point: LoadPoint, index: int | slice) -> LoadPoint:
    """The part of a vectorized ``point`` at ``index`` (an int gives scalars)."""

    def part(v: Any) -> Any:
        if isinstance(v, StepTime):
            return StepTime(**{f.name: part(getattr(v, f.name)) for f in dataclasses.fields(v)})
        return v[index] if isinstance(v, np.ndarray) and v.ndim else v

    return LoadPoint(**{f.name: part(getattr(point, f.name)) for f in dataclasses.fields(point)})


def step_at(
    hw: Hardware,
    coef: Coefficients,
    *,
    batch: Array,
    context: Array,
    prefill: Array,
    pairs: Array,
    ex: Extras = NO_EXTRAS,
    images: ArrayLike = 0.0,
) -> StepTime:
    """The step with ``batch`` decoding sequences at mean ``context``, ``prefill`` prompt tokens
    with ``pairs`` prefill pairs per layer, and ``images`` encoded."""
    return combine(hw, terms(hw, coef, batch, context, prefill, pairs, ex, images))


def frontend_latency_s(hw: Hardware, coef: Coefficients) -> float:
    """What the front end adds to a request's TTFT when it is alone: its latency and its own
    serial time, ``t_frontend_s + t_request_s`` (zero offline)."""
    fe = front_end(hw.engine, coef)
    return fe.latency_s + fe.serial_s


def closed_loop(
    hw: Hardware,
    coef: Coefficients,
    requests: Requests,
    *,
    concurrency: ArrayLike,
    prompt_steps: str = "auto",
    waits: bool = True,
    context_tokens: ArrayLike | None = None,
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
    the wait for a slot. Output tokens/s = X x O. Solved in closed form on the linear pieces of
    the step time (``gpucap.physics.steady``), with the chunk count ``s`` updated once from the solution
    (``gpucap.physics.solvers.solve_dense``; a mixture-of-experts model on tangents of its concave
    expert traffic, ``solve_moe``).
    ``prompt_steps="apart"`` runs each prompt chunk in its own step beside the decodes instead of
    spreading the average prompt tokens over every step: TPOT is then ``(1 - u) t_decode + u
    t_prompt`` with ``u = a s`` chunks per step (``gpucap.physics.steady``), longer where decode steps
    are memory-bound and prompt steps compute-bound.
    ``waits``: a request that arrives while others run also waits for the step in progress, and
    for the front end's core shared with the others passing it (``TTFT_run`` then holds both,
    solved once without them and again with them); off for callers that add their own (the
    open-loop queueing model, ``gpucap.queueing.analytic``).
    Under pipeline parallelism one request's chunk passes the pp stages in one micro-batch, so
    pp does not shorten a lone prompt's TTFT (it raises throughput by keeping pp micro-batches
    of different requests in flight).

    With ``extras.images`` the prompt is ``I = input_len + images x tokens per image`` and the step that
    schedules a prefill also encodes its images (``n`` per request: ``a n`` per average step,
    ``n / s`` per chunk step). With ``extras.speculative`` (k drafts, tau tokens kept per step) a request
    decodes in ``D = (O - 1) / tau`` steps: read ``D`` for ``O - 1`` above (``B = X D t_step``),
    the decode tokens in the budget are ``(k + 1) B``, and ``TPOT = t_step / tau``.

    ``cached_tokens`` h of each prompt are in the prefix cache (a shared system prompt, earlier
    turns): the prefill computes the other ``I - h`` tokens (at least one: the engine recomputes
    the last token of a full hit) and their attention pairs over the whole prompt,
    ``P(I) - P(h)`` (``prefill_pairs_per_layer``); I above reads ``I - h`` for the prompt work
    and I for the context every token attends to.

    ``context_tokens``: the mean context a decoding token attends to (prompt included, images
    not), ``I + O / 2`` by default. Where lengths differ, the running requests are the long-lived
    ones more often: ``E[I] + E[O^2] / (2 E[O])`` (``gpucap.queueing.kvfit.held_moments``).

    More than ``CLOSED_LOOP_BLOCK`` elements are solved block by block, with the same answers.
    """
    apart = _prompt_steps_apart(hw, prompt_steps)
    context = np.nan if context_tokens is None else context_tokens
    c, held, i, o, cap, h = requests.arrays(concurrency, context)
    shape = c.shape
    if c.size > CLOSED_LOOP_BLOCK:  # in blocks: see CLOSED_LOOP_BLOCK
        c, held, i, o, cap, h = (np.ravel(v) for v in (c, held, i, o, cap, h))
        parts = []
        for k in range(0, c.size, CLOSED_LOOP_BLOCK):
            s = slice(k, k + CLOSED_LOOP_BLOCK)
            block = dataclasses.replace(
                requests, input_len=i[s], output_len=o[s], max_running=cap[s], cached_tokens=h[s]
            )
            ctx = None if context_tokens is None else held[s]
            point = closed_loop(
                hw, coef, block, concurrency=c[s], prompt_steps=prompt_steps, waits=waits, context_tokens=ctx
            )
            parts.append(point)
        return _joined(parts, shape)
    load = closed_load(hw, coef, requests, concurrency=concurrency, context_tokens=context_tokens)
    lead_s = frontend_latency_s(hw, coef)
    r = load.running
    # a request that arrives while others run (probability 1 - 1/R) waits for the step in progress
    # before its prefill, and the front end's core is shared with the others passing it: solve once
    # with the front end alone, then again with both, so that Little's law holds with the TTFT
    # reported
    busy = np.where(r > 1.0, 1.0 - 1.0 / np.maximum(r, 1.0), 0.0)
    # (the first solve, which only sizes the two waits, averages prompt tokens over the steps: the
    # cheap form; the second runs them apart where asked)
    latency = np.full_like(r, lead_s)
    start = None  # the first solve's a, where the second's linear pieces are tried first
    if waits:
        first = solve(load, latency, False)
        start = first.a
        _, dec_first, rest = step_times(load, first, apart, lead_s)
        latency = front_end_s(load, first.a, dec_first, rest, busy) + busy * np.ravel(rest)
    sol = solve(load, latency, apart, start)
    pre_step, dec_step, _ = step_times(load, sol, apart, lead_s)
    return _load_point(load, sol, latency, lead_s, pre_step, dec_step)


def _joined(parts: list[LoadPoint], shape: tuple[int, ...]) -> LoadPoint:
    """The load points of consecutive blocks of flattened elements as one of ``shape``."""
    sizes = [p.running.shape for p in parts]

    def join(values: list[Any]) -> Any:
        if isinstance(values[0], StepTime):
            fields = dataclasses.fields(StepTime)
            return StepTime(**{f.name: join([getattr(v, f.name) for v in values]) for f in fields})
        flat = [np.broadcast_to(v, size) for v, size in zip(values, sizes, strict=True)]
        return np.concatenate(flat).reshape(shape)

    return LoadPoint(**{f.name: join([getattr(p, f.name) for p in parts]) for f in dataclasses.fields(LoadPoint)})


def _prompt_steps_apart(hw: Hardware, prompt_steps: str) -> bool:
    """Whether prompt chunks run in steps of their own (``PROMPT_STEPS``): "auto" is apart, or
    spread under pipeline parallelism, which apart does not model."""
    if prompt_steps not in PROMPT_STEPS:
        raise ValueError(f"prompt_steps must be one of {', '.join(PROMPT_STEPS)}, got {prompt_steps!r}")
    if prompt_steps == "auto":
        prompt_steps = "spread" if hw.layout.pp > 1 else "apart"
    apart = prompt_steps == "apart"
    if apart and hw.layout.pp > 1:
        raise ValueError(
            "prompt_steps='apart' is not modelled with pipeline parallelism (pp > 1): micro-batches "
            "interleave prompt and decode steps; use the default 'spread'"
        )
    return apart


def _load_point(
    load: ClosedLoad, sol: Solution, latency: Array, lead_s: float, pre_step: StepTime, dec_step: StepTime
) -> LoadPoint:
    """The closed loop's steady state at the solution: ``X = a / t_step``, ``TPOT = t_step / tau``,
    ``TTFT = max(s t_prefill + latency, R / X - D t_step) + (C - R) / X``: the time a running
    request spends before its first token, its prefill after the front end and the step in
    progress, or longer when the front end or the prompt-token budget admits requests more slowly
    than they finish; then the wait for a slot. ``latency``: the front end and the step wait
    before a prefill; ``lead_s``: the front end alone, so the step wait is their difference."""
    c, r, o, a, decoding, chunks, latency = (
        v.reshape(load.shape)
        for v in (load.concurrency, load.running, load.output, sol.a, load.decoding, sol.chunks, latency)
    )
    t_step = dec_step.total_s
    x = a / t_step
    with np.errstate(divide="ignore", invalid="ignore"):
        own = chunks * pre_step.total_s + latency
        queued = r / x - decoding * t_step
        ttft_run = np.maximum(own, queued)
        wait = np.where(c > r, (c - r) / x, 0.0)
    step_wait = np.where(own >= queued, latency - lead_s, 0.0)
    return LoadPoint(
        concurrency=c,
        running=r,
        decode_batch=a * decoding,
        step_wait_s=step_wait,
        ttft_s=ttft_run + wait,
        tpot_s=t_step / load.ex.tokens_per_step,
        requests_per_s=x,
        output_tokens_per_s=x * o,
        decode_step=dec_step,
        prefill_step=pre_step,
    )


def open_loop(hw: Hardware, coef: Coefficients, requests: Requests, *, request_rate: ArrayLike) -> LoadPoint:
    """Mean steady state under arrivals at ``request_rate`` requests/s (Poisson in the benchmark).

    By Little's law the mean number in the system C satisfies X(C) = lambda; X rises with C, so
    C is interpolated (in log C) from the closed-loop model on a grid of concurrencies. At or
    above the service rate (the most X reaches up to max_running) the queue grows without bound:
    TTFT is infinite and throughput is the service rate. (Means only; the tail under Poisson
    arrivals needs a queueing model.) The requests' cached tokens and extras count as in
    ``closed_loop``; their ``max_running`` must be finite.
    """
    lam, i, o, cap, h = requests.arrays(request_rate)
    if not np.all(np.isfinite(cap)):
        raise ValueError(
            f"open_loop needs a finite Requests.max_running (the batch slots; got {requests.max_running!r}): "
            "the service rate is the throughput with every slot full"
        )
    loop = partial(closed_loop, hw, coef)
    # every rate's own lengths, and no cap: the concurrencies below stay within max_running
    flat = dataclasses.replace(requests, input_len=i, output_len=o, max_running=np.inf, cached_tokens=h)
    full = loop(flat, concurrency=cap)
    # X(C) on a log grid of concurrencies for every rate at once, then interpolate C(lambda)
    frac = np.geomspace(OPEN_LOOP_LOWEST / OPEN_LOOP_GRID, 1.0, OPEN_LOOP_GRID)
    grid_c = np.maximum(cap[..., None] * frac, OPEN_LOOP_LOWEST)
    on_grid = dataclasses.replace(flat, input_len=i[..., None], output_len=o[..., None], cached_tokens=h[..., None])
    grid = loop(on_grid, concurrency=grid_c)
    grid_x = grid.requests_per_s
    # X(C) can dip where the prompt-token budget starts to bind; a rate is carried by the smallest
    # concurrency that reaches it, so use the running maximum
    grid_x = np.maximum.accumulate(grid_x, axis=-1)
    flat_x, flat_c = grid_x.reshape(-1, OPEN_LOOP_GRID), np.log(grid_c).reshape(-1, OPEN_LOOP_GRID)
    flat_lam = lam.reshape(-1)
    log_c = np.array([np.interp(flat_lam[k], flat_x[k], flat_c[k]) for k in range(flat_lam.size)])
    point = loop(flat, concurrency=np.exp(log_c).reshape(lam.shape))
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
