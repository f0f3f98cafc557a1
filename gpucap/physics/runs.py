"""Finite runs of one replica, as benchmarks publish them: one static batch run to the end, the
drain of a batch when no request arrives, and "send N prompts at once" saturation runs
(DESIGN.md section 5). They build on the steady state in ``gpucap.physics.batching``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpucap.config import Hardware
from gpucap.physics.batching import LoadPoint, closed_loop, step_at
from gpucap.physics.coefficients import Coefficients
from gpucap.physics.extras import NO_EXTRAS, Extras
from gpucap.physics.memory import ArrayLike
from gpucap.physics.requests import Requests
from gpucap.physics.solvers import frontend_rate
from gpucap.physics.step import Array, prefill_pairs_per_layer

DRAIN_NODES = 16
LENGTH_DISTRIBUTIONS = ("fixed", "uniform", "dataset")


def static_batch(hw: Hardware, coef: Coefficients, requests: Requests, *, batch: ArrayLike) -> LoadPoint:
    """One batch of B requests run to the end together (static batching, e.g. trtllm-bench
    ``--concurrency`` runs reported per batch): the whole prefill in chunks of M tokens, then
    O - 1 decode steps at batch B with mean context I + O / 2.

    TTFT = ceil(B I / M) x t_step(M prefill tokens); TPOT = t_step(B decode);
    throughput = B O / (TTFT + (O - 1) TPOT). With images, I includes their tokens and the
    prefill steps encode the batch's images; with speculation, ``(O - 1) / tau`` decode steps
    and TPOT = t_step / tau. ``requests.max_running`` plays no part (the batch is B); cached
    tokens are refused.
    """
    requests.refuse("static_batch", extras=False)
    ex = requests.extras
    bb, i, o, _, _ = requests.arrays(batch)
    i = i + ex.image_tokens(hw)
    m = float(hw.engine.max_num_batched_tokens or 8192)
    total_prefill = bb * i
    chunks = np.maximum(1.0, np.ceil(total_prefill / m))
    pairs = bb * prefill_pairs_per_layer(hw.spec, i)
    zero = 0.0 * bb
    chunk_images = bb * ex.images_per_request / chunks
    pre = step_at(
        hw,
        coef,
        batch=zero,
        context=i,
        prefill=total_prefill / chunks,
        pairs=pairs / chunks,
        ex=ex,
        images=chunk_images,
    )
    dec = step_at(hw, coef, batch=bb, context=i + o / 2.0, prefill=zero, pairs=zero, ex=ex)
    ttft = chunks * pre.total_s
    duration = ttft + np.maximum(o - 1.0, 0.0) / ex.tokens_per_step * dec.total_s
    x = bb / duration
    return LoadPoint(
        concurrency=bb,
        running=bb,
        decode_batch=bb,
        ttft_s=ttft,
        tpot_s=dec.total_s / ex.tokens_per_step,
        requests_per_s=x,
        output_tokens_per_s=x * o,
        decode_step=dec,
        prefill_step=pre,
    )


def _decode_steps_s(hw: Hardware, coef: Coefficients, *, batch: Array, context: Array, ex: Extras) -> Array:
    zero = 0.0 * batch
    return step_at(hw, coef, batch=batch, context=context, prefill=zero, pairs=zero, ex=ex).total_s


def drain_time(
    hw: Hardware,
    coef: Coefficients,
    *,
    batch: Array,
    input_len: Array,
    output_len: Array,
    lengths: str,
    staggered: bool,
    extras: Extras = NO_EXTRAS,
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
    With speculation every step emits tau tokens per sequence, so each count of steps above is
    divided by tau. ``input_len`` is the whole prompt (image tokens included).
    """
    ex = Extras(speculative=extras.speculative)  # the images are in input_len; none is encoded
    tau = ex.tokens_per_step
    b = np.maximum(batch, 1.0)
    ctx = input_len + output_len / 2.0
    if lengths == "fixed" and not staggered:
        return np.maximum(output_len - 1.0, 0.0) / tau * _decode_steps_s(hw, coef, batch=b, context=ctx, ex=ex)
    nodes = (np.arange(DRAIN_NODES) + 0.5) / DRAIN_NODES  # midpoint rule on [0, 1]
    if lengths in ("fixed", "uniform"):
        span = output_len if lengths == "fixed" else 2.0 * output_len
        shrinking = np.maximum(b[..., None] * (1.0 - nodes), 1.0)
        t = _decode_steps_s(hw, coef, batch=shrinking, context=ctx[..., None], ex=ex)
        return span / tau * t.mean(axis=-1)
    log_b = np.log(b)
    t = _decode_steps_s(hw, coef, batch=np.exp(log_b[..., None] * nodes), context=ctx[..., None], ex=ex)
    return output_len / tau * log_b * t.mean(axis=-1)


def saturation_run(
    hw: Hardware, coef: Coefficients, requests: Requests, *, num_prompts: ArrayLike, lengths: str = "fixed"
) -> LoadPoint:
    """N prompts sent at once to one replica ("max throughput" runs), throughput = N O / duration.

    The run the benchmark makes: R = min(N, max_running) requests start with a prefill burst of
    R x I tokens; while requests wait, the engine runs R in steady state (each finished request
    replaced, throughput X_ss), which admits the other N - R in ``(N - R) / X_ss``; then the last
    R drain (``drain_time``). With ``lengths="dataset"`` the output lengths are taken as
    exponential with mean O, so the drain is the long tail where a few long requests run alone;
    ``"uniform"`` takes them uniform on [0, 2 O].

        duration = burst(R I) + (N - R) / X_ss + drain(R)

    With N infinite the run is its steady state at the full batch: throughput ``X_ss O``, TTFT
    without bound.

    Reported TTFT is then mostly queueing: the mean wait ``(N - R) / (2 X_ss)`` plus the prefill.
    When all N run at once, the burst's s chunk steps of t seconds hand out first tokens as they
    finish: TTFT = (s + 1) t / 2 on average.
    """
    if lengths not in LENGTH_DISTRIBUTIONS:
        raise ValueError(f"lengths must be one of {', '.join(LENGTH_DISTRIBUTIONS)}, got {lengths!r}")
    requests.refuse("saturation_run", extras=False)
    extras = requests.extras
    n, i, o, cap, _ = requests.arrays(num_prompts)
    running = np.maximum(np.minimum(n, cap), 1.0)
    steady = closed_loop(hw, coef, Requests(i, o, extras=extras), concurrency=running)
    waiting = np.maximum(n - running, 0.0)
    queue_wait = waiting / (2.0 * steady.requests_per_s)
    finite = np.isfinite(n)
    # without an end to the prompts (N infinite) the run is its steady state at the full batch:
    # no burst or drain to value, and an unbounded wait
    tput, ttft = np.where(finite, np.nan, steady.output_tokens_per_s), steady.ttft_s + queue_wait
    if finite.any():
        burst = static_batch(hw, coef, Requests(i, 1.0 + 0.0 * o, extras=extras), batch=running)
        with np.errstate(invalid="ignore"):
            admit = np.where(waiting > 0, waiting / steady.requests_per_s, 0.0)
        prompt = i + extras.image_tokens(hw)
        kw: dict[str, Any] = dict(batch=running, input_len=prompt, output_len=o, lengths=lengths, extras=extras)
        drain = np.where(
            waiting > 0, drain_time(hw, coef, staggered=True, **kw), drain_time(hw, coef, staggered=False, **kw)
        )
        with np.errstate(invalid="ignore"):
            duration = np.maximum(burst.ttft_s + admit + drain, n / frontend_rate(hw, coef))
        tput = np.where(finite, n * o / np.where(finite, duration, 1.0), steady.output_tokens_per_s)
        # nobody waits: the burst's s chunk steps of t each hand out first tokens as they finish,
        # on average after (s + 1) / 2 steps = (s t + t) / 2 (one step when s = 1)
        first_tokens_s = 0.5 * (burst.ttft_s + burst.prefill_step.total_s)
        ttft = np.where(waiting > 0, ttft, first_tokens_s)
    x = tput / o
    return LoadPoint(
        concurrency=n,
        running=running,
        decode_batch=steady.decode_batch,
        ttft_s=ttft,
        tpot_s=steady.tpot_s,
        requests_per_s=x,
        output_tokens_per_s=tput,
        decode_step=steady.decode_step,
        prefill_step=steady.prefill_step,
    )
