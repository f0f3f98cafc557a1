"""The closed loop's fixed point (``gpucap.physics.batching.closed_loop``), solved for ``a``, the
requests that arrive per step (``B = a D`` decoding sequences with ``D = (O - 1) / tau`` decode
steps per request, ``P = a I`` prompt tokens):

- ``solve_dense``: a dense model's step terms are exact lines in ``a``, so ``a`` comes in closed
  form on their linear pieces (``gpucap.physics.steady``), with the chunk count updated once.
- ``solve_moe``: a mixture-of-experts step reads ``E (1 - (1 - k/E)^T)`` experts, concave in the
  tokens T, so the lines are tangents at the last solution (Newton passes).

Both return the step terms at the solution; ``step_times`` turns them into the steps a prompt
and a decoding sequence wait for, and ``front_end_s`` gives the front end's share of TTFT.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from gpucap.config import Hardware
from gpucap.physics.coefficients import Coefficients, front_end
from gpucap.physics.extras import Extras
from gpucap.physics.memory import ArrayLike
from gpucap.physics.requests import Requests
from gpucap.physics.steady import (
    ApartLoop,
    Lines,
    closed_loop_root,
    lines_through,
    rate_cap_root,
    separated_root,
)
from gpucap.physics.step import (
    Array,
    StepTime,
    draft_hardware,
    experts_touched,
    prefill_pairs_per_layer,
    step_work,
)
from gpucap.physics.steptime import combine, step_terms

DENSE_PASSES = 2  # the second pass takes the chunk count at the first solution
MOE_PASSES = 4  # Newton passes on the concave expert traffic (converged to 1e-11 in tests)
# an element that a pass moved by less than this share of itself takes no further pass: each pass
# shrank the largest move by 2e-4 to 4e-5 where measured, so what is left lies far below the root's
# own tolerance (``gpucap.physics.steady.ROOT_TOLERANCE``, 1e-9); answers agree with every pass
# to 6e-13 (benchmarks/README.md)
MOE_SETTLED = 1e-12
Select = slice | npt.NDArray[np.intp]  # all elements, or some by index


def terms(
    hw: Hardware,
    coef: Coefficients,
    b: ArrayLike,
    ctx: Array,
    p: ArrayLike,
    q: ArrayLike,
    ex: Extras,
    images: ArrayLike = 0.0,
    *,
    touched: ArrayLike | None = None,
) -> Array:
    """Step terms (``gpucap.physics.steptime.step_terms``) of a step with ``b`` decoding sequences at
    mean context ``ctx``, ``p`` prompt tokens with ``q`` prefill pairs per layer, and ``images``
    encoded (``touched``: the routed experts' share read, ``step_work``)."""
    work = step_work(
        hw,
        decode_tokens=b,
        decode_context=ctx,
        prefill_tokens=p,
        prefill_pairs=q,
        images=images,
        extras=ex,
        touched=touched,
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
    ex: Extras,
    chunk_images: ArrayLike = 0.0,
) -> Array:
    """Terms of the step that carries one prefill chunk (and its share of the request's images)
    beside ``a (O - 1) / tau`` decoding sequences."""
    return terms(hw, coef, a * decoding, ctx, chunk, chunk_pairs, ex, chunk_images)


def frontend_rate(hw: Hardware, coef: Coefficients) -> float:
    """Requests/s the serving front end can pass: ``1 / t_request_s`` (no limit at 0 or offline)."""
    return front_end(hw.engine, coef).max_rate_per_s


def _unit_terms(
    hw: Hardware,
    coef: Coefficients,
    *,
    i: Array,
    ctx: Array,
    pairs_one: Array,
    ex: Extras,
    touched: float | None = None,
) -> tuple[Array, Array, Array, Array]:
    """Step terms of an empty step, and what one decoding sequence, one whole prompt and one
    request's images add. A dense model's work is affine in decode sequences, prompt tokens,
    prefill pairs and images together, so any step's terms are ``base + B x per_decode + (P / I)
    x (per_prompt + per_images)``; so is a mixture-of-experts model's with its routed experts'
    bytes left out (``touched=0``, ``ClosedLoad.expert_terms``)."""
    # the four steps in one call, on a leading axis: empty, one sequence, one prompt, one's images
    none, one = np.zeros_like(i), np.ones_like(i)
    decodes, prompts = np.stack([none, one, none, none]), np.stack([none, none, i, none])
    pairs, images = np.stack([none, none, pairs_one, none]), np.stack([none, none, none, ex.images_per_request * one])
    empty, decode, prompt, image = np.moveaxis(
        terms(hw, coef, decodes, ctx, prompts, pairs, ex, images, touched=touched), 1, 0
    )
    base = empty[:, :1]
    return base, decode - base, prompt - base, image - base


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
    start: Array | None = None,
) -> Array:
    """``a`` of the closed loop, capped by the prompt-token budget and the front end;
    ``latency``: what a request spends before its prefill besides queueing (front end, step wait);
    ``start``: a guess whose linear pieces are tried first (``closed_loop_root``)."""
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
        start=start,
    )
    a = np.minimum(root, a_budget)
    cap = rate_cap_root(dec, pp=pp, rate_per_s=frontend_rate(hw, coef), overlap=overlap, start=start, within=a)
    return np.minimum(a, cap)


def _apart_loop(
    hw: Hardware, coef: Coefficients, *, r: Array, chunks: Array, decoding: Array, a_budget: Array, latency: Array
) -> ApartLoop:
    """The loop ``separated_root`` solves (prompt chunks in steps of their own)."""
    return ApartLoop(
        pp=hw.layout.pp,
        running=r,
        chunks=chunks,
        decoding=decoding,
        t_request_s=latency,
        rate_per_s=frontend_rate(hw, coef),
        a_budget=a_budget,
        overlap=bool(hw.engine.overlap_host),
    )


def _separated(only: StepTime, pre: StepTime, avg: StepTime, share: Array) -> StepTime:
    """The step a decoding sequence waits for: ``(1 - u)`` decode-only steps and ``u`` prompt
    steps while ``u < 1`` prompt chunks arrive per step, the average step after."""

    def mix(field: str) -> Array:
        a, b, c = (getattr(s, field) for s in (only, pre, avg))
        return np.where(share < 1.0, (1.0 - share) * a + share * b, c)

    return StepTime(**{f.name: mix(f.name) for f in dataclasses.fields(StepTime)})


@dataclass(frozen=True)
class ClosedLoad:
    """One closed-loop load, flattened to one axis (``shape`` is the broadcast shape of the
    inputs). Tokens per request: ``prompt`` I computed (after the prefix cache, image tokens
    included), ``context`` attended to by a decoding token, ``output`` O."""

    hw: Hardware
    coef: Coefficients
    ex: Extras
    shape: tuple[int, ...]
    concurrency: Array  # C
    running: Array  # R = min(C, max_running)
    prompt: Array  # I
    output: Array  # O
    context: Array  # I + image tokens + O / 2, cached or not
    pairs: Array  # prefill pairs per layer of one prompt, P(I) - P(h)
    decoding: Array  # decode steps per request, D = (O - 1) / tau
    budget_tokens: float  # M = max_num_batched_tokens
    a_budget: Array  # the a at which P = M - (k + 1) B: the prompt-token budget is full

    @functools.cached_property
    def unit_terms(self) -> tuple[Array, Array, Array, Array]:
        """A dense model's step terms per unit of work (``_unit_terms``): they do not depend on
        the solution, so both solves of one closed loop share them."""
        return _unit_terms(self.hw, self.coef, i=self.prompt, ctx=self.context, pairs_one=self.pairs, ex=self.ex)

    @functools.cached_property
    def expert_terms(self) -> tuple[tuple[Array, Array, Array, Array], Array]:
        """A mixture-of-experts model's step terms as the affine rest (``_unit_terms`` without
        the routed experts' bytes) and the terms of reading every routed expert once, ``row``:
        a step of T tokens per stage slot has the terms ``rest + row x experts_touched(T)``
        (``step_work``: only the routed experts' bytes are not affine). Neither depends on the
        solution, so both solves and every Newton pass share them."""
        hw, coef, ctx, ex = self.hw, self.coef, self.context, self.ex
        rest = _unit_terms(hw, coef, i=self.prompt, ctx=ctx, pairs_one=self.pairs, ex=ex, touched=0.0)
        row = terms(hw, coef, 0.0, ctx, 0.0, 0.0, ex, touched=1.0)[:, :1] - rest[0]
        return rest, row

    @property
    def experts_apart(self) -> bool:
        """Whether the routed experts' read is the only part of a step that is not affine (no
        drafter with routed experts of its own, ``expert_terms``)."""
        sp = self.ex.speculative
        return sp is None or not draft_hardware(self.hw, sp).spec.is_moe

    @property
    def one_mb(self) -> float:
        """Micro-batches a prompt chunk's step is charged: a request's prompt chunk rides in one
        pipeline micro-batch (the step code splits the tokens of a step over pp micro-batches,
        right for many requests' prompts but not for one), so its step is charged pp chunks: pp
        stage slots of one chunk each."""
        return float(self.hw.layout.pp)

    def room_at(self, a: Array, sel: Select = slice(None)) -> Array:
        """Prompt tokens a step has room for beside its decodes, ``m = M - (k + 1) B`` (at least 1)."""
        return np.maximum(self.budget_tokens - a * self.ex.tokens_per_sequence * self.decoding[sel], 1.0)

    def chunks_at(self, a: Array, sel: Select = slice(None)) -> Array:
        """Chunk steps of one prefill, ``s = ceil(I / m)`` (at least 1), at ``a``."""
        return np.maximum(1.0, np.ceil(self.prompt[sel] / self.room_at(a, sel)))

    def full_steps(self, a: Array, chunks: Array, sel: Select = slice(None)) -> Array:
        """Full-room steps of one prefill as the decodes see them, ``s' = I / m`` where the prompt
        takes more than one chunk, else 1 (``gpucap.physics.steady``, prompt steps apart); kept
        within (s - 1, s] of the whole count ``chunks``."""
        share = np.clip(self.prompt[sel] / self.room_at(a, sel), chunks - 1.0, chunks)
        return np.where(chunks > 1.0, share, 1.0)


def closed_load(
    hw: Hardware,
    coef: Coefficients,
    requests: Requests,
    *,
    concurrency: ArrayLike,
    context_tokens: ArrayLike | None = None,
) -> ClosedLoad:
    """The load of ``closed_loop``: inputs broadcast and flattened, the prompt after the prefix
    cache (``I - h`` tokens computed, at least one, and ``P(I) - P(h)`` pairs), image tokens
    added, ``D = (O - 1) / tau`` decode steps and the budget's ``a = M / (I + (k + 1) D)``."""
    ex = requests.extras
    context = np.nan if context_tokens is None else context_tokens
    c, held, i, o, cap, h = requests.arrays(concurrency, context)
    shape = c.shape
    c, i, o, cap, h, held = (np.ravel(v) for v in (c, i, o, cap, h, held))
    if np.any(h < 0) or np.any(h > i):
        raise ValueError("cached_tokens must lie between 0 and the prompt's input_len")
    if context_tokens is not None and not np.all(held >= 1.0):
        raise ValueError(f"context_tokens must be a number of tokens >= 1, got {context_tokens!r}")
    # what a decoding token attends to, cached or not: I + O / 2 for one length, else the given mean
    ctx = np.where(np.isnan(held), i + o / 2.0, held) + ex.image_tokens(hw)
    pairs_one = prefill_pairs_per_layer(hw.spec, i + ex.image_tokens(hw)) - prefill_pairs_per_layer(hw.spec, h)
    i = np.maximum(i - h, 1.0) + ex.image_tokens(hw)  # from here on: the prompt tokens computed
    m = float(hw.engine.max_num_batched_tokens or 8192)
    decoding = np.maximum(o - 1.0, 0.0) / ex.tokens_per_step  # decode steps per request
    a_budget = m / (i + ex.tokens_per_sequence * decoding)  # P = M - (k + 1) B: the prompt-token budget is full
    return ClosedLoad(
        hw=hw,
        coef=coef,
        ex=ex,
        shape=shape,
        concurrency=c,
        running=np.minimum(c, cap),
        prompt=i,
        output=o,
        context=ctx,
        pairs=pairs_one,
        decoding=decoding,
        budget_tokens=m,
        a_budget=a_budget,
    )


class Solution(NamedTuple):
    """``a`` at the fixed point, the chunk count, and the step terms (six rows, see
    ``gpucap.physics.steptime.step_terms``) of a step with a prompt chunk, of the average step and of
    a decode-only step; ``full``: the full-room steps per prompt as the decodes see them
    (``ClosedLoad.full_steps``) and ``full_terms`` the terms of one."""

    a: Array
    chunks: Array
    pre_terms: Array
    dec_terms: Array
    only_terms: Array
    full: Array
    full_terms: Array


def solve(load: ClosedLoad, latency: Array, apart: bool, start: Array | None = None) -> Solution:
    """``a`` of the closed loop for ``latency`` (what a request spends before its prefill besides
    queueing): ``solve_moe`` for a mixture-of-experts model, ``solve_dense`` otherwise. ``start``:
    a guess of ``a`` (an earlier solve's) whose linear pieces are tried first; it changes the
    time taken, not the answer."""
    if load.hw.spec.is_moe:
        return solve_moe(load, latency, apart, start)
    return solve_dense(load, latency, apart, start)


def _expert_steps(
    load: ClosedLoad, sel: Select = slice(None)
) -> tuple[Callable[[Array], Array], Callable[[Array], Array], Callable[[Array], Callable[[Array], Array]]]:
    """The terms, against ``a``, of the average step, a decode-only step and (given the chunk
    count) a step with one prompt chunk, as ``rest + row x experts_touched(T)`` of
    ``ClosedLoad.expert_terms``: the same as ``terms`` of each step, without its work computed
    again at every ``a``. ``sel``: those of some elements only."""
    (base, per_decode, per_prompt, per_images), row = load.expert_terms
    per_decode, per_prompt, per_images = per_decode[:, sel], per_prompt[:, sel], per_images[:, sel]
    hw, pp = load.hw, load.hw.layout.pp
    decoding = load.decoding[sel]
    per_sequence = decoding * per_decode  # the a D sequences a step decodes, per a
    verify_tokens = load.ex.tokens_per_sequence * decoding / pp  # their tokens per stage slot, per a
    prompt_tokens = load.prompt[sel] / pp

    def with_experts(affine: Array, tokens: Array) -> Array:
        """``affine`` terms plus the routed experts a stage slot of ``tokens`` tokens reads."""
        return affine + row * experts_touched(hw.spec, tokens)

    def average_step(x: Array) -> Array:
        return with_experts(base + x * (per_sequence + per_prompt + per_images), x * (verify_tokens + prompt_tokens))

    def decode_only_step(x: Array) -> Array:
        return with_experts(base + x * per_sequence, x * verify_tokens)

    def prompt_step(steps: Array) -> Callable[[Array], Array]:
        chunk = base + (load.one_mb * per_prompt + per_images) / steps
        chunk_tokens = load.one_mb * prompt_tokens / steps
        return lambda x: with_experts(chunk + x * per_sequence, x * verify_tokens + chunk_tokens)

    return average_step, decode_only_step, prompt_step


def solve_moe(load: ClosedLoad, latency: Array, apart: bool, start: Array | None = None) -> Solution:
    """``a`` of a mixture-of-experts model. The experts a step reads, ``E (1 - (1 - k/E)^T)`` of
    E, are concave in its tokens T, so the step terms are no lines in ``a``: ``MOE_PASSES``
    Newton passes take the lines through the terms at the last ``a`` (``lines_through``), with
    the chunk count ``s = ceil(I / (M - (k + 1) B))`` at that ``a``, and solve the closed loop on
    them (``closed_loop_root``, capped by the budget and the front end). ``apart``: the first pass
    solves the averaged step and the later ones run each prompt chunk in a step of its own
    (``separated_root``). Within the passes a step's terms are ``rest + row x
    experts_touched(T)`` (``ClosedLoad.expert_terms``): the work of the step is computed once,
    the experts' share at each ``a``; the terms at the solution are the step's own. A pass runs
    only on the elements the pass before moved by more than ``MOE_SETTLED`` of themselves (all of
    them where a drafter routes experts too); each element keeps the chunk count of its last pass."""
    hw, coef, ex = load.hw, load.coef, load.ex
    r, i, ctx, decoding = load.running, load.prompt, load.context, load.decoding
    pairs_one, n_img, one_mb = load.pairs, ex.images_per_request, load.one_mb
    kw = dict(r=r, decoding=decoding, a_budget=load.a_budget, latency=latency)
    a = np.zeros_like(r)

    def exact_average(x: Array) -> Array:
        return terms(hw, coef, x * decoding, ctx, x * i, x * pairs_one, ex, x * n_img)

    def exact_decode_only(x: Array) -> Array:
        return terms(hw, coef, x * decoding, ctx, 0.0 * x, 0.0 * x, ex)

    def exact_prompt(steps: Array) -> Callable[[Array], Array]:
        """The terms of a step carrying one of ``steps`` equal chunks of a prompt, against ``a``."""
        chunk = (one_mb * i / steps, one_mb * pairs_one / steps)
        return lambda x: _prefill_terms(hw, coef, decoding, ctx, *chunk, x, ex=ex, chunk_images=n_img / steps)

    # the passes' terms: the affine rest and the experts read, unless a drafter routes experts too
    exact = (exact_average, exact_decode_only, exact_prompt)
    every = _expert_steps(load) if load.experts_apart else exact
    chunks = np.ones_like(r)
    moving = np.arange(r.size)  # the elements a pass still moves (every one, with a drafter's experts)
    for k in range(MOE_PASSES):
        if moving.size == 0:
            break
        whole = moving.size == r.size
        sel: Select = slice(None) if whole else moving
        average_step, decode_only_step, prompt_step = every if whole else _expert_steps(load, sel)
        was = a[sel]
        kw_sel = kw if whole else {name: np.asarray(v)[sel] for name, v in kw.items()}
        ch = load.chunks_at(was, sel)
        dec = lines_through(average_step, was)
        pre = lines_through(prompt_step(ch), was)
        now = was
        if k == 0 or not apart:  # the averaged step's closed form (the start, when apart)
            now = _arrivals_per_step(hw, coef, dec, pre, chunks=ch, start=was if k else start, **kw_sel)
        if apart:
            full = load.full_steps(now, ch, sel)
            full_lines = pre if np.array_equal(full, ch) else lines_through(prompt_step(full), now)
            decode_only = lines_through(decode_only_step, now)
            loop = _apart_loop(hw, coef, chunks=ch, **kw_sel)
            now = separated_root(decode_only, pre, dec, loop, start=now, full=full_lines, share=full)
        if load.experts_apart:  # settled: moved by less than MOE_SETTLED of itself in this pass
            moving = moving[np.abs(now - was) > MOE_SETTLED * np.abs(now)]
        a[sel], chunks[sel] = now, ch

    dec_terms, only_terms = exact_average(a), exact_decode_only(a)  # the steps' own terms at the solution
    pre_terms = exact_prompt(chunks)(a)
    full = load.full_steps(a, chunks)
    full_terms = pre_terms if np.array_equal(full, chunks) else exact_prompt(full)(a)
    return Solution(a, chunks, pre_terms, dec_terms, only_terms, full, full_terms)


def solve_dense(load: ClosedLoad, latency: Array, apart: bool, start: Array | None = None) -> Solution:
    """``a`` of a dense model. Its step terms are exact lines in ``a`` (``_unit_terms``): the
    average step ``base + a (D per_decode + per_prompt + per_images)`` and the step with a
    prompt chunk ``base + (pp per_prompt + per_images) / s + a D per_decode``. The closed loop
    is solved on them in closed form (``closed_loop_root``, capped by the budget and the front
    end) at the chunk count ``s`` of an empty batch, then (``DENSE_PASSES``) again where the
    chunk count at the solution differs: a larger decode batch leaves fewer prompt tokens per
    step. ``apart``: each prompt chunk in a step of its own, ``separated_root`` started there."""
    hw, coef = load.hw, load.coef
    r, decoding = load.running, load.decoding
    chunks = load.chunks_at(np.zeros_like(r))
    base, per_decode, per_prompt, per_images = load.unit_terms
    dec = (np.broadcast_to(base, per_prompt.shape), decoding * per_decode + per_prompt + per_images)

    def pre_at(ch: Array, sel: Select = slice(None)) -> Lines:
        # the chunk in one micro-batch (pp stage slots of it); the images encoded once
        prompt = load.one_mb * per_prompt[:, sel] + per_images[:, sel]
        return base + prompt / ch, decoding[sel] * per_decode[:, sel]

    kw = dict(r=r, decoding=decoding, a_budget=load.a_budget, latency=latency)
    pre = pre_at(chunks)
    a = _arrivals_per_step(hw, coef, dec, pre, chunks=chunks, start=start, **kw)
    # a larger decode batch leaves fewer prompt tokens per step: take the chunk count at the
    # solution and solve again where it changed
    redo = np.flatnonzero(load.chunks_at(a) != chunks)
    if redo.size:
        chunks[redo] = load.chunks_at(a[redo], redo)
        pre_redo = pre_at(chunks[redo], redo)
        dec_redo = (dec[0][:, redo], dec[1][:, redo])
        kw_redo = {k: v[redo] for k, v in kw.items()}
        a[redo] = _arrivals_per_step(hw, coef, dec_redo, pre_redo, chunks=chunks[redo], start=a[redo], **kw_redo)
        pre[0][:, redo], pre[1][:, redo] = pre_redo
    decode_only = (np.broadcast_to(base, per_prompt.shape), decoding * per_decode)
    full = load.full_steps(a, chunks)
    full_lines = pre if np.array_equal(full, chunks) else pre_at(full)
    if apart:
        a = separated_root(
            decode_only, pre, dec, _apart_loop(hw, coef, chunks=chunks, **kw), start=a, full=full_lines, share=full
        )
    dec_terms, pre_terms = dec[0] + dec[1] * a, pre[0] + pre[1] * a
    only_terms = decode_only[0] + decode_only[1] * a  # decode-only steps
    full_terms = full_lines[0] + full_lines[1] * a
    return Solution(a, chunks, pre_terms, dec_terms, only_terms, full, full_terms)


def step_times(load: ClosedLoad, sol: Solution, apart: bool, lead_s: float) -> tuple[StepTime, StepTime, Array]:
    """The step a prompt rides in, the step a decoding sequence waits for, and how long a new
    request waits for the step in progress: the mean rest of a step drawn by length,
    ``E[t^2] / (2 E[t])``, over decode-only and full prompt steps (apart, ``u = a s'`` of them,
    ``s'`` the full-room steps of a prompt: one a token past the room is a full step and a
    remainder riding beside decodes, whose mean rest is a full step's) or the average step. A
    request leaves the front end at a time unrelated to the engine's steps; without a front end
    (``lead_s`` 0) it is sent as another finishes, at a step's start, and waits for nothing."""
    hw, shape = load.hw, load.shape
    pre_step, avg_step = (combine(hw, t.reshape(6, *shape)) for t in (sol.pre_terms, sol.dec_terms))
    rest = 0.5 * avg_step.total_s
    dec_step = avg_step
    if apart:
        only_step = combine(hw, sol.only_terms.reshape(6, *shape))
        full_step = combine(hw, sol.full_terms.reshape(6, *shape))
        u = np.minimum(sol.a * sol.full, 1.0).reshape(shape)
        t_d, t_p = only_step.total_s, full_step.total_s
        with np.errstate(divide="ignore", invalid="ignore"):
            mixed = ((1.0 - u) * t_d**2 + u * t_p**2) / (2.0 * ((1.0 - u) * t_d + u * t_p))
        rest = np.where(u < 1.0, mixed, rest)
        dec_step = _separated(only_step, full_step, avg_step, u)
    return pre_step, dec_step, rest if lead_s > 0 else 0.0 * rest


def front_end_s(load: ClosedLoad, a: Array, dec_step: StepTime, rest: Array, busy: Array) -> Array:
    """The front end's latency and its shared core's sojourn ``w / (1 - X w)`` (processor
    sharing, ``gpucap.queueing.frontend``; w = ``t_request_s``) at the loop's rate X. With the rest of
    the cycle D = R / X1 - w of the first solution (X1) and the step wait added (``busy`` x
    ``rest``: a request arriving while others run), X solves ``X (D + wait) + X w / (1 - X w) =
    R``, a quadratic whose smaller root is below 1 / w."""
    fe = front_end(load.hw.engine, load.coef)
    r = load.running
    w = fe.serial_s
    if w <= 0:
        return np.full_like(r, fe.latency_s)
    x1 = a / np.ravel(dec_step.total_s)
    d = np.maximum(r / x1 - w, 0.0) + busy * np.ravel(rest)
    b = d + w + r * w
    with np.errstate(invalid="ignore", divide="ignore"):
        x = np.where(d > 0, (b - np.sqrt(np.maximum(b * b - 4.0 * d * w * r, 0.0))) / (2.0 * d * w), 1.0 / w)
    return fe.latency_s + w / np.maximum(1.0 - x * w, 1e-3)
