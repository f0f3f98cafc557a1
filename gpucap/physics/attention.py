"""Attention shapes per layer (DESIGN.md section 4): the keys one query attends to, the causal
(query, key) pairs of a prompt, and the FLOP of one pair, for full, sliding-window, chunked and
sparse (DeepSeek-V3.2) attention, GQA/MQA or MLA. ``gpucap.physics.step`` turns them into a
step's work (and re-exports them: callers import them from there).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpucap.catalog.models import ModelSpec
from gpucap.config import Hardware
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


def softmax_excess_flop(hw: Hardware, decode_tokens: Array, prompt_pairs: Array, attended: Array) -> Array:
    """bf16 FLOP-equivalent by which a step's softmax exponentials outlast the tensor cores'
    QK^T and AV work, in one stage slot on one GPU.

    Every (query, key) pair of every head takes one exponential on the special-function units
    (``GPU.exp_per_s``) while the tensor cores do ``attention_flop_per_pair / heads`` FLOP for it
    (``4 x head_dim`` for GQA). At ``R = bf16 peak / exp_per_s`` FLOP per exponential the
    exponentials bind whenever ``R`` exceeds the FLOP per pair and head (FlashAttention-3 and -4
    schedule around exactly this; Blackwell Ultra doubles the exponential rate for it):

    ``attention layers / pp / (tp x attn_dp) x heads x sum over decode and prefill of
    pairs x max(0, R - FLOP per pair and head)``

    with ``v x attended`` decode pairs and the prefill pairs. It stays affine in the work (a
    constant per kind of pair). Zero where the catalog gives no exponential rate, and for the
    linear layers of a hybrid and DeepSeek-V3.2's indexer (no softmax); a vision encoder's
    attention is not counted."""
    spec, lay = hw.spec, hw.layout
    zero = np.zeros_like(np.asarray(decode_tokens, dtype=float) + prompt_pairs)
    if not spec.num_heads:
        return zero
    group = lay.tp * lay.attn_dp
    heads_layers = spec.num_heads * spec.num_kv_layers / lay.pp / group

    def excess(decode: bool) -> float:  # FLOP per pair and head the exponential adds
        tensor = attention_flop_per_pair(spec, decode=decode) / spec.num_heads
        return tensor * (softmax_slowdown(hw, decode=decode) - 1.0)

    return heads_layers * (decode_tokens * attended * excess(True) + prompt_pairs * excess(False)) + zero


def softmax_slowdown(hw: Hardware, decode: bool = False) -> float:
    """How many times its tensor-core time attention compute takes when the softmax's exponentials
    bind: ``max(1, R / (FLOP per pair and head))`` with ``R = bf16 peak / exp_per_s`` bf16 FLOP per
    exponential (``softmax_excess_flop``); 1 where the catalog gives no exponential rate. gpt-oss
    (heads of 64, 256 FLOP per pair) on a B200 (512): 2."""
    gpu, spec = hw.gpu, hw.spec
    if not gpu.exp_per_s or not spec.num_heads:
        return 1.0
    flop_per_exp = gpu.peak_flops_per_s("bf16") / gpu.exp_per_s
    return max(1.0, flop_per_exp / (attention_flop_per_pair(spec, decode=decode) / spec.num_heads))
