"""A closed loop with fixed lengths runs in waves (DESIGN.md section 8): requests that start
together finish together, so their replacements are sent together, pass the HTTP server
together, prefill together and decode together. TTFT then grows with the concurrency, by about
one prefill step per ``max_num_batched_tokens`` of prompts in the wave, instead of staying flat as
in the desynchronized steady state (``gpucap.physics.batching.closed_loop``). Measured on vLLM's server
(benchmarks/README.md): 256-token prompts, 64 output tokens, TTFT 0.19 s at concurrency 1 and
1.8 s at 16.

One wave of R = min(C, max_running) requests, prompt I, output O, token budget M:

- the server: ``t_frontend + R x t_request`` (R requests share its core and leave together);
- prefill: ``K = R I / M`` budget-full steps of ``tau_M`` each (one step of ``R I`` tokens when
  ``K < 1``), first come first served: the j-th request's prompt ends in step ``j I / M``, after
  ``s = max(I / M, 1)`` steps of its own. Its first token comes on average after
  ``(max(K, 1) + s) / 2`` steps (``(K + 1) / 2`` for prompts within the budget, K for one request
  whose prompt takes K chunks); each step's chunk carries the prompt's mean causal pairs per
  token, ``P(I) / I`` (a later chunk of a long prompt attends to the earlier ones);
- decode: the last chunk's requests decode ``O - 1`` steps of ``t_dec`` at batch R, context
  ``I + O / 2``; the earlier ones decode through the later prefill steps, ``(K - s) / 2`` of them
  on average, so ``TPOT = [(K - s)/2 tau_M + (O - 1 - (K - s)/2) t_dec] / (O - 1)``;
- the cycle ``front end + prefill + (O - 1) t_dec`` carries R requests: ``X = R / cycle``.

Requests beyond R wait ``(C - R) / X`` for a slot.
"""

from __future__ import annotations

import numpy as np

from gpucap.config import Hardware
from gpucap.physics.batching import LoadPoint, frontend_latency_s, step_at
from gpucap.physics.coefficients import Coefficients, front_end
from gpucap.physics.memory import ArrayLike
from gpucap.physics.requests import Requests
from gpucap.physics.step import prefill_pairs_per_layer


def wave_loop(hw: Hardware, coef: Coefficients, requests: Requests, *, concurrency: ArrayLike) -> LoadPoint:
    """TTFT, TPOT and throughput of a fixed-length closed loop that runs in waves (module
    docstring); the load and every length may be an array. Text only, nothing cached: the
    requests' extras and cached tokens are refused."""
    requests.refuse("wave_loop", extras=True)
    c, i, o, cap, _ = requests.arrays(concurrency)
    r = np.maximum(np.minimum(c, cap), 1.0)
    m = float(hw.engine.max_num_batched_tokens or 8192)
    wave = r * i
    k = wave / m
    chunk = np.minimum(wave, m)  # prompt tokens of a budget-full step (the whole wave if smaller)
    pairs = chunk / i * prefill_pairs_per_layer(hw.spec, i)
    zero = 0.0 * c
    full = step_at(hw, coef, batch=zero, context=i, prefill=chunk, pairs=pairs)
    dec = step_at(hw, coef, batch=r, context=i + o / 2.0, prefill=zero, pairs=zero)
    tau, t_dec = full.total_s, dec.total_s
    server = frontend_latency_s(hw, coef) + (r - 1.0) * front_end(hw.engine, coef).serial_s
    own = np.maximum(i / m, 1.0)  # steps one prompt takes
    prefill_s = np.maximum(k, 1.0) * tau
    first = server + 0.5 * (np.maximum(k, 1.0) + own) * tau
    during = np.minimum(0.5 * np.maximum(k - own, 0.0), np.maximum(o - 1.0, 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(o > 1.0, (during * tau + (o - 1.0 - during) * t_dec) / (o - 1.0), t_dec)
    cycle = server + prefill_s + np.maximum(o - 1.0, 0.0) * t_dec
    x = r / cycle
    wait = np.where(c > r, (c - r) / x, 0.0)
    return LoadPoint(
        concurrency=c,
        running=r,
        decode_batch=r,
        ttft_s=first + wait,
        tpot_s=tpot,
        requests_per_s=x,
        output_tokens_per_s=x * o,
        decode_step=dec,
        prefill_step=full,
    )
