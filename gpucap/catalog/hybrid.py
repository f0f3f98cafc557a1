"""Linear-attention and state-space layers of hybrid models, read from their ``config.json``.

A hybrid model (Qwen3-Next: Gated DeltaNet; Jamba: Mamba; Nemotron-H: Mamba-2; MiniMax-M1 /
Text-01: lightning attention) interleaves full-attention layers with layers whose memory of the past is a state of
constant size per request instead of a KV cache that grows with the context. ``ModelSpec`` marks
such a layer with an attention window of 0 (it keeps no KV) and describes it with a
``LinearMixer``: its parameters, its per-request state and the FLOP of its recurrence.

Shapes are vLLM's (v0.33.0; MiniMax v0.22.1, whose ``minimax_text_01.py`` later versions
dropped):
- state shapes: ``vllm/model_executor/layers/mamba/mamba_utils.py`` (``MambaStateShapeCalculator``:
  ``gated_delta_net_state_shape``, ``mamba1_state_shape``, ``mamba2_state_shape``,
  ``linear_attention_state_shape``); Nemotron-H keeps its recurrent state in fp32 unless its
  config says otherwise (``NemotronHForCausalLMConfig``, ``models/config.py``), the others in the
  model's 16-bit dtype;
- weights: ``layers/mamba/gdn/qwen_gdn_linear_attn.py``, ``layers/mamba/mamba_mixer.py``,
  ``layers/mamba/mamba_mixer2.py``, ``layers/mamba/linear_attn.py`` (0.22.1);
- recurrence FLOP per token, counted from the decode kernels: Gated DeltaNet ~7 dk dv per value
  head (decay, delta read, update, output; ``fla/ops/fused_recurrent.py``), Mamba-1 ~7 I N
  (``selective_state_update``), Mamba-2 ~5 heads x head_dim x N (the same kernel), lightning
  attention ~5 d^2 per head
  (``_linear_attn_decode_kernel``), plus the causal conv's ``2 K x channels``. Prefill runs
  chunked forms of the same recurrences, taken at the same FLOP per token (an approximation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpucap.catalog.configfields import Fields

# A request holds two copies of each linear layer's state: with prefix caching on (vLLM's
# default) the state cache runs in "align" mode, ``MambaSpec.max_memory_usage_bytes`` =
# page x (2 + speculative blocks) (vllm/v1/kv_cache_interface.py, v0.33.0).
STATE_COPIES = 2
HYBRID_FAMILIES = ("qwen3_next", "jamba", "minimax_m1", "minimax_text_01", "nemotron_h")
# Nemotron-H's hybrid_override_pattern: one character per residual block
NEMOTRON_MIXERS = {"M": "mamba2", "*": "attention"}
NEMOTRON_MLPS = {"-": "dense", "E": "moe"}


@dataclass(frozen=True)
class LinearMixer:
    """One linear-attention / state-space layer: ``params`` weights, and per request a
    ``conv_elements`` convolution state (16-bit) plus a ``state_elements`` recurrent state of
    ``state_bytes_per_element`` (unsharded, one copy), and ``flop_per_token`` of recurrence and
    convolution beyond its projections (which ``params`` counts)."""

    kind: str  # "gated_deltanet", "mamba1", "mamba2", "lightning"
    params: float
    conv_elements: int
    state_elements: int
    flop_per_token: float
    state_bytes_per_element: float = 2.0

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
        from gpucap.catalog.modelfields import layer_kinds

        types = layer_kinds(f, n, ("linear_attention", "full_attention"))
        if types is not None:
            return tuple(t == "linear_attention" for t in types)
        interval = f.count("full_attention_interval", default=4)
        return tuple((i + 1) % interval != 0 for i in range(n))
    if family == "jamba":
        period = f.count("attn_layer_period", default=8)
        offset = f.count("attn_layer_offset", default=4, least=0)
        return tuple(i % period != offset for i in range(n))
    if family == "nemotron_h":
        return tuple(mixer == "mamba2" for mixer, _ in nemotron_blocks(f))
    if family in ("minimax_m1", "minimax_text_01"):
        kinds = f.items("attn_type_list", (int,))
        if kinds is None or len(kinds) != n or not set(kinds) <= {0, 1}:
            raise ValueError(f"{f.where}: attn_type_list must list one 0 (lightning) or 1 (softmax) per layer ({n})")
        return tuple(k == 0 for k in kinds)
    return (False,) * n


def nemotron_blocks(f: Fields) -> list[tuple[str, str]]:
    """Nemotron-H's ``hybrid_override_pattern`` as layers of (mixer, MLP): each mixer block (M:
    Mamba-2, *: attention) with the MLP block right after it (-: dense, E: MoE; "" when the
    next block is another mixer). vLLM builds one residual block per character
    (``nemotron_h.py``); pairing them keeps gpucap's layer of a mixer and an MLP."""
    pattern = f.text("hybrid_override_pattern")
    if not pattern or set(pattern) - set(NEMOTRON_MIXERS) - set(NEMOTRON_MLPS):
        raise ValueError(
            f"{f.where}: hybrid_override_pattern must be a string of M (Mamba-2), * (attention), - (MLP) "
            f"and E (MoE), one per block; got {pattern[:40]!r}"
        )
    layers: list[tuple[str, str]] = []
    for i, c in enumerate(pattern):
        if c in NEMOTRON_MIXERS:
            layers.append((NEMOTRON_MIXERS[c], ""))
        elif not layers or layers[-1][1]:
            raise ValueError(
                f"{f.where}: hybrid_override_pattern has an MLP block ({c!r} at {i}) that follows no mixer block; "
                "gpucap pairs each MLP with the mixer before it"
            )
        else:
            layers[-1] = (layers[-1][0], NEMOTRON_MLPS[c])
    return layers


def linear_mixer(f: Fields, family: str, hidden: int, heads: int, head_dim: int) -> LinearMixer | None:
    """The linear layer of a hybrid family (None for other families); see the module docstring
    for where each shape comes from."""
    if family == "qwen3_next":
        return _gated_deltanet(f, hidden)
    if family == "jamba":
        return _mamba1(f, hidden)
    if family == "nemotron_h":
        return _mamba2(f, hidden)
    if family in ("minimax_m1", "minimax_text_01"):
        return _lightning(hidden, heads, head_dim)
    return None


def _gated_deltanet(f: Fields, hidden: int) -> LinearMixer:
    """Qwen3-Next's Gated DeltaNet (``qwen_gdn_linear_attn.py``, ``gated_delta_net_state_shape``)."""
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
    recurrence = 7.0 * nv * dk * dv
    return LinearMixer(
        "gated_deltanet", float(params), (k - 1) * conv_dim, nv * dv * dk, recurrence + 2.0 * k * conv_dim
    )


def _mamba1(f: Fields, hidden: int) -> LinearMixer:
    """Jamba's Mamba-1 mixer (``mamba_mixer.py``, ``mamba1_state_shape``)."""
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
    recurrence = 7.0 * inner * n_state
    return LinearMixer("mamba1", float(params), (k - 1) * inner, inner * n_state, recurrence + 2.0 * k * inner)


def _mamba2(f: Fields, hidden: int) -> LinearMixer:
    """Nemotron-H's Mamba-2 mixer (``mamba_mixer2.py``, ``mamba2_state_shape``); its recurrent
    state in fp32 unless the config names another ``mamba_ssm_cache_dtype``."""
    nh, hd = f.count("mamba_num_heads"), f.count("mamba_head_dim")
    groups, n_state = f.count("n_groups", default=1), f.count("ssm_state_size")
    k = f.count("conv_kernel", default=4)
    inner = nh * hd
    conv_dim = inner + 2 * groups * n_state  # x, B and C through the causal conv
    params = (
        (2 * inner + 2 * groups * n_state + nh) * hidden  # in_proj: z, x, B, C, dt
        + conv_dim * k
        + (conv_dim if f.flag("use_conv_bias", True) else 0)
        + 3 * nh  # A_log, D, dt_bias
        + inner  # gated RMSNorm
        + hidden * inner  # out_proj
    )
    fp32 = f.text("mamba_ssm_cache_dtype") in ("", "float32")
    recurrence = 5.0 * nh * hd * n_state
    return LinearMixer(
        "mamba2",
        float(params),
        (k - 1) * conv_dim,
        nh * hd * n_state,
        recurrence + 2.0 * k * conv_dim,
        4.0 if fp32 else 2.0,
    )


def _lightning(hidden: int, heads: int, head_dim: int) -> LinearMixer:
    """MiniMax's lightning attention (vLLM 0.22.1 ``linear_attn.py``, ``linear_attention_state_shape``):
    qkv, output gate and output projections and a norm; a d x d state per head, no conv."""
    inner = heads * head_dim
    params = 3 * inner * hidden + inner * hidden + hidden * inner + inner
    return LinearMixer("lightning", float(params), 0, heads * head_dim * head_dim, 5.0 * heads * head_dim * head_dim)
