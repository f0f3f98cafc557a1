"""The closed-loop steady state solved in closed form, piece by piece.

In steady state a step admits ``a`` new requests on average (``a = X x TPOT``): then ``B = a (O -
1)`` sequences decode and ``P = a I`` prompt tokens ride along (Little's law per step). Every part
of the step's work (FLOP, bytes, link traffic, host time) is affine in those token counts, so each
of the six step terms (``gpucap.physics.steptime.step_terms``) is a line in ``a``, and the step time

    t(a) = pp x [max(gemm compute, gemm memory) + max(attn compute, attn memory) + link] + host

is convex and piecewise linear with at most two kinks. The step that carries one request's
prefill chunk (``B`` decodes plus ``I / s`` prompt tokens, ``s`` chunks) is another such line
``t_p(a)``. The closed-loop condition ``R = X (TTFT + (O - 1) TPOT)`` with ``X = a / t(a)``,
``TTFT = s t_p(a) + t_request`` reads

    F(a) = a (s t_p(a) + t_request) + a (O - 1) t(a) - R t(a) = 0,

a quadratic on each linear piece. ``F / t`` rises with ``a`` (every line has a non-negative
intercept), so there is one root: find the piece where F changes sign and solve its quadratic.
Mixture-of-experts weight traffic (``1 - (1 - k/E)^T`` of the experts) is concave in the
tokens, not affine; it is linearized at the current solution and solved again (Newton's method on
the concave term), which converges in a few passes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from gpucap.physics.step import Array
from gpucap.physics.steptime import ATTN_COMPUTE, ATTN_MEMORY, COMM, GEMM_COMPUTE, GEMM_MEMORY, OVERHEAD

Ints = npt.NDArray[np.intp]
Lines = tuple[Array, Array]  # intercepts and slopes of the six step terms, shape (6, ...)
TermsAt = Callable[[Array], Array]  # arrivals per step -> stacked step terms


def lines_through(terms_at: TermsAt, a: Array) -> Lines:
    """Intercepts and slopes of the step terms through ``a`` and ``a + h`` (exact where the terms
    are affine; the secant of the concave mixture-of-experts traffic otherwise)."""
    h = np.maximum(1e-3 * a, 1e-3)
    lo, hi = terms_at(a), terms_at(a + h)
    slope = (hi - lo) / h
    return lo - slope * a, slope


def _crossing(k0: Array, k1: Array, c0: Array, c1: Array) -> Array:
    """Where the line ``k0 + k1 a`` crosses ``c0 + c1 a``; inf where it does not in a > 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        x = (c0 - k0) / (k1 - c1)
    return np.where(np.isfinite(x) & (x > 0), x, np.inf)


def _kinks(lines: Lines, pp: int = 1, overlap: bool = False) -> Array:
    """Where the two rooflines of each max cross, shape (2, ...), and, when the host overlaps the
    GPU, where the host line crosses each of the four GPU lines (``max(G, H)``): shape (6, ...);
    inf where they do not cross in a > 0."""
    k0, k1 = lines
    out = [_crossing(k0[c], k1[c], k0[m], k1[m]) for c, m in ((GEMM_COMPUTE, GEMM_MEMORY), (ATTN_COMPUTE, ATTN_MEMORY))]
    if overlap:
        for g in (GEMM_COMPUTE, GEMM_MEMORY):
            for t in (ATTN_COMPUTE, ATTN_MEMORY):
                gpu0 = pp * (k0[g] + k0[t] + k0[COMM])
                gpu1 = pp * (k1[g] + k1[t] + k1[COMM])
                out.append(_crossing(gpu0, gpu1, k0[OVERHEAD], k1[OVERHEAD]))
    return np.stack(out)


def step_seconds(lines: Lines, a: Array, pp: int, overlap: bool = False) -> Array:
    """``t(a)`` from the lines of its terms (row by row: no stacked temporaries); the host's line
    in ``max`` with the GPU's instead of added when ``overlap`` (``gpucap.physics.steptime.combine``)."""
    k0, k1 = lines

    def v(row: int) -> Array:
        return k0[row] + k1[row] * a

    rooflines = np.maximum(v(GEMM_COMPUTE), v(GEMM_MEMORY)) + np.maximum(v(ATTN_COMPUTE), v(ATTN_MEMORY))
    gpu = pp * (rooflines + v(COMM))
    return np.maximum(gpu, v(OVERHEAD)) if overlap else gpu + v(OVERHEAD)


def active_line(lines: Lines, a: Array, pp: int, overlap: bool = False) -> tuple[Array, Array]:
    """Intercept and slope of ``t`` on the linear piece that holds ``a``."""
    _, intercept, slope = _on_piece(lines, a, pp, overlap)
    return intercept, slope


def _on_piece(lines: Lines, a: Array, pp: int, overlap: bool = False) -> tuple[Array, Array, Array]:
    """``t(a)`` and the intercept and slope of the linear piece that holds ``a``, in one pass over
    the terms: the larger roofline of the matmuls and of attention at ``a``, and, when the host
    overlaps the GPU, the larger of the host and the GPU. ``t(a)`` is taken on the piece's line,
    so it equals ``step_seconds`` to rounding."""
    k0, k1 = lines

    def v(row: int) -> Array:
        return k0[row] + k1[row] * a

    gemm = v(GEMM_COMPUTE) >= v(GEMM_MEMORY)
    attn = v(ATTN_COMPUTE) >= v(ATTN_MEMORY)

    def gpu(k: Array) -> Array:
        g = np.where(gemm, k[GEMM_COMPUTE], k[GEMM_MEMORY])
        t = np.where(attn, k[ATTN_COMPUTE], k[ATTN_MEMORY])
        return pp * (g + t + k[COMM])

    g0, g1, host = gpu(k0), gpu(k1), v(OVERHEAD)
    at_a = g0 + g1 * a  # the GPU's time on its piece
    if not overlap:
        return at_a + host, g0 + k0[OVERHEAD], g1 + k1[OVERHEAD]
    above = host > at_a
    return np.maximum(at_a, host), np.where(above, k0[OVERHEAD], g0), np.where(above, k1[OVERHEAD], g1)


def _at_each(lines: Lines) -> Lines:
    """The lines with an axis for several points ``a`` (the breaks) after the term axis."""
    return lines[0][:, None], lines[1][:, None]


def _piece(breaks: Array, positive: npt.NDArray[np.bool_]) -> Array:
    """A point inside the linear piece where a rising function turns positive, given its sign at
    the ``breaks`` (first axis; inf for none): between the last break where it is still <= 0
    (or 0) and the first where it is positive (or inf)."""
    lo = np.max(np.where(positive, 0.0, breaks), axis=0, initial=0.0, where=np.isfinite(breaks))
    hi = np.min(np.where(positive, breaks, np.inf), axis=0, initial=np.inf)
    return np.where(np.isfinite(hi), 0.5 * (lo + hi), 2.0 * lo + 1.0)


def closed_loop_root(
    dec: Lines,
    pre: Lines,
    *,
    pp: int,
    running: Array,
    chunks: Array,
    decoding: Array,
    t_request_s: float,
    overlap: bool = False,
    start: Array | None = None,
) -> Array:
    """Arrivals per step ``a`` solving ``F(a) = 0`` (module docstring); inf where F never turns
    positive (the loop is limited elsewhere: the prompt-token budget or the front end).

    ``start``: a guess (an earlier solution). The quadratic of the pieces that hold it is solved
    first; where its root lies on those same pieces, F is zero there, so it is the one root, and
    only the other elements look for their piece among the kinks."""
    loop = dict(pp=pp, running=running, chunks=chunks, decoding=decoding, t_request_s=t_request_s, overlap=overlap)
    if start is not None:
        root = _closed_loop_quadratic(dec, pre, start, **loop)  # type: ignore[arg-type]
        miss = np.flatnonzero(
            ~(_same_piece(dec, start, root, pp, overlap) & _same_piece(pre, start, root, pp, overlap))
        )
        if miss.size:
            lines = _taken(dec, miss, root.size), _taken(pre, miss, root.size)
            root[miss] = closed_loop_root(*lines, **{k: _taken(v, miss, root.size) for k, v in loop.items()})  # type: ignore[arg-type]
        return root
    breaks = np.concatenate([_kinks(dec, pp, overlap), _kinks(pre, pp, overlap)])
    breaks = breaks[np.isfinite(breaks).any(axis=tuple(range(1, breaks.ndim)))]  # kinks no element has
    safe = np.where(np.isfinite(breaks), breaks, 0.0)
    t, tp = step_seconds(_at_each(dec), safe, pp, overlap), step_seconds(_at_each(pre), safe, pp, overlap)
    f = safe * (chunks * tp + t_request_s) + safe * decoding * t - running * t
    mid = _piece(breaks, np.isfinite(breaks) & (f > 0))
    return _closed_loop_quadratic(dec, pre, mid, pp, running, chunks, decoding, t_request_s, overlap)


def _closed_loop_quadratic(
    dec: Lines,
    pre: Lines,
    mid: Array,
    pp: int,
    running: Array,
    chunks: Array,
    decoding: Array,
    t_request_s: float,
    overlap: bool,
) -> Array:
    """The root of ``F`` on the linear pieces of the two steps that hold ``mid`` (module
    docstring): ``qa a^2 + qb a + qc = 0``; inf where it has none, at least 0."""
    t0, t1 = active_line(dec, mid, pp, overlap)
    p0, p1 = active_line(pre, mid, pp, overlap)
    qa = chunks * p1 + decoding * t1
    qb = chunks * p0 + t_request_s + decoding * t0 - running * t1
    qc = -running * t0
    disc = np.sqrt(np.maximum(qb * qb - 4.0 * qa * qc, 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        root = np.where(qb >= 0, -2.0 * qc / (qb + disc), (disc - qb) / (2.0 * qa))
    return np.where(np.isnan(root), np.inf, np.maximum(root, 0.0))


def rate_cap_root(
    dec: Lines,
    *,
    pp: int,
    rate_per_s: float,
    overlap: bool = False,
    start: Array | None = None,
    within: Array | None = None,
) -> Array:
    """Largest ``a`` with ``a / t(a) <= rate`` (the front end passes at most ``rate`` requests/s);
    ``a / t(a)`` rises with ``a``. inf when there is no cap. ``start``: a guess whose piece is
    tried first (``closed_loop_root``). ``within``: the largest ``a`` the caller can use; where
    ``a / t(a)`` there is within the rate, the cap lies at or above it and inf is returned in its
    place (only the other elements are searched)."""
    if not np.isfinite(rate_per_s):
        return np.full_like(dec[0][0], np.inf)
    if within is not None:
        cap = np.full(within.shape, np.inf)
        over = np.flatnonzero(within > rate_per_s * step_seconds(dec, within, pp, overlap))
        if over.size:
            guess = None if start is None else start[over]
            lines = _taken(dec, over, within.size)
            cap[over] = rate_cap_root(lines, pp=pp, rate_per_s=rate_per_s, overlap=overlap, start=guess)
        return cap
    if start is not None:
        root = _rate_cap_line(dec, start, pp, rate_per_s, overlap)
        miss = np.flatnonzero(~_same_piece(dec, start, root, pp, overlap))
        if miss.size:
            root[miss] = rate_cap_root(_taken(dec, miss, root.size), pp=pp, rate_per_s=rate_per_s, overlap=overlap)
        return root
    breaks = _kinks(dec, pp, overlap)
    breaks = breaks[np.isfinite(breaks).any(axis=tuple(range(1, breaks.ndim)))]
    safe = np.where(np.isfinite(breaks), breaks, 0.0)
    positive = np.isfinite(breaks) & (safe - rate_per_s * step_seconds(_at_each(dec), safe, pp, overlap) > 0)
    return _rate_cap_line(dec, _piece(breaks, positive), pp, rate_per_s, overlap)


def _rate_cap_line(dec: Lines, mid: Array, pp: int, rate_per_s: float, overlap: bool) -> Array:
    """``a = rate t(a)`` on the linear piece of the step that holds ``mid``: ``rate t0 / (1 -
    rate t1)``; inf where the piece never reaches the rate."""
    t0, t1 = active_line(dec, mid, pp, overlap)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(1.0 > rate_per_s * t1, rate_per_s * t0 / (1.0 - rate_per_s * t1), np.inf)


def _same_piece(lines: Lines, a: Array, b: Array, pp: int, overlap: bool) -> npt.NDArray[np.bool_]:
    """Whether the step's linear piece at ``b`` is the one at ``a`` (false where ``b`` is not finite)."""
    a0, a1 = active_line(lines, a, pp, overlap)
    with np.errstate(invalid="ignore"):
        b0, b1 = active_line(lines, b, pp, overlap)
    return np.isfinite(b) & (a0 == b0) & (a1 == b1)


def _taken(v: Any, idx: Ints, size: int) -> Any:
    """The elements ``idx`` (last axis) of an array over the ``size`` elements (of each array of a
    tuple, such as lines); anything else (a scalar, a row shared by all) as it is."""
    if isinstance(v, tuple):
        return tuple(_taken(x, idx, size) for x in v)
    return np.take(v, idx, axis=-1) if isinstance(v, np.ndarray) and v.ndim and v.shape[-1] == size else v


# Prompt steps apart from decode steps ------------------------------------------------------
#
# The lines above put the prompt tokens of the average step, ``a I``, into every step. A real
# engine runs a prompt chunk in the step that admits it, and the steps between carry decodes
# only: with ``u = a s`` prompt chunks per step (s chunks per request) below one, a fraction u of
# the steps are prompt steps ``t_p(a)`` (B decodes plus one chunk) and the rest decode steps
# ``t_d(a)`` (B decodes), so a decoding sequence waits on average
#
#     T(a) = (1 - u) t_d(a) + u t_p(a)      (u < 1),      T(a) = t(a)      (u >= 1),
#
# where at u >= 1 every step carries prompt tokens and the average step ``t(a)`` holds. The two
# agree at u = 1 and wherever the step is linear; where a decode step is memory-bound and a
# prompt step compute-bound, T(a) > t(a) (Jensen: the step time is convex). Per second this is
# ``TPOT = t_d / (1 - n_p (t_p - t_d))`` with n_p = X s prompt steps per second.
#
# A prompt longer than the budget's room ``m = M - (k + 1) B`` is cut into s - 1 full chunks and
# a remainder, and the remainder rides beside the decodes (or beside the next prompt's first
# chunk) at about a decode step's cost. As the decodes see them, such prompts take
# ``s' = I / m`` full-room steps each (``s' = 1`` and the chunk I when I <= m): u = a s', which is
# continuous in I where the whole count s jumps from 1 to 2 one token past the room. The prompt's
# own time to its first token still counts s whole steps.


def _value_slope(lines: Lines, a: Array, pp: int, overlap: bool = False) -> tuple[Array, Array]:
    """``t(a)`` and the slope of its piece there (``_on_piece``)."""
    t, _, slope = _on_piece(lines, a, pp, overlap)
    return t, slope


def separated_step(
    decode_only: Lines,
    pre: Lines,
    mixed: Lines,
    a: Array,
    *,
    chunks: Array,
    pp: int,
    overlap: bool = False,
    at_pre: tuple[Array, Array] | None = None,
) -> tuple[Array, Array, Array]:
    """``T(a)``, its slope, and the prompt-step share ``u`` (capped at 1); see above. ``at_pre``:
    the prompt step's value and slope at ``a`` where the caller has them."""
    u = a * chunks
    td, td1 = _value_slope(decode_only, a, pp, overlap)
    tp, tp1 = _value_slope(pre, a, pp, overlap) if at_pre is None else at_pre
    tm, tm1 = _value_slope(mixed, a, pp, overlap)
    apart = u < 1.0
    t = np.where(apart, (1.0 - u) * td + u * tp, tm)
    slope = np.where(apart, -chunks * td + (1.0 - u) * td1 + chunks * tp + u * tp1, tm1)
    return t, slope, np.minimum(u, 1.0)


def _rising_root(fun: Callable[[Array, Ints], tuple[Array, Array]], hi: Array, start: Array) -> Array:
    """Root of a rising function on [0, hi]; ``hi`` where the function is still <= 0 there.

    Newton's method inside a shrinking bracket; where a Newton step leaves the bracket (at a
    kink, where the function turns steeper), the Illinois variant of false position between the
    bracket's ends, which keeps converging fast from one side. ``fun(a, idx)`` evaluates the
    elements ``idx`` at ``a``; each iteration evaluates only the elements not yet converged (all of
    them, and keeps those, while they are more than half: cheaper than gathering copies)."""
    every = np.arange(hi.size)
    f_hi, _ = fun(hi, every)
    act = every[f_hi > 0]  # where F is still <= 0 at hi, the answer is hi
    if act.size == 0:
        return hi.copy()

    def at(points: Array, idx: Ints) -> tuple[Array, Array]:
        """``fun`` at ``points[idx]``: at every element (no gathered copies) while most move."""
        if 2 * idx.size > hi.size:
            f, slope = fun(points, every)
            return f[idx], slope[idx]
        return fun(points[idx], idx)

    lo, top = np.zeros_like(hi), hi.copy()
    # F at 0 is not evaluated: the first Newton point moves one end of the bracket, and until the
    # low end has moved false position has no value there and halves the bracket instead
    f_lo, f_top = np.full_like(hi, np.nan), f_hi.copy()
    side = np.zeros(hi.size, dtype=np.int8)  # which end moved last: -1 low, +1 high
    a = np.clip(start, 0.0, hi)
    for _ in range(NEWTON_ITERATIONS):
        if act.size == 0:
            break
        x = a[act]
        f, slope = at(a, act)
        low = f <= 0
        # Illinois: an end that stays put twice in a row has its value halved
        f_top[act] = np.where(low & (side[act] == -1), 0.5 * f_top[act], f_top[act])
        f_lo[act] = np.where(~low & (side[act] == 1), 0.5 * f_lo[act], f_lo[act])
        lo[act], f_lo[act] = np.where(low, x, lo[act]), np.where(low, f, f_lo[act])
        top[act], f_top[act] = np.where(low, top[act], x), np.where(low, f_top[act], f)
        side[act] = np.where(low, -1, 1)
        lower, t, fl, ft = lo[act], top[act], f_lo[act], f_top[act]
        with np.errstate(divide="ignore", invalid="ignore"):
            step = x - f / slope
            secant = lower - fl * (t - lower) / (ft - fl)
        inside = np.isfinite(step) & (step > lower) & (step < t)
        fallback = np.where(np.isfinite(secant) & (secant > lower) & (secant < t), secant, 0.5 * (lower + t))
        tol = ROOT_TOLERANCE * np.maximum(x, 1e-12)
        # converged: the step taken, the bracket, or Newton's own step (its distance to the root
        # on this piece) within the tolerance; the last stops, at Newton's point, an element
        # whose Newton step lands on the bracket's end by rounding, where false position would
        # creep on
        newton = np.where(np.isfinite(step), np.abs(step - x), np.inf) <= tol
        new = np.where(inside, step, np.where(newton, np.clip(step, lower, t), fallback))
        a[act] = new
        act = act[(np.abs(new - x) > tol) & (t - lower > tol) & ~newton]
    return np.where(f_hi <= 0, hi, a)


NEWTON_ITERATIONS = 40
ROOT_TOLERANCE = 1e-9  # relative change of a step at which the root counts as found


class ApartLoop(NamedTuple):
    """The closed loop ``separated_root`` solves, per element: ``running`` requests R, ``chunks``
    s per prompt, ``decoding`` O - 1 decode steps a request takes, the front end's time per
    request ``t_request_s`` and its rate, the budget's cap on ``a``; ``pp`` stages, and whether
    the host's work overlaps the device's (``overlap``)."""

    pp: int
    running: Array
    chunks: Array
    decoding: Array
    t_request_s: Array
    rate_per_s: float
    a_budget: Array
    overlap: bool = False


def separated_root(
    decode_only: Lines,
    pre: Lines,
    mixed: Lines,
    loop: ApartLoop,
    *,
    start: Array,
    full: Lines | None = None,
    share: Array | None = None,
) -> Array:
    """Arrivals per step of the closed loop with prompt steps apart from decode steps:

        F(a) = a (s t_p(a) + t_request) + (a (O - 1) - R) T(a) = 0,

    capped by the prompt-token budget (``a_budget``) and the front end (``a / T(a) <= rate``).
    ``start``: the averaged-step solution, close to the root. ``full``, ``share``: the prompt step
    and the steps per prompt as the decodes see them (full-room chunks, ``s' = I / m``; see above),
    ``pre`` and ``chunks`` when not given."""
    pp, running, chunks, decoding, t_request_s, rate_per_s, a_budget, overlap = loop
    full = pre if full is None else full
    share = chunks if share is None else share

    def part(v: Any, idx: Ints) -> Any:
        if idx.size == running.size:  # every element (the bracket's ends, the first steps): no copy
            return v
        return _taken(v, idx, running.size)

    def lines_at(lines: Lines, idx: Ints) -> Lines:
        return part(lines[0], idx), part(lines[1], idx)

    one_prompt_step = full is pre  # whole chunks as the decodes see them: one prompt step, valued once

    def closed(a: Array, idx: Ints) -> tuple[Array, Array]:
        ch, dec, run, req = part(chunks, idx), part(decoding, idx), part(running, idx), part(t_request_s, idx)
        d, f, m = lines_at(decode_only, idx), lines_at(full, idx), lines_at(mixed, idx)
        tp, tp1 = _value_slope(lines_at(pre, idx), a, pp, overlap)
        at_pre = (tp, tp1) if one_prompt_step else None
        t, t1, _ = separated_step(d, f, m, a, chunks=part(share, idx), pp=pp, overlap=overlap, at_pre=at_pre)
        f = a * (ch * tp + req) + (a * dec - run) * t
        return f, ch * tp + req + a * ch * tp1 + dec * t + (a * dec - run) * t1

    a = _rising_root(closed, a_budget, start)
    if not np.isfinite(rate_per_s):
        return a
    # the step a decoding sequence waits for mixes the decode-only and prompt steps, or is the
    # averaged step, so it is never shorter than the shortest of them: the front end can cap only
    # the elements where a over that shortest step passes its rate
    shortest = np.minimum(step_seconds(decode_only, a, pp, overlap), step_seconds(full, a, pp, overlap))
    over = np.flatnonzero(a > rate_per_s * np.minimum(shortest, step_seconds(mixed, a, pp, overlap)))
    if over.size:
        n = running.size
        d, f, m, sh = (_taken(v, over, n) for v in (decode_only, full, mixed, share))

        def front(x: Array, idx: Ints) -> tuple[Array, Array]:
            def sub(v: Any) -> Any:
                return v if idx.size == over.size else _taken(v, idx, over.size)

            t, t1, _ = separated_step(sub(d), sub(f), sub(m), x, chunks=sub(sh), pp=pp, overlap=overlap)
            return x - rate_per_s * t, 1.0 - rate_per_s * t1

        a[over] = np.minimum(a[over], _rising_root(front, a[over], a[over]))
    return a
