"""Linear-attention and state-space layers of hybrid models, read from their ``config.json``.

A hybrid model (Qwen3-Next: Gated DeltaNet; Jamba: Mamba; MiniMax-M1 / Text-01: lightning
attention) interleaves full-attention layers with layers whose memory of the past is a state of
constant size per request instead of a KV cache that grows with the context. ``ModelSpec`` marks
such a layer with an attention window of 0 (it keeps no KV) and describes it with a
``LinearMixer``: its parameters, its per-request state and the FLOP of its recurrence.

Shapes are vLLM's (v0.33.0; MiniMax v0.22.1, whose ``minimax_text_01.py`` later versions
dropped):
- state shapes: ``vllm/model_executor/layers/mamba/mamba_utils.py`` (``MambaStateShapeCalculator``:
  ``gated_delta_net_state_shape``, ``mamba1_state_shape``, ``linear_attention_state_shape``);
- weights: ``layers/mamba/gdn/qwen_gdn_linear_attn.py``, ``layers/mamba/mamba_mixer.py``,
  ``layers/mamba/linear_attn.py`` (0.22.1);
- recurrence FLOP per token, counted from the decode kernels: Gated DeltaNet ~7 dk dv per value
  head (decay, delta read, update, output; ``fla/ops/fused_recurrent.py``), Mamba-1 ~7 I N
  (``selective_state_update``), lightning attention ~5 d^2 per head
  (``_linear_attn_decode_kernel``), plus the causal conv's ``2 K x channels``. Prefill runs
  chunked forms of the same recurrences, taken at the same FLOP per token (an approximation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .configfields import Fields

# A request holds two copies of each linear layer's state: with prefix caching on (vLLM's
# default) the state cache runs in "align" mode, ``MambaSpec.max_memory_usage_bytes`` =
# page x (2 + speculative blocks) (vllm/v1/kv_cache_interface.py, v0.33.0).
STATE_COPIES = 2
HYBRID_FAMILIES = ("qwen3_next", "jamba", "minimax_m1", "minimax_text_01")


@dataclass(frozen=True)
class LinearMixer:
    """One linear-attention / state-space layer: ``params`` weights, and per request a
    ``conv_elements`` convolution state plus a ``state_elements`` recurrent state (unsharded,
    one copy; stored in the model's 16-bit dtype by default in vLLM), and ``flop_per_token`` of
    recurrence and convolution beyond its projections (which ``params`` counts)."""

    kind: str  # "gated_deltanet", "mamba1", "lightning"
    params: float
    conv_elements: int
    state_elements: int
    flop_per_token: float

    @property
    def state_elements_per_request(self) -> int:
        return self.conv_elements + self.state_elements


def linear_layers(f: Fields, family: str, n: int) -> tuple[bool, ...]:
    """Which of the ``n`` layers are linear (True) rather than full attention.

    Qwen3-Next: full attention every ``full_attention_interval``-th layer (transformers
    ``Qwen3NextConfig``: layer i is full when ``(i + 1) % interval == 0``), or ``layer_types``.
    Jamba: attention where ``i % attn_layer_period == attn_layer_offset`` (``JambaConfig``).
    MiniMax-M1 / Text-01: ``attn_type_list`` (0 = lightning, 1 = softmax attention).
    """
    if family == "qwen3_next":
        types = f.items("layer_types", (str,))
        if types and len(types) == n:
            return tuple(t == "linear_attention" for t in types)
        interval = f.count("full_attention_interval", default=4)
        return tuple((i + 1) % interval != 0 for i in range(n))
    if family == "jamba":
        period = f.count("attn_layer_period", default=8)
        offset = f.count("attn_layer_offset", default=4, least=0)
        return tuple(i % period != offset for i in range(n))
    if family in ("minimax_m1", "minimax_text_01"):
        kinds = f.items("attn_type_list", (int,))
        if kinds is None or len(kinds) != n:
            raise ValueError(f"{f.where}: attn_type_list must list one 0 (lightning) or 1 (softmax) per layer ({n})")
        return tuple(k == 0 for k in kinds)
    return (False,) * n


def linear_mixer(f: Fields, family: str, hidden: int, heads: int, head_dim: int) -> LinearMixer | None:
    """The linear layer of a hybrid family (None for other families); see the module docstring
    for where each shape comes from."""
    if family == "qwen3_next":
        nk, nv = f.count("linear_num_key_heads"), f.count("linear_num_value_heads")
        dk, dv = f.count("linear_key_head_dim"), f.count("linear_value_head_dim")
        k = f.count("linear_conv_kernel_dim", default=4)
        conv_dim = 2 * nk * dk + nv * dv  # q, k and v channels through the causal conv
        params = (
            hidden * (2 * nk * dk + 2 * nv * dv)  # in_proj_qkvz
            + hidden * 2 * nv  # in_proj_ba (beta and the decay gate)
            + conv_dim * k  # depthwise conv1d, no bias
            + 2 * nv  # A_log, dt_bias
            + dv  # gated RMSNorm
            + nv * dv * hidden  # out_proj
        )
        return LinearMixer(
            "gated_deltanet",
            float(params),
            conv_elements=(k - 1) * conv_dim,
            state_elements=nv * dv * dk,
            flop_per_token=7.0 * nv * dk * dv + 2.0 * k * conv_dim,
        )
    if family == "jamba":
        inner = f.count("mamba_expand", default=2) * hidden
        n_state = f.count("mamba_d_state", default=16)
        k = f.count("mamba_d_conv", default=4)
        rank = f.count("mamba_dt_rank", default=math.ceil(hidden / 16))
        params = (
            2 * inner * hidden  # in_proj (x and the gate z)
            + inner * k  # depthwise conv1d
            + (inner if f.flag("mamba_conv_bias", True) else 0)
            + (rank + 2 * n_state) * inner  # x_proj (dt, B, C)
            + inner * rank  # dt_proj
            + inner  # dt_proj bias
            + inner * n_state  # A_log
            + inner  # D
            + hidden * inner  # out_proj
            + rank
            + 2 * n_state  # dt, B and C layer norms
        )
        return LinearMixer(
            "mamba1",
            float(params),
            conv_elements=(k - 1) * inner,
            state_elements=inner * n_state,
            flop_per_token=7.0 * inner * n_state + 2.0 * k * inner,
        )
    if family in ("minimax_m1", "minimax_text_01"):
        inner = heads * head_dim
        params = 3 * inner * hidden + inner * hidden + hidden * inner + inner  # qkv, output gate, out, norm
        return LinearMixer(
            "lightning",
            float(params),
            conv_elements=0,
            state_elements=heads * head_dim * head_dim,
            flop_per_token=5.0 * heads * head_dim * head_dim,
        )
    return None
