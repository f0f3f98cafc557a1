"""Model architecture read from a raw Hugging Face ``config.json``.

``ModelSpec.from_hf_config`` reads the dictionary (it never imports or runs model code), dispatches
on ``model_type`` and returns a frozen description with everything the physics needs: layer
shapes, attention kind (GQA/MQA or MLA), sliding-window or chunked layers, and the MoE layout.
Parameter counts are derived from those shapes, so they can be checked against the published
counts (``tests/test_models.py``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpucap.catalog.configfields import Fields
from gpucap.catalog.hybrid import HYBRID_FAMILIES, LinearMixer, linear_layers, linear_mixer, nemotron_blocks
from gpucap.catalog.vision import VisionEncoder, parse_vision_config
from gpucap.textfiles import read_text

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

# Keys every family needs (after family-specific renaming), named as in Hugging Face configs.
_REQUIRED = ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size")

# Defaults of transformers' Gemma3TextConfig that the published gemma-3 configs rely on
# (transformers/models/gemma3/configuration_gemma3.py).
_GEMMA3_TEXT_DEFAULTS = {
    "vocab_size": 262_208,
    "sliding_window": 4096,
    "sliding_window_pattern": 6,
    "head_dim": 256,
    "num_key_value_heads": 4,
}


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
                raw = json.loads(read_text(path, "config.json"))
            except FileNotFoundError:
                raise ValueError(f"{path}: no such config.json") from None
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}: not valid JSON ({exc})") from None
            except RecursionError:
                raise ValueError(f"{path}: JSON nested too deeply to be a config.json") from None
            except ValueError as exc:  # e.g. an integer longer than Python reads
                if str(path) in str(exc):
                    raise
                raise ValueError(f"{path}: unreadable JSON value ({str(exc)[:80]})") from None
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

    @property
    def num_moe_layers(self) -> int:
        return sum(self.layer_is_moe)

    @property
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

    @property
    def num_linear_layers(self) -> int:
        """Linear-attention / state-space layers (window 0); 0 for a plain transformer."""
        return sum(1 for w in self.layer_window if w == 0)

    @property
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
def _get(cfg: Mapping[str, Any], *keys: str, default: Any = None) -> Any:
    for k in keys:
        if cfg.get(k) is not None:
            return cfg[k]
    return default


def _merge_text_config(raw: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Multimodal configs (Llama 4, Gemma 3) nest the language model in ``text_config``; others
    (Qwen2.5-VL) keep it at the top level. Either way ``vision_config`` is split off."""
    text = raw.get("text_config")
    vision = dict(raw.get("vision_config") or {})
    if isinstance(text, Mapping):
        cfg = {k: v for k, v in raw.items() if k not in ("text_config", "vision_config")}
        cfg.update(text)
        cfg["model_type"] = raw.get("model_type", text.get("model_type"))
        return cfg, vision
    return {k: v for k, v in raw.items() if k != "vision_config"}, vision


def _layer_windows(f: Fields, family: str, n: int) -> tuple[int | None, ...]:
    """Tokens each layer's attention keeps: None = full context, 0 = a linear layer (no KV)."""
    if family in HYBRID_FAMILIES:
        return tuple(0 if lin else None for lin in linear_layers(f, family, n))
    types = f.items("layer_types", (str,))
    window = f.count("sliding_window", default=0, least=0)
    if family in ("llama4", "llama4_text") and f.count("attention_chunk_size", default=0, least=0):
        chunk = f.count("attention_chunk_size")
        nope = f.items("no_rope_layers", (int, bool))
        if nope and len(nope) == n:  # 1 = RoPE layer with chunked attention, 0 = global NoPE
            return tuple(chunk if r else None for r in nope)
        interval = f.count("nope_layer_interval", default=4)
        return tuple(None if (i + 1) % interval == 0 else chunk for i in range(n))
    if types and len(types) == n:
        return tuple(window if t == "sliding_attention" else None for t in types)
    if family in ("gemma3", "gemma3_text"):
        pattern = f.count("sliding_window_pattern", default=6)
        return tuple(None if (i + 1) % pattern == 0 else window for i in range(n))
    if family in ("qwen2", "qwen2_5_vl", "qwen3", "qwen3_moe") and not f.flag("use_sliding_window", False):
        return (None,) * n
    if window:
        return (window,) * n
    return (None,) * n


EXPERT_KEYS = ("n_routed_experts", "num_local_experts", "num_experts")


def _moe_layout(f: Fields, family: str, n: int) -> tuple[bool, ...]:
    if not f.count(*EXPERT_KEYS, default=0, least=0):
        return (False,) * n
    if family in ("llama4", "llama4_text"):
        step = f.count("interleave_moe_layer_step", default=1)
        moe_layers = f.layers("moe_layers", n)
        if moe_layers is not None:
            return tuple(i in moe_layers for i in range(n))
        return tuple((i + 1) % step == 0 for i in range(n))
    if family == "jamba":  # JambaConfig.layers_num_experts
        period = f.count("expert_layer_period", default=2)
        offset = f.count("expert_layer_offset", default=1, least=0)
        return tuple(i % period == offset for i in range(n))
    first_dense = f.count("first_k_dense_replace", default=0, least=0)
    freq = f.count("moe_layer_freq", "decoder_sparse_step", default=1)
    mlp_only = f.layers("mlp_only_layers", n) or set()
    return tuple(i >= first_dense and (i % freq == 0) and i not in mlp_only for i in range(n))


# quantization_config.quant_method (and modelopt's quant_algo) -> gpucap weight format
CHECKPOINT_FORMATS = {"fp8": "fp8", "mxfp4": "mxfp4", "nvfp4": "nvfp4"}
CHECKPOINT_INT_METHODS = ("awq", "gptq")  # integer weight-only formats: int4 or int8 by their ``bits``


def checkpoint_format(quant: Fields) -> str:
    """The weight format a checkpoint is published in, from its ``quantization_config``
    (Hugging Face transformers' quantization configs: ``quant_method`` fp8, mxfp4, awq/gptq with
    ``bits``; ModelOpt's ``quant_algo`` FP8/NVFP4); 16-bit ("bf16") when it has none or one
    gpucap does not read (vLLM serves a 16-bit checkpoint in its own 16-bit dtype)."""
    method = quant.text("quant_method").lower()
    if method in CHECKPOINT_FORMATS:
        return CHECKPOINT_FORMATS[method]
    if method in CHECKPOINT_INT_METHODS:
        bits = quant.count("bits", "w_bit", default=0, least=0)
        return {4: "int4", 8: "int8"}.get(bits, "bf16")
    if method == "modelopt":
        return CHECKPOINT_FORMATS.get(quant.text("quant_algo").lower(), "bf16")
    return "bf16"


def _parse(raw: Mapping[str, Any], name: str, where: str = "") -> ModelSpec:
    """The spec of the config ``raw``; ``where`` (default ``name``) names it in errors."""
    where = where or name
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: a config.json holds one JSON object, got {type(raw).__name__}")
    top = Fields(raw, where)
    top.section("text_config")  # nested objects where present
    top.section("vision_config")
    cfg, vision = _merge_text_config(raw)
    f = Fields(cfg, where)
    family = f.text("model_type")
    if family not in SUPPORTED_FAMILIES:
        supported = ", ".join(f"{k} ({v})" for k, v in SUPPORTED_FAMILIES.items())
        archs = raw.get("architectures")
        raise ValueError(
            f"{where}: unsupported architecture model_type={family!r} (architectures={archs}); "
            f"supported families: {supported}"
        )
    if family in ("gemma3", "gemma3_text"):
        cfg = {**_GEMMA3_TEXT_DEFAULTS, **cfg}
    blocks: list[tuple[str, str]] = []  # Nemotron-H's (mixer, MLP) layers
    if family == "nemotron_h":  # one gpucap layer per mixer block (gpucap.catalog.hybrid.nemotron_blocks)
        blocks = nemotron_blocks(f)
        if len(f.text("hybrid_override_pattern")) != f.count("num_hidden_layers"):
            raise ValueError(
                f"{where}: hybrid_override_pattern has {len(f.text('hybrid_override_pattern'))} blocks but "
                f"num_hidden_layers is {f.count('num_hidden_layers')}"
            )
        cfg = {
            **cfg,
            "num_hidden_layers": len(blocks),
            "head_dim": _get(cfg, "head_dim", "attention_head_dim"),
        }
    if family == "falcon":
        cfg = {
            **cfg,
            "num_hidden_layers": _get(cfg, "num_hidden_layers", "n_layer"),
            "num_attention_heads": _get(cfg, "num_attention_heads", "n_head"),
            "num_key_value_heads": _get(cfg, "num_kv_heads", "n_head_kv", default=1),
        }
    f = Fields(cfg, where)
    missing = [k for k in _REQUIRED if cfg.get(k) is None]
    mla = family in ("deepseek_v3", "deepseek_v32")
    if mla:
        missing += [k for k in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim") if cfg.get(k) is None]
    if missing:
        raise ValueError(f"{where}: config of family {family!r} lacks required keys: {', '.join(missing)}")

    n = f.count("num_hidden_layers")
    hidden = f.count("hidden_size")
    heads = f.count("num_attention_heads")
    kv_heads = f.count("num_key_value_heads", default=heads)
    if not mla and heads % kv_heads:
        raise ValueError(
            f"{where}: num_attention_heads = {heads} is not a multiple of num_key_value_heads = {kv_heads} "
            "(each KV head serves a whole group of query heads)"
        )
    head_dim = f.count("head_dim", default=max(hidden // heads, 1))
    layer_is_moe = _moe_layout(f, family, n)
    layer_has_mlp: tuple[bool, ...] = ()
    if family == "nemotron_h":  # the MLP block after each mixer: dense, MoE or none
        layer_is_moe = tuple(mlp == "moe" for _, mlp in blocks)
        layer_has_mlp = tuple(bool(mlp) for _, mlp in blocks)
    moe = any(layer_is_moe)
    experts = f.count(*EXPERT_KEYS) if moe else 0
    per_token = f.count("num_experts_per_tok", "experts_per_token") if moe else 0
    if per_token > experts:
        raise ValueError(f"{where}: num_experts_per_tok = {per_token} is more than the {experts} experts of a layer")

    if family in ("llama4", "llama4_text"):
        dense_inter = f.count("intermediate_size_mlp", "intermediate_size", default=0, least=0)
        moe_inter = f.count("intermediate_size", default=0, least=0)
        shared_inter = moe_inter  # one shared expert per MoE layer
    elif family == "nemotron_h":  # relu2 MLPs; one shared expert of its own width
        dense_inter = f.count("intermediate_size", default=0, least=0)
        moe_inter = f.count("moe_intermediate_size", default=0, least=0)
        shared_inter = f.count("n_shared_experts", default=0, least=0) * f.count(
            "moe_shared_expert_intermediate_size", default=0, least=0
        )
    elif family == "jamba":  # the dense and the expert MLPs share one width
        dense_inter = moe_inter = f.count("intermediate_size")
        shared_inter = 0
    elif family in ("mixtral", "gpt_oss", "minimax_m1", "minimax_text_01", "minimax_m2"):
        dense_inter = 0
        moe_inter = f.count("intermediate_size", default=0, least=0)
        shared_inter = 0
    else:
        dense_inter = f.count("intermediate_size", "ffn_hidden_size", default=4 * hidden)
        moe_inter = f.count("moe_intermediate_size", default=0, least=0)
        shared_inter = f.count("n_shared_experts", default=0, least=0) * moe_inter
        shared_inter += f.count("shared_expert_intermediate_size", default=0, least=0)
    if moe and not moe_inter:
        raise ValueError(f"{where}: MoE config lacks the expert width (moe_intermediate_size/intermediate_size)")

    unquantized: set[str] = set()
    quant = Fields(f.section("quantization_config"), f"{where}: quantization_config")
    skip = quant.items("modules_to_not_convert", (str,)) or []
    if quant.text("quant_method") == "mxfp4" and any("self_attn" in m for m in skip):
        unquantized.add("attention")
    checkpoint = checkpoint_format(quant)

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
        q_lora_rank=f.count("q_lora_rank", default=0, least=0) if mla else 0,
        kv_lora_rank=f.count("kv_lora_rank") if mla else 0,
        qk_nope_head_dim=f.count("qk_nope_head_dim") if mla else 0,
        qk_rope_head_dim=f.count("qk_rope_head_dim") if mla else 0,
        v_head_dim=f.count("v_head_dim", default=0, least=0) if mla else 0,
        index_n_heads=f.count("index_n_heads", default=0, least=0),
        index_head_dim=f.count("index_head_dim", default=0, least=0),
        index_topk=f.count("index_topk", default=0, least=0),
        num_experts=experts,
        experts_per_token=per_token,
        moe_intermediate_size=moe_inter if moe else 0,
        shared_expert_intermediate_size=shared_inter if moe else 0,
        expert_bias=family == "gpt_oss",
        layer_is_moe=layer_is_moe,
        layer_window=_layer_windows(f, family, n),
        unquantized_modules=frozenset(unquantized),
        checkpoint_dtype=checkpoint,
        vision=parse_vision_config(family, vision, raw, hidden, where),
        max_position_embeddings=f.count("max_position_embeddings", default=0, least=0),
        linear=linear_mixer(f, family, hidden, heads, head_dim),
        layer_has_mlp=layer_has_mlp,
        attention_output_gate=family == "qwen3_next" and f.flag("attn_output_gate", True),
    )
