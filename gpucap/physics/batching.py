"""Continuous batching in steady state (DESIGN.md section 5): TTFT, TPOT and throughput of one
replica as functions of concurrency (closed loop), of request rate (open loop), and for the
finite "send N prompts at once" runs that publish maximum throughput.

Every function takes numpy arrays for the load and solves all of them in one vectorized call.

Two optional inputs change every function the same way, and leave all results unchanged when
absent:

- ``images`` (``gpucap.physics.vision.Images``): each request's images add their tokens to the prompt
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
import numpy.typing as npt

from gpucap.config import Hardware, Images
from gpucap.physics.coefficients import Coefficients, front_end
from gpucap.physics.memory import ArrayLike, serves_images
from gpucap.physics.speculative import Speculative
from gpucap.physics.steady import Lines, closed_loop_root, lines_through, rate_cap_root, separated_root
from gpucap.physics.step import Array, StepTime, combine, prefill_pairs_per_layer, step_terms, step_work
from gpucap.physics.vision import image_work

DENSE_PASSES = 2  # the second pass takes the chunk count at the first solution
MOE_PASSES = 4  # Newton passes on the concave expert traffic (converged to 1e-11 in tests)
OPEN_LOOP_GRID = 96  # concurrencies per rate, log-spaced up to max_running
OPEN_LOOP_LOWEST = 1e-3
# How prompt tokens share steps with decodes: "apart" runs each prompt chunk in its own step
# beside the decodes, as a scheduler does with whole chunks (gpucap.physics.steady, "Prompt steps
# apart"; checked against the step-level simulation, benchmarks/README.md); "spread" puts the
# average prompt tokens into every step. "auto" is apart, or spread under pipeline parallelism
# (micro-batches interleave prompt and decode steps, which apart does not model).
PROMPT_STEPS = ("auto", "spread", "apart")
Select = slice | npt.NDArray[np.intp]  # all elements, or some by index


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


@dataclass(frozen=True)
class Extras:
    """The optional work of a load: each request's images and speculative decoding."""

    images: Images | None = None
    speculative: Speculative | None = None

    @property
    def images_per_request(self) -> float:
        return self.images.per_request if self.images else 0.0

    @property
    def tokens_per_step(self) -> float:
        """Output tokens a decoding sequence gains per step: ``tau`` (1 without speculation)."""
        return float(self.speculative.acceptance_length) if self.speculative else 1.0

    @property
    def tokens_per_sequence(self) -> int:
        """Tokens a decoding sequence puts through a step: ``k + 1`` (1 without speculation)."""
        return self.speculative.verify_tokens if self.speculative else 1

    def image_tokens(self, hw: Hardware) -> float:
        """Prompt tokens a request's images add: ``images x tokens per image``."""
        if not serves_images(hw.spec, self.images):
            return 0.0
        assert self.images is not None and hw.spec.vision is not None
        return self.images.per_request * image_work(hw.spec.vision, self.images).tokens


NO_EXTRAS = Extras()


def _steps(
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
    return combine(hw, _terms(hw, coef, batch, context, prefill, pairs, ex, images))


def _terms(
    hw: Hardware,
    coef: Coefficients,
    b: ArrayLike,
    ctx: Array,
    p: ArrayLike,
    q: ArrayLike,
    ex: Extras = NO_EXTRAS,
    images: ArrayLike = 0.0,
) -> Array:
    work = step_work(
        hw,
        decode_tokens=b,
        decode_context=ctx,
        prefill_tokens=p,
        prefill_pairs=q,
        images=images,
        image=ex.images,
        speculative=ex.speculative,
    )
    return step_terms(hw, work, coef)


def _prefill_terms(
    hw: Hardware,
    coef: Coefficients,
    decoding: Array,
    ctx: Array,
    chunk: Array,
    chunk_pairs: Array,
    a: Array,
    ex: Extras = NO_EXTRAS,
    chunk_images: ArrayLike = 0.0,
) -> Array:
    """Terms of the step that carries one prefill chunk (and its share of the request's images)
    beside ``a (O - 1) / tau`` decoding sequences."""
    return _terms(hw, coef, a * decoding, ctx, chunk, chunk_pairs, ex, chunk_images)


def _frontend_rate(hw: Hardware, coef: Coefficients) -> float:
    """Requests/s the serving front end can pass: ``1 / t_request_s`` (no limit at 0 or offline)."""
    return front_end(hw.engine, coef).max_rate_per_s


def _frontend_latency(hw: Hardware, coef: Coefficients) -> float:
    """What the front end adds to a request's TTFT when it is alone: its latency and its own
    serial time, ``t_frontend_s + t_request_s`` (zero offline)."""
    fe = front_end(hw.engine, coef)
    return fe.latency_s + fe.serial_s


def _unit_terms(
    hw: Hardware, coef: Coefficients, *, i: Array, ctx: Array, pairs_one: Array, ex: Extras = NO_EXTRAS
) -> tuple[Array, Array, Array, Array]:
    """Step terms of an empty step, and what one decoding sequence, one whole prompt and one
    request's images add. A dense model's work is affine in decode sequences, prompt tokens,
    prefill pairs and images together, so any step's terms are ``base + B x per_decode + (P / I)
    x (per_prompt + per_images)``."""
    base = _terms(hw, coef, 0.0, ctx, 0.0, 0.0, ex)[:, :1]
    per_decode = _terms(hw, coef, 1.0, ctx, 0.0, 0.0, ex) - base
    per_prompt = _terms(hw, coef, 0.0, ctx, i, pairs_one, ex) - base
    per_images = _terms(hw, coef, 0.0, ctx, 0.0, 0.0, ex, ex.images_per_request) - base
    return base, per_decode, per_prompt, per_images


def _arrivals_per_step(
    hw: Hardware,
    coef: Coefficients,
    dec: Lines,
    pre: Lines,
    *,
    r: Array,
    chunks: Array,
    decoding: Array,
    a_budget: Array,
    latency: Array,
) -> Array:
    """``a`` of the closed loop, capped by the prompt-token budget and the front end;
    ``latency``: what a request spends before its prefill besides queueing (front end, step wait)."""
    pp, overlap = hw.layout.pp, bool(hw.engine.overlap_host)
    root = closed_loop_root(
        dec,
        pre,
        pp=pp,
        running=r,
        chunks=chunks,
        decoding=decoding,
        t_request_s=latency,  # type: ignore[arg-type]
        overlap=overlap,
    )
    cap = rate_cap_root(dec, pp=pp, rate_per_s=_frontend_rate(hw, coef), overlap=overlap)
    return np.minimum(np.minimum(root, a_budget), cap)


def _apart_args(
    hw: Hardware, coef: Coefficients, *, r: Array, chunks: Array, decoding: Array, a_budget: Array, latency: Array
) -> dict[str, Any]:
    return dict(
        pp=hw.layout.pp,
        running=r,
        chunks=chunks,
        decoding=decoding,
        t_request_s=latency,
        rate_per_s=_frontend_rate(hw, coef),
        a_budget=a_budget,
        overlap=bool(hw.engine.overlap_host),
    )


def _separated(only: StepTime, pre: StepTime, avg: StepTime, share: Array) -> StepTime:
    """The step a decoding sequence waits for: ``(1 - u)`` decode-only steps and ``u`` prompt
    steps while ``u < 1`` prompt chunks arrive per step, the average step after."""

    def mix(field: str) -> Array:
        a, b, c = (getattr(s, field) for s in (only, pre, avg))
        return np.where(share < 1.0, (1.0 - share) * a + share * b, c)

    return StepTime(**{f: mix(f) for f in ("compute_s", "memory_s", "comm_s", "overhead_s", "total_s")})


def closed_loop(
    hw: Hardware,
    coef: Coefficients,
    *,
    concurrency: ArrayLike,
    input_len: ArrayLike,
    output_len: ArrayLike,
    max_running: ArrayLike = np.inf,
    images: Images | None = None,
    speculative: Speculative | None = None,
    prompt_steps: str = "auto",
    waits: bool = True,
    cached_tokens: ArrayLike = 0.0,
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
    the step time (``gpucap.physics.steady``), with the chunk count ``s`` updated once from the solution.
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

    With ``images`` the prompt is ``I = input_len + images x tokens per image`` and the step that
    schedules a prefill also encodes its images (``n`` per request: ``a n`` per average step,
    ``n / s`` per chunk step). With ``speculative`` (k drafts, tau tokens kept per step) a request
    decodes in ``D = (O - 1) / tau`` steps: read ``D`` for ``O - 1`` above (``B = X D t_step``),
    the decode tokens in the budget are ``(k + 1) B``, and ``TPOT = t_step / tau``.

    ``cached_tokens`` h of each prompt are in the prefix cache (a shared system prompt, earlier
    turns): the prefill computes the other ``I - h`` tokens (at least one: the engine recomputes
    the last token of a full hit) and their attention pairs over the whole prompt,
    ``P(I) - P(h)`` (``prefill_pairs_per_layer``); I above reads ``I - h`` for the prompt work
    and I for the context every token attends to.
    """
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
    ex = Extras(images, speculative)
    c, i, o, cap, h = np.broadcast_arrays(
        *(np.asarray(v, dtype=float) for v in (concurrency, input_len, output_len, max_running, cached_tokens))
    )
    shape = c.shape
    c, i, o, cap, h = (np.ravel(v) for v in (c, i, o, cap, h))
    if np.any(h < 0) or np.any(h > i):
        raise ValueError("cached_tokens must lie between 0 and the prompt's input_len")
    ctx = i + ex.image_tokens(hw) + o / 2.0  # what a decoding token attends to, cached or not
    pairs_one = prefill_pairs_per_layer(hw.spec, i + ex.image_tokens(hw)) - prefill_pairs_per_layer(hw.spec, h)
    i = np.maximum(i - h, 1.0) + ex.image_tokens(hw)  # from here on: the prompt tokens computed
    n_img = ex.images_per_request
    r = np.minimum(c, cap)
    m = float(hw.engine.max_num_batched_tokens or 8192)
    decoding = np.maximum(o - 1.0, 0.0) / ex.tokens_per_step  # decode steps per request
    verify = ex.tokens_per_sequence
    a_budget = m / (i + verify * decoding)  # P = M - (k + 1) B: the prompt-token budget is full

    def chunks_at(a: Array, sel: Select = slice(None)) -> Array:
        return np.maximum(1.0, np.ceil(i[sel] / np.maximum(m - a * verify * decoding[sel], 1.0)))

    # a: arrivals per step, so B = a (O - 1) decode and P = a I prompt tokens
    # a request's prompt chunk rides in one pipeline micro-batch (the step code splits the tokens
    # of a step over pp micro-batches, right for many requests' prompts but not for one), so its
    # step is charged pp chunks: pp stage slots of one chunk each
    one_mb = float(hw.layout.pp)

    def solve(latency: Array, apart: bool) -> tuple[Array, Array, Array, Array, Array]:
        chunks = chunks_at(np.zeros_like(r))
        if hw.spec.is_moe:
            a = np.zeros_like(r)
            for k in range(MOE_PASSES):
                chunks = chunks_at(a)
                dec = lines_through(
                    lambda x: _terms(hw, coef, x * decoding, ctx, x * i, x * pairs_one, ex, x * n_img), a
                )
                chunk = (one_mb * i / chunks, one_mb * pairs_one / chunks)
                pre = lines_through(
                    partial(_prefill_terms, hw, coef, decoding, ctx, *chunk, ex=ex, chunk_images=n_img / chunks),
                    a,
                )
                if k == 0 or not apart:  # the averaged step's closed form (the start, when apart)
                    a = _arrivals_per_step(
                        hw, coef, dec, pre, r=r, chunks=chunks, decoding=decoding, a_budget=a_budget, latency=latency
                    )
                if apart:
                    decode_only = lines_through(lambda x: _terms(hw, coef, x * decoding, ctx, 0.0 * x, 0.0 * x, ex), a)
                    args = _apart_args(
                        hw, coef, r=r, chunks=chunks, decoding=decoding, a_budget=a_budget, latency=latency
                    )
                    a = separated_root(decode_only, pre, dec, start=a, **args)
            dec_terms = _terms(hw, coef, a * decoding, ctx, a * i, a * pairs_one, ex, a * n_img)
            only_terms = _terms(hw, coef, a * decoding, ctx, 0.0 * a, 0.0 * a, ex)  # decode-only steps
            pre_terms = _terms(
                hw, coef, a * decoding, ctx, one_mb * i / chunks, one_mb * pairs_one / chunks, ex, n_img / chunks
            )
        else:
            base, per_decode, per_prompt, per_images = _unit_terms(hw, coef, i=i, ctx=ctx, pairs_one=pairs_one, ex=ex)
            dec = (np.broadcast_to(base, per_prompt.shape), decoding * per_decode + per_prompt + per_images)

            def pre_at(ch: Array, sel: Select = slice(None)) -> Lines:
                # the chunk in one micro-batch (pp stage slots of it); the images encoded once
                prompt = one_mb * per_prompt[:, sel] + per_images[:, sel]
                return base + prompt / ch, decoding[sel] * per_decode[:, sel]

            kw = dict(r=r, chunks=chunks, decoding=decoding, a_budget=a_budget, latency=latency)
            pre = pre_at(chunks)
            a = _arrivals_per_step(hw, coef, dec, pre, **kw)
            # a larger decode batch leaves fewer prompt tokens per step: take the chunk count at the
            # solution and solve again where it changed
            redo = np.flatnonzero(chunks_at(a) != chunks)
            if redo.size:
                chunks[redo] = chunks_at(a[redo], redo)
                sub = (dec[0][:, redo], dec[1][:, redo])
                pre_redo = pre_at(chunks[redo], redo)
                kw = dict(
                    r=r[redo],
                    chunks=chunks[redo],
                    decoding=decoding[redo],
                    a_budget=a_budget[redo],
                    latency=latency[redo],
                )
                a[redo] = _arrivals_per_step(hw, coef, sub, pre_redo, **kw)
                pre[0][:, redo], pre[1][:, redo] = pre_redo
            decode_only = (np.broadcast_to(base, per_prompt.shape), decoding * per_decode)
            if apart:
                args = _apart_args(hw, coef, r=r, chunks=chunks, decoding=decoding, a_budget=a_budget, latency=latency)
                a = separated_root(decode_only, pre, dec, start=a, **args)
            dec_terms, pre_terms = dec[0] + dec[1] * a, pre[0] + pre[1] * a
            only_terms = decode_only[0] + decode_only[1] * a  # decode-only steps
        return a, chunks, pre_terms, dec_terms, only_terms

    lead = _frontend_latency(hw, coef)

    def steps(
        a: Array, chunks: Array, pre_terms: Array, dec_terms: Array, only_terms: Array, apart: bool = apart
    ) -> tuple[StepTime, StepTime, Array]:
        """The step a prompt rides in, the step a decoding sequence waits for, and how long a new
        request waits for the step in progress: the mean rest of a step drawn by length,
        ``E[t^2] / (2 E[t])``, over decode-only and prompt steps (apart, ``u`` of them) or the
        average step. A request leaves the front end at a time unrelated to the engine's steps;
        without a front end it is sent as another finishes, at a step's start, and waits for
        nothing."""
        pre_step, avg_step = (combine(hw, t.reshape(6, *shape)) for t in (pre_terms, dec_terms))
        rest = 0.5 * avg_step.total_s
        dec_step = avg_step
        if apart:
            only_step = combine(hw, only_terms.reshape(6, *shape))
            u = np.minimum(a * chunks, 1.0).reshape(shape)
            t_d, t_p = only_step.total_s, pre_step.total_s
            with np.errstate(divide="ignore", invalid="ignore"):
                mixed = ((1.0 - u) * t_d**2 + u * t_p**2) / (2.0 * ((1.0 - u) * t_d + u * t_p))
            rest = np.where(u < 1.0, mixed, rest)
            dec_step = _separated(only_step, pre_step, avg_step, u)
        return pre_step, dec_step, rest if lead > 0 else 0.0 * rest

    def front_end_s(a: Array, dec_step: StepTime, rest: Array) -> Array:
        """The front end's latency and its shared core's sojourn ``w / (1 - X w)`` (processor
        sharing, ``gpucap.queueing.frontend``; w = ``t_request_s``) at the loop's rate X. With the rest of
        the cycle D = R / X1 - w of the first solution (X1) and the step wait added, X solves
        ``X (D + wait) + X w / (1 - X w) = R``, a quadratic whose smaller root is below 1 / w."""
        fe = front_end(hw.engine, coef)
        w = fe.serial_s
        if w <= 0:
            return np.full_like(r, fe.latency_s)
        x1 = a / np.ravel(dec_step.total_s)
        d = np.maximum(r / x1 - w, 0.0) + busy * np.ravel(rest)
        b = d + w + r * w
        with np.errstate(invalid="ignore", divide="ignore"):
            x = np.where(d > 0, (b - np.sqrt(np.maximum(b * b - 4.0 * d * w * r, 0.0))) / (2.0 * d * w), 1.0 / w)
        return fe.latency_s + w / np.maximum(1.0 - x * w, 1e-3)

    # a request that arrives while others run (probability 1 - 1/R) waits for the step in progress
    # before its prefill, and the front end's core is shared with the others passing it: solve once
    # with the front end alone, then again with both, so that Little's law holds with the TTFT
    # reported
    busy = np.where(r > 1.0, 1.0 - 1.0 / np.maximum(r, 1.0), 0.0)
    # (the first solve, which only sizes the two waits, averages prompt tokens over the steps: the
    # cheap form; the second runs them apart where asked)
    latency = np.full_like(r, lead)
    if waits:
        first = solve(latency, False)
        _, dec_first, rest = steps(*first)
        latency = front_end_s(first[0], dec_first, rest) + busy * np.ravel(rest)
    a, chunks, pre_terms, dec_terms, only_terms = solve(latency, apart)
    pre_step, dec_step, _ = steps(a, chunks, pre_terms, dec_terms, only_terms)
    c, r, i, o, a, decoding, chunks, latency = (v.reshape(shape) for v in (c, r, i, o, a, decoding, chunks, latency))
    t_step = dec_step.total_s
    x = a / t_step
    # time a running request spends before its first token: its prefill after the front end and
    # the step in progress, or longer when the front end or the prompt-token budget admits
    # requests more slowly than they finish
    with np.errstate(divide="ignore", invalid="ignore"):
        own = chunks * pre_step.total_s + latency
        queued = r / x - decoding * t_step
        ttft_run = np.maximum(own, queued)
        wait = np.where(c > r, (c - r) / x, 0.0)
    step_wait = np.where(own >= queued, latency - _frontend_latency(hw, coef), 0.0)
    return LoadPoint(
        concurrency=c,
        running=r,
        decode_batch=a * decoding,
        step_wait_s=step_wait,
        ttft_s=ttft_run + wait,
        tpot_s=t_step / ex.tokens_per_step,
        requests_per_s=x,
        output_tokens_per_s=x * o,
        decode_step=dec_step,
        prefill_step=pre_step,
    )


def open_loop(
    hw: Hardware,
    coef: Coefficients,
    *,
    request_rate: ArrayLike,
    input_len: ArrayLike,
    output_len: ArrayLike,
    max_running: ArrayLike,
    images: Images | None = None,
    speculative: Speculative | None = None,
    cached_tokens: ArrayLike = 0.0,
) -> LoadPoint:
    """Mean steady state under arrivals at ``request_rate`` requests/s (Poisson in the benchmark).

    By Little's law the mean number in the system C satisfies X(C) = lambda; X rises with C, so
    C is interpolated (in log C) from the closed-loop model on a grid of concurrencies. At or
    above the service rate (the most X reaches up to max_running) the queue grows without bound:
    TTFT is infinite and throughput is the service rate. (Means only; the tail under Poisson
    arrivals needs a queueing model.) ``cached_tokens``: as in ``closed_loop``.
    """
    lam, i, o, cap, h = np.broadcast_arrays(
        *(np.asarray(v, dtype=float) for v in (request_rate, input_len, output_len, max_running, cached_tokens))
    )
    loop = partial(closed_loop, hw, coef, images=images, speculative=speculative)
    full = loop(concurrency=cap, input_len=i, output_len=o, cached_tokens=h)
    # X(C) on a log grid of concurrencies for every rate at once, then interpolate C(lambda)
    frac = np.geomspace(OPEN_LOOP_LOWEST / OPEN_LOOP_GRID, 1.0, OPEN_LOOP_GRID)
    grid_c = np.maximum(cap[..., None] * frac, OPEN_LOOP_LOWEST)
    grid = loop(concurrency=grid_c, input_len=i[..., None], output_len=o[..., None], cached_tokens=h[..., None])
    grid_x = grid.requests_per_s
    # X(C) can dip where the prompt-token budget starts to bind; a rate is carried by the smallest
    # concurrency that reaches it, so use the running maximum
    grid_x = np.maximum.accumulate(grid_x, axis=-1)
    flat_x, flat_c = grid_x.reshape(-1, OPEN_LOOP_GRID), np.log(grid_c).reshape(-1, OPEN_LOOP_GRID)
    flat_lam = lam.reshape(-1)
    log_c = np.array([np.interp(flat_lam[k], flat_x[k], flat_c[k]) for k in range(flat_lam.size)])
    point = loop(concurrency=np.exp(log_c).reshape(lam.shape), input_len=i, output_len=o, cached_tokens=h)
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
