"""How many requests the KV cache holds when their lengths differ.

A replica's batch slots are ``R = min(max_num_seqs, C / (I + O))``: the cache's C tokens of
context over a request of mean length. With lengths that differ, what runs at once is the
largest n whose requests fit, ``N = max{n : h_1 + ... + h_n <= C}``, with h_i the tokens request
i holds now. vLLM admits a prompt while blocks remain and preempts the newest request when a
running one cannot grow (``gpucap.queueing.engine``), so the running set keeps its held tokens
under C; a few long requests in it leave room for fewer.

**Held tokens.** A running request is met with probability in proportion to its life (about its
output length O, one token a step), at a uniform point of it: ``h = I + U O``. With prompt and
output lengths independent,

    E[h]   = E[I] + E[O^2] / (2 E[O]),
    E[h^2] = E[I^2] + E[I] E[O^2] / E[O] + E[O^3] / (3 E[O]).

**Requests that fit.** Over n running requests the sum of h is near normal (n of them, each
independent): ``P(N >= n) = P(S_n <= C) = Phi((C - n E[h]) / (sd(h) sqrt(n)))``, held at 1 for n
up to 1 and capped at R (``max_num_seqs``, or the slots the planner counts at the mean length).
The queueing model (``gpucap.queueing.analytic``) runs min(n, N) of n requests and makes an
arrival wait when n >= N: the knee comes earlier and softer than at a fixed R. (The work a
preempted request loses, recomputed later, is not counted.)
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from scipy.special import ndtr

from gpucap.queueing.lengths import Lengths

Array = npt.NDArray[np.float64]


def held_moments(inp: Lengths, out: Lengths) -> tuple[float, float]:
    """``(E[h], sd(h))`` of the tokens a running request holds (module docstring)."""
    i1, i2 = inp.moment(1), inp.moment(2)
    o1, o2, o3 = out.moment(1), out.moment(2), out.moment(3)
    mean = i1 + o2 / (2.0 * o1)
    second = i2 + i1 * o2 / o1 + o3 / (3.0 * o1)
    return float(mean), float(np.sqrt(max(second - mean * mean, 0.0)))


def slot_shares(kv_context_tokens: float, slots: int, held_mean: float, held_sd: float) -> Array:
    """``P(N = k)`` for k = 1..slots (index k - 1): the requests that fit in ``kv_context_tokens``
    of context (module docstring), at most ``slots``."""
    if not (np.isfinite(kv_context_tokens) and kv_context_tokens > 0):
        raise ValueError(f"kv_context_tokens must be a positive number of tokens, got {kv_context_tokens!r}")
    n = np.arange(1, slots + 1, dtype=float)
    if held_sd <= 0.0:
        fits = (n * held_mean <= kv_context_tokens).astype(float)
    else:
        fits = ndtr((kv_context_tokens - n * held_mean) / (held_sd * np.sqrt(n)))  # P(N >= n)
    fits[0] = 1.0  # one request always runs
    fits = np.minimum.accumulate(fits)
    return np.asarray(fits - np.append(fits[1:], 0.0), dtype=float)
