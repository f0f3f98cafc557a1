"""Where the TTFT curve bends, and why: the text and the mark the estimator page shows beside the
curves, computed from the same closed-loop points it draws.

The knee is the first concurrency at which TTFT reaches ``KNEE_FACTOR`` times its value for a
lone request. Its cause is read off the load point there:

- ``waves``: a fixed-length load test, whose requests start together and come back together:
  C prompts that fit one step share it, and more come back in groups of the prompts one step
  holds, each group waiting for the prompt steps of those before it (``gpucap.physics.waves``);
- ``batch slots``: more requests than the engine runs at once (``max_num_seqs`` or what the KV
  cache holds): the rest wait for a slot;
- ``token budget``: the prompt tokens that arrive per step use up ``max_num_batched_tokens``
  beside the decodes, and prompts queue for it (with fixed lengths too: every step then carries
  prompts);
- ``host``: the HTTP server's core is nearly full (``t_request_s`` per request);
- ``prefill steps``: other requests' prompt steps that a new request waits behind.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpucap.config import Hardware
from gpucap.physics.batching import LoadPoint
from gpucap.physics.coefficients import Coefficients, front_end
from gpucap.physics.waves import group_size

KNEE_FACTOR = 2.0


@dataclass(frozen=True)
class Knee:
    concurrency: float  # all replicas
    cause: str
    text: str


def ttft_knee(
    hw: Hardware,
    coef: Coefficients,
    point: LoadPoint,
    *,
    input_len: float,
    replicas: int = 1,
    max_running: float = np.inf,
    lengths: str = "varied",
) -> Knee | None:
    """The knee of a closed-loop curve (``point`` over concurrencies per replica), or None when
    TTFT stays within ``KNEE_FACTOR`` of a lone request's over the whole curve."""
    conc = np.asarray(point.concurrency, dtype=float).ravel()
    ttft = np.asarray(point.ttft_s, dtype=float).ravel()
    if conc.size < 2 or not np.isfinite(ttft[0]):
        return None
    over = np.flatnonzero(ttft >= KNEE_FACTOR * ttft[0])
    if over.size == 0:
        return None
    k = int(over[0])
    c = float(conc[k])
    budget = float(hw.engine.max_num_batched_tokens or 8192)
    x = float(np.asarray(point.requests_per_s).ravel()[k])
    tpot = float(np.asarray(point.tpot_s).ravel()[k])
    batch = float(np.asarray(point.decode_batch).ravel()[k])
    total = c * replicas
    lone = ttft[0] * 1e3
    wall = _wall(hw, coef, point, input_len=input_len, replicas=replicas, max_running=max_running, after=k)
    prompt_per_step = x * input_len * tpot
    if lengths == "fixed" and prompt_per_step < 0.9 * (budget - batch):
        return Knee(
            total,
            "waves",
            f"TTFT doubles from {lone:,.0f} ms by {total:,.0f} concurrent requests: " + _waves(c, input_len, budget),
        )
    if c > max_running:
        return Knee(
            total,
            "batch slots",
            f"TTFT doubles from {lone:,.0f} ms by {total:,.0f} concurrent requests: the engine runs "
            f"{max_running * replicas:,.0f} at once (max_num_seqs or the KV cache) and the rest wait for a slot",
        )
    if prompt_per_step >= 0.9 * (budget - batch):
        return Knee(
            total,
            "token budget",
            f"TTFT doubles from {lone:,.0f} ms by {total:,.0f} concurrent requests: their prompts, "
            f"{prompt_per_step:,.0f} tokens per step, fill the {budget:,.0f}-token budget beside "
            f"{batch:,.0f} decodes, and prompts queue for it",
        )
    if x * front_end(hw.engine, coef).serial_s >= 0.9:
        return Knee(
            total,
            "host",
            f"TTFT doubles from {lone:,.0f} ms by {total:,.0f} concurrent requests: the HTTP server passes "
            f"{x * replicas:,.1f} requests/s, nearly all its core can",
        )
    return Knee(
        total,
        "prefill steps",
        f"TTFT doubles from {lone:,.0f} ms by {total:,.0f} concurrent requests: a new request waits for the "
        "step in progress, more and more often another request's prompt step" + wall,
    )


def _waves(c: float, input_len: float, budget: float) -> str:
    """Why a fixed-length load test's TTFT grows at ``c`` in flight (``gpucap.physics.waves``)."""
    one_step = float(group_size(budget, c, input_len))
    if one_step >= c:
        return (
            f"in a fixed-length load test requests start together and come back together, and a wave's "
            f"{c:,.0f} prompts of {input_len:,.0f} tokens share one step of the {budget:,.0f}-token budget, "
            f"{c:,.0f} times a lone prompt's work"
        )
    return (
        f"in a fixed-length load test requests come back in groups of the {one_step:,.0f} prompts of "
        f"{input_len:,.0f} tokens that one step of the {budget:,.0f}-token budget holds, and each group "
        "waits for the prompt steps of the groups before it"
    )


def _wall(
    hw: Hardware,
    coef: Coefficients,
    point: LoadPoint,
    *,
    input_len: float,
    replicas: int,
    max_running: float,
    after: int,
) -> str:
    """'; from N on, ...': where, beyond the knee, requests start to queue (token budget, batch
    slots or the HTTP server) and TTFT climbs steeply; empty when the curve never gets there."""
    conc = np.asarray(point.concurrency, dtype=float).ravel()
    x = np.asarray(point.requests_per_s, dtype=float).ravel()
    prompts = x * input_len * np.asarray(point.tpot_s, dtype=float).ravel()
    budget = float(hw.engine.max_num_batched_tokens or 8192) - np.asarray(point.decode_batch, dtype=float).ravel()
    causes = (
        (conc > max_running, "requests wait for a batch slot"),
        (prompts >= 0.9 * budget, "prompts queue for the token budget"),
        (x * front_end(hw.engine, coef).serial_s >= 0.9, "the HTTP server's core is full"),
    )
    found = [(int(np.flatnonzero(hit[after:])[0]) + after, why) for hit, why in causes if hit[after:].any()]
    if not found:
        return ""
    k, why = min(found)
    return f"; from {conc[k] * replicas:,.0f} on {why} and TTFT climbs steeply"
