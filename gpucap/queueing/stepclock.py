"""The step clock of the engine loop: seconds of one step of a given composition, cached.

``StepClock`` prices each step the engine (``gpucap.queueing.engine``) runs with
``gpucap.physics.steptime.step_time(step_work(...))``: decode tokens and their mean context, prompt tokens and
their causal attention pairs. It sits between the physics (step time of one composition) and the
engine loop of ``gpucap.queueing.simulate`` (DESIGN.md section 8, the step-level simulation); its
rounding is what keeps a long run fast: counts, contexts and pairs rounded to 1/``LOG_QUANTUM`` in log,
``CONTEXT_BLOCK`` neighbouring contexts per vectorized call, every value cached.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from gpucap.config import Hardware
from gpucap.physics.coefficients import Coefficients
from gpucap.physics.step import prefill_pairs_per_layer, step_work
from gpucap.physics.steptime import step_time

Array = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]

LOG_QUANTUM = 512.0  # context and pair counts rounded to exp(k / 512): relative step < 0.2%
NO_KEY = -(1 << 40)  # rounded log of zero
CONTEXT_BLOCK = 128  # neighbouring contexts evaluated together
EXACT_COUNT = 64  # decode sequences and prompt tokens up to this are never rounded


class StepClock:
    """Seconds of a step of a given composition, at its counts rounded in log.

    Decode sequences and prompt tokens above ``EXACT_COUNT``, contexts and attention pairs are
    rounded to ``exp(k / LOG_QUANTUM)`` (a relative error below 0.1% on each; a step's time is
    close to linear in them), so that the many steps of a long run share cached values. Runs of
    decode-only steps are evaluated in blocks of ``CONTEXT_BLOCK`` neighbouring contexts (one
    vectorized call)."""

    def __init__(self, hw: Hardware, coef: Coefficients) -> None:
        self.hw, self.coef = hw, coef
        self.blocks: dict[tuple[int, int], Array] = {}
        self.single: dict[tuple[int, int, int, int], float] = {}
        self.pairs_cache: dict[int, float] = {}

    @staticmethod
    def _key(x: float) -> int:
        """A positive value rounded in log (``NO_KEY`` for zero)."""
        return int(round(math.log(x) * LOG_QUANTUM)) if x > 0 else NO_KEY

    @staticmethod
    def _count_key(n: int) -> int:
        """Whole counts up to EXACT_COUNT as they are (negative keys), larger ones in log."""
        return -n - 1 if n <= EXACT_COUNT else int(round(math.log(n) * LOG_QUANTUM))

    @staticmethod
    def _count(key: int) -> float:
        """The count a ``_count_key`` stands for."""
        return float(-key - 1) if key < 0 else math.exp(key / LOG_QUANTUM)

    @staticmethod
    def _value(k: Array) -> Array:
        """The values rounded log keys stand for (zero for ``NO_KEY``)."""
        return np.where(k > NO_KEY, np.exp(k / LOG_QUANTUM), 0.0)

    def _seconds(self, decode: float, context: Array | float, prefill: float, pairs: float) -> Array:
        """Step time of this composition, not rounded (one value per context given)."""
        work = step_work(
            self.hw, decode_tokens=decode, decode_context=context, prefill_tokens=prefill, prefill_pairs=pairs
        )
        return np.asarray(step_time(self.hw, work, self.coef).total_s, dtype=float)

    def _block(self, decode_key: int, block: int) -> Array:
        """Decode-only step times at the ``CONTEXT_BLOCK`` context keys of ``block``, cached."""
        key = (decode_key, block)
        if key not in self.blocks:
            ks = block * CONTEXT_BLOCK + np.arange(CONTEXT_BLOCK, dtype=float)
            self.blocks[key] = self._seconds(self._count(decode_key), self._value(ks), 0.0, 0.0)
        return self.blocks[key]

    def one(self, decode: int, context: float, prefill: int, pairs: float) -> float:
        """Seconds of one step: ``decode`` sequences at mean ``context``, ``prefill`` prompt tokens
        with ``pairs`` attention pairs per layer."""
        kd = self._count_key(decode)
        kc = self._key(context) if decode else NO_KEY
        if not prefill:
            block, offset = divmod(kc, CONTEXT_BLOCK)
            return float(self._block(kd, block)[offset])
        key = (kd, kc, self._count_key(prefill), self._key(pairs))
        if key not in self.single:
            ctx = math.exp(kc / LOG_QUANTUM) if decode else 0.0
            self.single[key] = float(
                self._seconds(
                    self._count(kd), ctx, self._count(key[2]), math.exp(key[3] / LOG_QUANTUM) if pairs > 0 else 0.0
                )
            )
        return self.single[key]

    def decode_run(self, decode: int, context: float, steps: int) -> Array:
        """Durations of ``steps`` decode-only steps; every context grows by one token a step."""
        keys = np.round(np.log(context + np.arange(steps)) * LOG_QUANTUM).astype(np.int64)
        blocks, offsets = np.divmod(keys, CONTEXT_BLOCK)
        kd = self._count_key(decode)
        out = np.empty(steps)
        for b in range(int(blocks[0]), int(blocks[-1]) + 1):
            sel = blocks == b
            out[sel] = self._block(kd, b)[offsets[sel]]
        return out

    def pairs(self, prompt_tokens: Ints) -> Array:
        """``prefill_pairs_per_layer`` of whole-token prompt prefixes, memoized."""
        out = np.empty(prompt_tokens.size)
        for j, p in enumerate(prompt_tokens.tolist()):
            if p not in self.pairs_cache:
                self.pairs_cache[p] = float(prefill_pairs_per_layer(self.hw.spec, float(p)))
            out[j] = self.pairs_cache[p]
        return out
