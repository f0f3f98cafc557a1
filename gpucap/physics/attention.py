"""Attention shapes per layer (DESIGN.md section 4): the keys one query attends to, the causal
(query, key) pairs of a prompt, and the FLOP of one pair, for full, sliding-window, chunked and
sparse (DeepSeek-V3.2) attention, GQA/MQA or MLA. ``gpucap.physics.step`` turns them into a
step's work (and re-exports them: callers import them from there).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpucap.catalog.models import ModelSpec
from gpucap.physics.memory import ArrayLike, held_tokens_per_layer, window_counts

Array = npt.NDArray[np.float64]


def attended_tokens_per_layer(spec: ModelSpec, context_tokens: ArrayLike) -> Array:
    """Keys one query attends to, averaged over layers: ``mean_l min(context, window_l)``, with
    DeepSeek-V3.2's sparse attention capped at ``index_topk``."""
    ctx = np.asarray(context_tokens, dtype=float)
    if spec.index_topk:
        ctx = np.minimum(ctx, spec.index_topk)
    return np.asarray(held_tokens_per_layer(spec, ctx), dtype=float)


def prefill_pairs_per_layer(spec: ModelSpec, prompt_tokens: ArrayLike) -> Array:
    """Causal attention pairs of one prompt of I tokens, averaged over attention layers.

    Full attention: ``I^2 / 2``; a window w < I: ``w I - w^2 / 2`` (each query sees at most w keys);
    a hybrid's linear layer (window 0): none.
    """
    i = np.asarray(prompt_tokens, dtype=float)
    total = np.zeros_like(i)
    cap = spec.index_topk or None
    for w, count in window_counts(spec).items():  # layers grouped by window
        if w == 0:
            continue
        w = min(w, cap) if (w and cap) else (w or cap)
        total = total + count * (i * i / 2 if w is None else np.where(i <= w, i * i / 2, w * i - w * w / 2))
    return total / max(spec.num_kv_layers, 1)


def attention_flop_per_pair(spec: ModelSpec, decode: bool) -> float:
    """FLOP per (query, key) pair per layer: ``2 x heads x qk_dim + 2 x heads x v_dim``.

    GQA/MHA: ``4 x heads x head_dim``. MLA decode uses the absorbed form over the latent
    (qk_dim = kv_lora_rank + rope, v_dim = kv_lora_rank); MLA prefill the expanded heads
    (qk_dim = nope + rope, v_dim = v_head_dim) (DeepSeek-V2 paper, appendix on absorption).
    """
    if not spec.is_mla:
        return 4.0 * spec.num_heads * spec.head_dim
    if decode:
        return 2.0 * spec.num_heads * (2 * spec.kv_lora_rank + spec.qk_rope_head_dim)
    return 2.0 * spec.num_heads * (spec.qk_nope_head_dim + spec.qk_rope_head_dim + spec.v_head_dim)
