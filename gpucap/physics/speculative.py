"""Speculative decoding: a drafter proposes ``k`` tokens per sequence, the target model checks
them in one pass over ``k + 1`` positions, and keeps the accepted prefix plus one token of its
own (the bonus token).

Equations (per decoding sequence and step):

- Tokens kept per step, the mean acceptance length ``tau`` (``1 <= tau <= k + 1``). With an
  independent per-token acceptance rate ``alpha`` (Leviathan, Kalman and Matias 2023, "Fast
  Inference from Transformers via Speculative Decoding", ICML, eq. 1):
  ``tau = (1 - alpha^(k+1)) / (1 - alpha)``.
- Verification: the target's step processes ``k + 1`` tokens per sequence: matmul FLOP, the
  lm_head, activations, KV writes and attention FLOP grow ``(k + 1)`` times, while each sequence's
  KV cache is read once (all ``k + 1`` queries attend in one kernel). The ``k + 1`` tokens count
  against ``max_num_batched_tokens``.
- Drafting: ``k`` passes of the drafter per step, one after another, each over the batch
  (chain drafting, no tree). EAGLE (Li et al. 2024, arXiv:2401.15077) and DeepSeek-V3's
  multi-token prediction (arXiv:2412.19437, sec. 2.2) draft with one decoder layer shaped like
  the target's that shares the target's embedding and output head, so a pass costs one target
  layer plus the lm_head (EAGLE's input projection ``2h x h`` is left out: about 15% of a
  Llama-3-8B layer). EAGLE-3 (arXiv:2503.01840) gives the head a smaller draft vocabulary
  (32k). A separate small draft model costs its own decode step. The drafter also reads the
  prompt once (its own KV cache) and stores KV for every token next to the target's.
- A request of O output tokens needs ``(O - 1) / tau`` decode steps, so ``TPOT = t_step / tau``.
"""

from __future__ import annotations

import dataclasses
import math
from functools import lru_cache

from gpucap.catalog.models import ModelSpec
from gpucap.config import Layout, Speculative


def acceptance_length(*, acceptance_rate: float, draft_tokens: int) -> float:
    """Expected tokens kept per step, ``tau = (1 - alpha^(k+1)) / (1 - alpha)`` for an i.i.d.
    per-token acceptance rate ``alpha`` (Leviathan et al. 2023, eq. 1); ``k + 1`` at alpha = 1."""
    a = acceptance_rate
    if not 0.0 <= a <= 1.0:
        raise ValueError(f"acceptance_rate must lie in [0, 1], got {a!r}")
    if isinstance(draft_tokens, bool) or not isinstance(draft_tokens, int) or draft_tokens < 1:
        raise ValueError(f"draft_tokens must be an integer >= 1, got {draft_tokens!r}")
    if math.isclose(a, 1.0):
        return float(draft_tokens + 1)
    return (1.0 - a ** (draft_tokens + 1)) / (1.0 - a)


@lru_cache(maxsize=64)
def draft_spec(target: ModelSpec, sp: Speculative) -> ModelSpec:
    """The drafter as a model: a separate ``draft_model``, or the target cut to ``draft_layers``
    of its last layer's kind (attention window, MoE or dense), keeping its widths and output head
    (with ``draft_vocab_size`` rows when given) and dropping any vision encoder."""
    if sp.draft_model is not None:
        from gpucap.catalog.lookup import load_model

        return load_model(sp.draft_model)
    n = sp.draft_layers
    return dataclasses.replace(
        target,
        name=f"{target.name} draft head",
        num_layers=n,
        layer_is_moe=target.layer_is_moe[-1:] * n,
        layer_window=target.layer_window[-1:] * n,
        vocab_size=sp.draft_vocab_size or target.vocab_size,
        vision=None,
    )


def draft_layout(target: Layout, draft: ModelSpec) -> Layout:
    """The drafter runs on the target's GPUs with the same tensor and attention-data parallelism
    (vLLM shards an EAGLE/MTP head like the target). Pipeline parallelism is not modelled."""
    if target.pp > 1:
        raise ValueError(
            f"speculative decoding is modelled for pp=1 only, got pp={target.pp}; use tp (or ep) to split the model"
        )
    ep = target.ep if draft.is_moe and draft.num_experts % target.ep == 0 else 1
    layout = Layout(tp=target.tp, ep=ep, attn_dp=target.attn_dp)
    layout.check(draft)
    return layout


def shares_output_head(sp: Speculative) -> bool:
    """A draft head uses the target's embedding and lm_head (no extra memory) unless it has a
    draft vocabulary of its own; a separate draft model holds its own."""
    return sp.draft_model is None and sp.draft_vocab_size is None
