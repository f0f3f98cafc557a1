"""What a replica serves, apart from how much of it: the one argument the load functions of
``gpucap.physics`` (``closed_loop``, ``open_loop``, ``wave_loop``, ``static_batch``,
``saturation_run``) share, so that each states only its load (concurrency, request rate, prompts
sent at once, batch size)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpucap.physics.extras import NO_EXTRAS, Extras
from gpucap.physics.memory import ArrayLike
from gpucap.physics.step import Array


@dataclass(frozen=True)
class Requests:
    """Each request's ``input_len`` prompt tokens, ``cached_tokens`` of them already in the prefix
    cache (a shared system prompt, earlier turns), and ``output_len`` output tokens; the
    ``max_running`` batch slots they run in (the smaller of the engine's ``max_num_seqs`` and the
    requests the KV cache holds; infinite: no cap); and the ``extras`` (images, speculative
    decoding) that change every step. Every field but ``extras`` may be an array; they broadcast
    with each other and with the load."""

    input_len: ArrayLike
    output_len: ArrayLike
    max_running: ArrayLike = np.inf
    cached_tokens: ArrayLike = 0.0
    extras: Extras = NO_EXTRAS

    def arrays(self, *load: ArrayLike) -> tuple[Array, ...]:
        """``load`` (any arrays) then input, output, max_running and cached tokens, as floats
        broadcast to one shape."""
        fields = (self.input_len, self.output_len, self.max_running, self.cached_tokens)
        return tuple(np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (*load, *fields))))

    def refuse(self, where: str, *, extras: bool) -> None:
        """A clear error where ``where`` does not model prefix-cached tokens (and, with ``extras``,
        images and speculative decoding either) but these requests carry them, instead of a
        result that silently leaves them out."""
        cached = np.any(np.asarray(self.cached_tokens, dtype=float) != 0.0)
        if cached or (extras and self.extras != NO_EXTRAS):
            given = f"cached_tokens={self.cached_tokens!r}" + (f", extras={self.extras!r}" if extras else "")
            left = "prefix-cached tokens" + (", images or speculative decoding" if extras else "")
            raise ValueError(f"{where} does not model {left}; got {given}: use closed_loop for these requests")
