"""Model architecture read from a raw Hugging Face ``config.json``.

``ModelSpec.from_hf_config`` reads the dictionary (it never imports or runs model code), dispatches
on ``model_type`` and returns a frozen description with everything the physics needs: layer
shapes, attention kind (GQA/MQA or MLA), sliding-window or chunked layers, and the MoE layout.
Parameter counts are derived from those shapes, so they can be checked against the published
counts (``tests/test_models.py``).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpucap.catalog.configfields import Fields
from gpucap.catalog.hybrid import LinearMixer, linear_mixer
from gpucap.catalog.modelfields import (  # the checkpoint and expert names re-exported: they were defined here
    CHECKPOINT_FORMATS,  # noqa: F401
    CHECKPOINT_INT_METHODS,  # noqa: F401
    EXPERT_KEYS,  # noqa: F401
    MLA_FAMILIES,
    attention_shape,
    check_required,
    checkpoint_format,  # noqa: F401
    family_config,
    layer_windows,
    merge_text_config,
    mla_fields,
    mlp_widths,
    moe_counts,
    quantization,
)
from gpucap.catalog.vision import VisionEncoder, parse_vision_config
from gpucap.textfiles import read_json

SUPPORTED_FAMILIES: dict[str, str] = {
    "llama": "Llama 2 / 3 (dense, GQA)",
    "mistral": "Mistral (dense, optional sliding window)",
    "mixtral": "Mixtral (MoE)",
    "qwen2": "Qwen2 / Qwen2.5 (dense, GQA, qkv bias)",
    "qwen2_5_vl": "Qwen2.5-VL (Qwen2.5 text model, ViT with window attention and 2x2 patch merge)",
    "qwen3": "Qwen3 (dense, explicit head_dim)",
    "qwen3_moe": "Qwen3 MoE",
    "llama4": "Llama 4 (MoE, chunked attention, nested text_config)",
    "llama4_text": "Llama 4 text model",
    "deepseek_v3": "DeepSeek-V3 / R1 (MLA, MoE)",
    "deepseek_v32": "DeepSeek-V3.2 (MLA, MoE, sparse-attention indexer)",
    "glm4_moe": "GLM-4.5 / 4.6 (MoE)",
    "gpt_oss": "gpt-oss (MoE, alternating sliding/full attention)",
    "gemma3": "Gemma 3 (nested text_config, 5:1 local/global attention)",
    "gemma3_text": "Gemma 3 text model",
    "falcon": "Falcon (dense, non-gated MLP)",
    "qwen3_next": "Qwen3-Next (hybrid: Gated DeltaNet and gated full attention, MoE)",
    "jamba": "Jamba (hybrid: Mamba and attention, MoE every other layer)",
    "minimax_m1": "MiniMax-M1 (hybrid: lightning and softmax attention, MoE)",
    "minimax_text_01": "MiniMax-Text-01 (hybrid: lightning and softmax attention, MoE)",
    "minimax_m2": "MiniMax-M2 (full attention, MoE)",
    "nemotron_h": "Nemotron-H (hybrid: Mamba-2 and attention blocks, MLP or MoE blocks)",
}


def _unique_keys(path: Path) -> Any:
    """A ``json.loads`` hook that refuses a key given twice in one object (JSON parsers keep the
    last silently: a config edited by hand with ``num_hidden_layers`` twice would size the wrong
    model)."""

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for key, value in items:
            if key in seen:
                raise ValueError(f"{path}: key {key!r} appears twice in one object; keep one")
            seen[key] = value
        return seen

    return pairs


@dataclass(frozen=True)
class ModelSpec:
    """Architecture of a decoder-only transformer, as the serving physics sees it.

    Per-layer tuples have one entry per decoder layer: ``layer_window[i]`` is ``None`` for full
    attention, the number of tokens a sliding-window / chunked layer keeps, or 0 for a linear
    layer of a hybrid model, which keeps no KV cache but a state of constant size (``linear``,
    ``gpucap.catalog.hybrid``); ``layer_is_moe[i]`` says whether layer i's MLP is a mixture of experts.
    """

    name: str
    family: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    intermediate_size: int  # dense MLP width (0 when every layer is MoE)
    tie_embeddings: bool = False
    mlp_gated: bool = True  # SwiGLU/GeGLU: 3 matrices; plain GELU (Falcon): 2
    qkv_bias: bool = False
    # MLA (DeepSeek); kv_lora_rank > 0 marks an MLA model
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # DeepSeek-V3.2 sparse-attention indexer
    index_n_heads: int = 0
    index_head_dim: int = 0
    index_topk: int = 0
    # MoE
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0  # all shared experts of one layer together
    expert_bias: bool = False
    layer_is_moe: tuple[bool, ...] = ()
    layer_window: tuple[int | None, ...] = ()
    # weights that stay 16-bit whatever the checkpoint format ("attention" for gpt-oss MXFP4)
    unquantized_modules: frozenset[str] = field(default_factory=frozenset)
    # the format the checkpoint's weights are published in (``checkpoint_format``): what a server
    # loads unless told to re-quantize, and so the weight format gpucap takes when none is given
    checkpoint_dtype: str = "bf16"
    vision: VisionEncoder | None = None  # the vision encoder of a multimodal config (gpucap.physics.vision)
    linear: LinearMixer | None = None  # a hybrid model's linear-attention / state-space layer
    # Zipf exponent of the router's expert popularity (gpucap.physics.routing); 0 = uniform, the default
    routing_skew: float = 0.0
    layer_has_mlp: tuple[bool, ...] = ()  # False where a layer has no MLP (Nemotron-H); () = all have one
    attention_output_gate: bool = False  # q_proj also yields a sigmoid gate on the output (Qwen3-Next)
    max_position_embeddings: int = 0

    # ---- construction -------------------------------------------------------------------
    @classmethod
    def from_hf_config(cls, source: str | Path | Mapping[str, Any], name: str = "") -> ModelSpec:
        """Read a Hugging Face ``config.json`` (a path or the parsed dict)."""
        if isinstance(source, (str, Path)):
            path = Path(source)
            if path.is_dir():
                path = path / "config.json"
            try:
                raw = read_json(path, "config.json", object_pairs_hook=_unique_keys(path))
            except FileNotFoundError:
                raise ValueError(f"{path}: no such config.json") from None
            name = name or path.parent.name
            return _parse(raw, name, str(path))
        if not isinstance(source, Mapping):
            raise ValueError(f"{name or 'model'}: a config is a JSON object, got {type(source).__name__}")
        raw = dict(source)
        return _parse(raw, name or str(raw.get("_name_or_path", "model")))

    # ---- attention ----------------------------------------------------------------------
    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def kv_elements_per_token_per_layer(self) -> int:
        """KV-cache elements one token stores in one attention layer.

        GQA/MQA: ``2 x num_kv_heads x head_dim`` (K and V). MLA: ``kv_lora_rank +
        qk_rope_head_dim`` (one compressed latent shared by all heads; DeepSeek-V2 paper, sec. 2.1).
        """
        if self.is_mla:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.num_kv_heads * self.head_dim

    @property
    def attention_params_per_layer(self) -> float:
        h, hd = self.hidden_size, self.head_dim
        if self.is_mla:
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            if self.q_lora_rank:
                q = h * self.q_lora_rank + self.q_lora_rank * self.num_heads * qk
            else:
                q = h * self.num_heads * qk
            kv = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank * (
                self.num_heads * (self.qk_nope_head_dim + self.v_head_dim)
            )
            o = self.num_heads * self.v_head_dim * h
            idx = 0.0
            if self.index_n_heads:
                idx = (
                    self.q_lora_rank * self.index_n_heads * self.index_head_dim
                    + h * self.index_head_dim
                    + h * self.index_n_heads
                )
            return float(q + kv + o + idx)
        q_out = self.num_heads * hd
        kv_out = 2 * self.num_kv_heads * hd
        bias = (q_out + kv_out) if self.qkv_bias else 0
        gate = h * q_out if self.attention_output_gate else 0
        return float(h * (q_out + kv_out) + q_out * h + bias + gate)

    # ---- MLP ------------------------------------------------------------------------------
    @property
    def _mats(self) -> int:
        return 3 if self.mlp_gated else 2

    @property
    def dense_mlp_params(self) -> float:
        return float(self._mats * self.hidden_size * self.intermediate_size)

    @property
    def expert_params(self) -> float:
        """Parameters of one routed expert (gated MLP of width ``moe_intermediate_size``)."""
        p = self._mats * self.hidden_size * self.moe_intermediate_size
        if self.expert_bias:
            p += 2 * self.moe_intermediate_size + self.hidden_size
        return float(p)

    @property
    def shared_expert_params(self) -> float:
        return float(self._mats * self.hidden_size * self.shared_expert_intermediate_size)

    @property
    def router_params(self) -> float:
        return float(self.hidden_size * self.num_experts)

    @functools.cached_property
    def num_moe_layers(self) -> int:
        return sum(self.layer_is_moe)

    @functools.cached_property
    def num_dense_layers(self) -> int:
        """Layers with a dense MLP: all but the MoE ones and those with no MLP."""
        without = sum(1 for has in self.layer_has_mlp if not has)
        return self.num_layers - self.num_moe_layers - without

    # ---- parameter counts -----------------------------------------------------------------
    @property
    def embedding_params(self) -> float:
        """Input embedding plus lm_head (counted once when tied)."""
        return float(self.vocab_size * self.hidden_size * (1 if self.tie_embeddings else 2))

    @property
    def norm_params(self) -> float:
        return float(2 * self.hidden_size * self.num_layers + self.hidden_size)

    @functools.cached_property
    def num_linear_layers(self) -> int:
        """Linear-attention / state-space layers (window 0); 0 for a plain transformer."""
        return sum(1 for w in self.layer_window if w == 0)

    @functools.cached_property
    def num_kv_layers(self) -> int:
        """Layers that attend over a KV cache: all but the linear ones."""
        return self.num_layers - self.num_linear_layers

    @property
    def attention_params(self) -> float:
        """Token-mixing weights of all layers: attention layers, plus a hybrid's linear layers."""
        linear = self.linear.params * self.num_linear_layers if self.linear else 0.0
        return self.attention_params_per_layer * self.num_kv_layers + linear

    @property
    def routed_expert_params(self) -> float:
        """All routed experts of all MoE layers."""
        return self.expert_params * self.num_experts * self.num_moe_layers

    @property
    def dense_params(self) -> float:
        """Non-embedding parameters every token uses: attention, dense MLPs, shared experts,
        routers and norms (everything but the routed experts)."""
        return (
            self.attention_params
            + self.dense_mlp_params * self.num_dense_layers
            + (self.shared_expert_params + self.router_params) * self.num_moe_layers
            + self.norm_params
        )

    def check_context(self, input_tokens: float, output_tokens: float) -> None:
        """Raise ValueError when a request of ``input_tokens`` + ``output_tokens`` exceeds the
        context the model was built for (``max_position_embeddings``; no limit when unknown)."""
        limit = self.max_position_embeddings
        if limit and input_tokens + output_tokens > limit:
            raise ValueError(
                f"the longest request ({input_tokens:.0f} in + {output_tokens:.0f} out tokens) exceeds "
                f"{self.name}'s context of {limit} tokens (max_position_embeddings); shorten the lengths"
            )

    @property
    def total_params(self) -> float:
        """All language-model parameters (vision encoder excluded, see ``vision_params``)."""
        return self.dense_params + self.routed_expert_params + self.embedding_params

    @property
    def vision_params(self) -> float:
        """Vision encoder parameters, adapter and projection included (0 for text-only models)."""
        return self.vision.params if self.vision else 0.0

    @property
    def active_nonembedding_params(self) -> float:
        """Non-embedding parameters one token passes through: dense part plus k routed experts
        per MoE layer. This is what ``2 x params`` FLOP per token counts."""
        routed = self.expert_params * self.experts_per_token * self.num_moe_layers
        return self.dense_params + routed

    @property
    def active_params(self) -> float:
        """Parameters used per token, embeddings and lm_head included (the model-card count)."""
        return self.active_nonembedding_params + self.embedding_params


# ---- parsing ------------------------------------------------------------------------------
def _parse(raw: Mapping[str, Any], name: str, where: str = "") -> ModelSpec:
    """The spec of the config ``raw``; ``where`` (default ``name``) names it in errors. Read by
    concern (``gpucap.catalog.modelfields``): the language model's config and family, the
    required keys, the attention shape, the MoE layout and the MLP widths, the quantization,
    then MLA and the indexer, the layer windows, the vision encoder and a hybrid's linear layers."""
    where = where or name
    family, cfg, vision = _language_config(raw, where)
    cfg, blocks = family_config(cfg, family, where)
    f = Fields(cfg, where)
    check_required(cfg, family, where)
    mla = family in MLA_FAMILIES
    n, hidden, heads, kv_heads, head_dim = attention_shape(f, mla, where)
    layer_is_moe, layer_has_mlp, experts, per_token = moe_counts(f, family, n, blocks, where)
    moe = any(layer_is_moe)
    dense_inter, moe_inter, shared_inter = mlp_widths(f, family, hidden, moe, where)
    unquantized, checkpoint = quantization(f, where)
    return ModelSpec(
        name=name,
        family=family,
        num_layers=n,
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        vocab_size=f.count("vocab_size"),
        intermediate_size=dense_inter,
        tie_embeddings=f.flag("tie_word_embeddings", family in ("gemma3", "gemma3_text")),
        mlp_gated=family not in ("falcon", "nemotron_h"),
        qkv_bias=f.flag("attention_bias", family in ("qwen2", "qwen2_5_vl")),
        **mla_fields(f, mla),
        num_experts=experts,
        experts_per_token=per_token,
        moe_intermediate_size=moe_inter if moe else 0,
        shared_expert_intermediate_size=shared_inter if moe else 0,
        expert_bias=family == "gpt_oss",
        layer_is_moe=layer_is_moe,
        layer_window=layer_windows(f, family, n),
        unquantized_modules=unquantized,
        checkpoint_dtype=checkpoint,
        vision=parse_vision_config(family, vision, raw, hidden, where),
        max_position_embeddings=f.count("max_position_embeddings", default=0, least=0),
        linear=linear_mixer(f, family, hidden, heads, head_dim),
        layer_has_mlp=layer_has_mlp,
        attention_output_gate=family == "qwen3_next" and f.flag("attn_output_gate", True),
    )


def _language_config(raw: Mapping[str, Any], where: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """The family (``model_type``, one of ``SUPPORTED_FAMILIES``), the language model's config
    and the vision config of ``raw`` (``merge_text_config``: a multimodal config nests the
    language model in ``text_config``)."""
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: a config.json holds one JSON object, got {type(raw).__name__}")
    top = Fields(raw, where)
    top.section("text_config")  # nested objects where present
    top.section("vision_config")
    cfg, vision = merge_text_config(raw)
    family = Fields(cfg, where).text("model_type")
    if family not in SUPPORTED_FAMILIES:
        supported = ", ".join(f"{k} ({v})" for k, v in SUPPORTED_FAMILIES.items())
        archs = raw.get("architectures")
        raise ValueError(
            f"{where}: unsupported architecture model_type={family!r} (architectures={archs}); "
            f"supported families: {supported}"
        )
    return family, cfg, vision
