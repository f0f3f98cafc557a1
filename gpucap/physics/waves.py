"""A closed loop with fixed lengths (DESIGN.md section 8): requests that start together finish
together, so their replacements are sent together, pass the HTTP server together and prefill
together. A run of N prompts at concurrency C has one such wave, the first C requests, and then a
convoy: where a wave's prompts take more than one step, its requests get their first tokens steps
apart, finish as far apart, and come back in groups of the prompts one step finished, each group
waiting for the prompt step of the one before it. Measured on vLLM's server (benchmarks/README.md,
"Waves of long fixed-length prompts break up"): 384-token prompts on a 512-token budget, 4 and 8
in flight, the first wave's mean TTFT 0.88 and 1.32 s, every later wave's about 0.5 s, one request
of each after one prompt step and the others after two. Where the whole wave fits one step it
stays a wave (``make e2e``: 256-token prompts on a 2,048-token budget, mean TTFT 0.20 s at 1 in
flight and 1.31 s at 8, all eight prompts in one step).

An engine that runs prompts first (SGLang: a step with prompt chunks decodes nothing) keeps its
waves: the requests whose prompts finished steps apart decode in the same steps after them and
finish together, so every wave is the first (the step-level simulation of Qwen3-32B on 4 L40S,
253 / 66 tokens, 124 in flight: every wave's mean TTFT 3.62 s, the formula's 3.61 s).

R = min(C, max_running) requests run, prompt I, output O, token budget M; the front end passes
a request in ``t_fe = t_frontend + t_request`` and each further one of a group in ``t_request``.

The first wave (``_first_wave``): ``K = R I / M`` budget-full steps of ``tau_M`` each (one step of
``R I`` tokens when ``K < 1``), first come first served: the j-th request's prompt ends in step
``j I / M``, after ``s = max(I / M, 1)`` steps of its own, so its first token comes on average
after ``(max(K, 1) + s) / 2`` steps; each chunk carries the prompt's mean causal pairs per token,
``P(I) / I``. The last requests to get their first token decode ``O - 1`` steps of ``t_dec`` at
batch R; the earlier ones decode through the later prefill steps, ``(K - s) / 2`` of them on
average: ``TPOT = [(K - s)/2 tau_M + (O - 1 - (K - s)/2) t_dec] / (O - 1)``; the cycle ``t_fe +
(R - 1) t_request + max(K, 1) tau_M + (O - 1) t_dec`` carries R requests.

The convoy after it (``_convoy``):

- a group is the g prompts one step holds beside the others' decodes, ``g I + (R - g) <= M``:
  ``g = floor((M - R) / (I - 1))`` within [1, R], ``n = R / g`` groups; a group's prompts take
  ``s = max(g I / (M - R + g), 1)`` steps of ``tau`` (its chunk at batch R - g decoding);
- the first group of the cycle finds only decode steps of the others (``t_gap``, batch R - g)
  when it arrives ``t_arrive = t_fe + (g - 1) t_request`` after its predecessors finished (at the
  end of a step), and starts at the end of the step then in progress: ``ceil(t_arrive / t_gap)``
  steps later for a front end that takes the same time for every request. It does not (parsing,
  tokenizing and the API server's event loop vary from request to request; on vLLM's CPU server a
  lone request's TTFT spreads by ~40 ms, P99 210 ms against a 172 ms mean), so the count is taken
  at its mean over a spread of one step, ``b = t_arrive / t_gap + 1/2``, at least 1 (an
  assumption: exact for a uniform spread; at once where it is the only group, the engine idle).
  Its TTFT is ``b t_gap + s tau``;
- the groups after it arrive while the prompts ahead are prefilled: the next group's predecessors
  finished one step after this one's, so it arrives during this group's prompt step, and the b
  groups whose predecessors finished in the decode steps before the first group started queue
  together. Group j waits for the step in progress and the ``min(b, j - 1) - 1`` whole groups
  ahead of it: ``TTFT_j = (1 + (min(b, j - 1) - 1) s + s) tau``, ``2 tau`` for b = 1 and one
  step a group;
- where the other groups' prompt steps fill a whole life, ``(n - 1) s >= O - 1``, every step
  carries prompts (the loop is prefill-bound) and TTFT is the cycle less a life,
  ``(n s - (O - 1)) tau`` at least;
- a cycle holds every group's prompt steps once; those a request waited through are in its TTFT,
  the others in its life: ``d = (n - 1) s - (n - 1) / n (1 + (w - 1) s)`` of them on average, w
  the mean of ``min(b, j - 1)`` over the groups after the first, at most O - 1, and
  ``TPOT = [d tau + (O - 1 - d) t_dec] / (O - 1)``, the life's average step (the point's
  ``decode_step``, part by part); the cycle ``TTFT + (O - 1) TPOT`` carries R requests.

Against the step-level simulation (``gpucap.queueing.simulate``; ``benchmarks/waves.py``,
benchmarks/README.md, "Waves after the first: the convoy"), runs of 8 C prompts of vLLM on 70
cells (8B and 70B, 128-16,000-token prompts, 2-64 in flight): mean TTFT within 20% in 97% of them
(worst 0.74), TPOT within 10% in 99% (worst 1.17), where repeating the first wave was within 20%
in 61% (worst 5.7x). The simulation's convoys sometimes merge further (a prompt chunked across
two steps leaves a short one; a group that takes longer through the front end than a decode
step fragments), and its TTFT is then 15-35% higher. A run of N prompts is the
first wave for its C requests and the convoy for the other N - C: TTFT and TPOT mixed by those
shares, the run's time the sum of both phases'. Requests beyond R wait ``(C - R) / X`` for a slot;
while they wait, the slots a group frees go first to those already in the engine's queue, whose
prompts ride in the next step without the front end or a group ahead: a share ``q = min((C - R) /
g, 1)`` of each group, whose waits above are taken as ``(1 - q)`` of theirs (``TTFT = s tau`` after
the wait for a slot once C - R >= g, and a life then holds all ``(n - 1) s`` prompt steps of the
others).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from gpucap.config import Hardware
from gpucap.physics.batching import LoadPoint, step_at
from gpucap.physics.coefficients import Coefficients, front_end
from gpucap.physics.memory import ArrayLike
from gpucap.physics.requests import Requests
from gpucap.physics.step import Array, StepTime, prefill_pairs_per_layer


@dataclasses.dataclass(frozen=True)
class _Phase:
    """Mean TTFT (before any wait for a slot), TPOT and requests/s of the R running requests, the
    step that carries their prompts and the average step of a life."""

    ttft_s: Array
    tpot_s: Array
    requests_per_s: Array
    prefill_step: StepTime
    decode_step: StepTime


def wave_loop(
    hw: Hardware, coef: Coefficients, requests: Requests, *, concurrency: ArrayLike, num_prompts: ArrayLike = np.inf
) -> LoadPoint:
    """TTFT, TPOT and throughput of a fixed-length closed loop (module docstring): a run of
    ``num_prompts`` requests (inf: the steady state, the convoy alone), its first wave and the
    convoy after it; the load, ``num_prompts`` and every length may be arrays. Text only, nothing
    cached: the requests' extras and cached tokens are refused."""
    requests.refuse("wave_loop", extras=True)
    c, n, i, o, cap, _ = requests.arrays(concurrency, num_prompts)
    if np.any(~(n >= 1.0)):
        raise ValueError(f"num_prompts must be at least 1 (inf: the steady state), got {num_prompts!r}")
    r = np.maximum(np.minimum(c, cap), 1.0)
    m = float(hw.engine.max_num_batched_tokens or 8192)
    dec = step_at(hw, coef, batch=r, context=i + o / 2.0, prefill=0.0 * c, pairs=0.0 * c)
    share = np.minimum(c / n, 1.0)  # of the run's requests, the first wave's
    # prefill first (SGLang): no decode beside the prompts, so a wave's requests, whose prompts
    # finished steps apart, decode in the same steps and finish together: every wave is the first
    if hw.engine.prefill_first:
        first = later = _first_wave(hw, coef, r, i, o, m, dec)
    else:
        later = _convoy(hw, coef, r, i, o, m, dec, waiting=c - r)
        # an endless run (the estimator's) has no first wave to value
        first = _first_wave(hw, coef, r, i, o, m, dec) if np.any(share > 0.0) else later
    x = 1.0 / (share / first.requests_per_s + (1.0 - share) / later.requests_per_s)
    wait = np.where(c > r, (c - r) / x, 0.0)
    return LoadPoint(
        concurrency=c,
        running=r,
        decode_batch=r,
        ttft_s=share * first.ttft_s + (1.0 - share) * later.ttft_s + wait,
        tpot_s=share * first.tpot_s + (1.0 - share) * later.tpot_s,
        requests_per_s=x,
        output_tokens_per_s=x * o,
        decode_step=_blend(share, first.decode_step, later.decode_step),
        prefill_step=_blend(share, first.prefill_step, later.prefill_step),
    )


def _first_wave(hw: Hardware, coef: Coefficients, r: Array, i: Array, o: Array, m: float, dec: StepTime) -> _Phase:
    """The first wave: R prompts sent at once (module docstring)."""
    wave = r * i
    k = wave / m
    chunk = np.minimum(wave, m)  # prompt tokens of a budget-full step (the whole wave if smaller)
    full = step_at(
        hw, coef, batch=0.0 * r, context=i, prefill=chunk, pairs=chunk / i * prefill_pairs_per_layer(hw.spec, i)
    )
    tau = full.total_s
    fe = front_end(hw.engine, coef)
    server = fe.latency_s + r * fe.serial_s  # R requests share the server's core
    own = np.maximum(i / m, 1.0)  # steps one prompt takes
    ttft = server + 0.5 * (np.maximum(k, 1.0) + own) * tau
    during = np.minimum(0.5 * np.maximum(k - own, 0.0), np.maximum(o - 1.0, 0.0))
    cycle = server + np.maximum(k, 1.0) * tau + np.maximum(o - 1.0, 0.0) * dec.total_s
    life = _life_step(during, full, dec, o)
    return _Phase(ttft, life.total_s, r / cycle, full, life)


def group_size(budget_tokens: ArrayLike, running: ArrayLike, input_len: ArrayLike) -> Array:
    """Prompts of ``input_len`` tokens that one step of ``budget_tokens`` holds beside the decodes
    of the other ``running`` requests, ``g I + (R - g) <= M``: ``floor((M - R) / (I - 1))`` within
    [1, R] (module docstring)."""
    r = np.asarray(running, dtype=float)
    i = np.asarray(input_len, dtype=float)
    return np.clip(np.floor((np.asarray(budget_tokens, dtype=float) - r) / np.maximum(i - 1.0, 1e-9)), 1.0, r)


def _convoy(
    hw: Hardware, coef: Coefficients, r: Array, i: Array, o: Array, m: float, dec: StepTime, *, waiting: Array
) -> _Phase:
    """The waves after the first: groups of the prompts one step holds, each waiting for the
    prompt step of the group before it; where ``waiting`` requests queue for a slot, a slot that
    frees goes to one of them, whose prompt rides in the next step (module docstring)."""
    g = group_size(m, r, i)
    room = m - (r - g)
    own = np.maximum(g * i / room, 1.0)  # steps one group's prompts take
    chunk = np.minimum(g * i, room)
    pairs = chunk / i * prefill_pairs_per_layer(hw.spec, i)
    context = i + o / 2.0
    step = step_at(hw, coef, batch=r - g, context=context, prefill=chunk, pairs=pairs)
    tau = step.total_s
    gap = step_at(hw, coef, batch=r - g, context=context, prefill=0.0 * r, pairs=0.0 * r).total_s
    fe = front_end(hw.engine, coef)
    arrive = fe.latency_s + g * fe.serial_s  # the group's last request through the front end
    groups = r / g
    alone = groups <= 1.0 + 1e-9  # one group: nothing else runs, its prompts start on arrival
    b = np.maximum(arrive / np.maximum(gap, 1e-12) + 0.5, 1.0)
    # the share of a group's freed slots that requests already queued take at the next step
    queued = np.clip(waiting / g, 0.0, 1.0)
    head = (1.0 - queued) * np.where(alone, arrive, b * gap) + own * tau
    ahead = groups - 1.0  # groups behind the first
    with np.errstate(divide="ignore", invalid="ignore"):
        groups_waited = np.where(b < ahead, (0.5 * b * (b + 1.0) + (ahead - b) * b) / ahead, 0.5 * groups)
    # prompt steps of the others a later group waits through: the one in progress, whole groups
    waited = (1.0 - queued) * (1.0 + (groups_waited - 1.0) * own)
    member = (waited + own) * tau
    ttft = np.where(alone, head, (head + ahead * member) / groups)
    ttft = np.maximum(ttft, (groups * own - np.maximum(o - 1.0, 0.0)) * tau)  # prefill-bound
    # a life holds the other groups' prompt steps but those a later group waited through
    others = ahead * own - np.where(alone, 0.0, ahead / groups * waited)
    during = np.clip(others, 0.0, np.maximum(o - 1.0, 0.0))
    life = _life_step(during, step, dec, o)
    cycle = ttft + np.maximum(o - 1.0, 0.0) * life.total_s
    return _Phase(ttft, life.total_s, r / cycle, step, life)


def _life_step(during: Array, prompt: StepTime, dec: StepTime, o: Array) -> StepTime:
    """The average step of a life of O - 1 steps, ``during`` of them ``prompt`` steps and the rest
    ``dec``, part by part: its ``total_s`` is the TPOT (one output token: the decode step)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(o > 1.0, during / (o - 1.0), 0.0)
    return _blend(share, prompt, dec)


def _blend(share: Array, a: StepTime, b: StepTime) -> StepTime:
    """``share`` of ``a`` and the rest of ``b``, part by part."""
    return StepTime(
        **{f.name: share * getattr(a, f.name) + (1.0 - share) * getattr(b, f.name) for f in dataclasses.fields(a)}
    )
