"""The fields of a model's ``config.json``, read by concern for ``gpucap.catalog.models``: the
family's own renames and defaults, the required keys, the attention shape (heads, KV heads,
head_dim), MLA and DeepSeek-V3.2's indexer, the layer windows (sliding, chunked or linear), the
MoE layout and widths, and the checkpoint's quantization. Every read goes through ``Fields``, so
a bad value is one line naming the file, the key and what is expected.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

from gpucap.catalog.configfields import Fields
from gpucap.catalog.hybrid import HYBRID_FAMILIES, linear_layers, nemotron_blocks

MLA_FAMILIES = ("deepseek_v3", "deepseek_v32")  # multi-head latent attention (DeepSeek)

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


def _get(cfg: Mapping[str, Any], *keys: str, default: Any = None) -> Any:
    """The value of the first of ``keys`` that ``cfg`` holds (not null), else ``default``."""
    for k in keys:
        if cfg.get(k) is not None:
            return cfg[k]
    return default


def merge_text_config(raw: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
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


ATTENTION_KINDS = ("full_attention", "sliding_attention")
# families whose configs always list each layer's attention (no default pattern to fall back on)
LAYER_TYPES_REQUIRED = ("gpt_oss",)


def layer_kinds(f: Fields, n: int, kinds: tuple[str, ...]) -> list[str] | None:
    """``layer_types``, checked: one of ``kinds`` per layer (``n``); None when absent. A list of
    another length, empty, or with a kind gpucap does not know is an error naming the field."""
    if "layer_types" not in f.cfg or f.cfg["layer_types"] is None:
        return None
    types = f.items("layer_types", (str,))
    if types is None or len(types) != n:
        got = 0 if types is None else len(types)
        raise ValueError(
            f"{f.where}: layer_types lists {got} layers but the model has {n} (num_hidden_layers); give one of "
            f"{' or '.join(kinds)} per layer"
        )
    unknown = sorted(set(types) - set(kinds))
    if unknown:
        raise ValueError(
            f"{f.where}: layer_types has {', '.join(repr(u) for u in unknown)}, not a layer kind gpucap knows here; "
            f"use {' or '.join(kinds)}"
        )
    return types


def layer_windows(f: Fields, family: str, n: int) -> tuple[int | None, ...]:
    """Tokens each layer's attention keeps: None = full context, 0 = a linear layer (no KV)."""
    if family in HYBRID_FAMILIES:
        return tuple(0 if lin else None for lin in linear_layers(f, family, n))
    types = layer_kinds(f, n, ATTENTION_KINDS)
    if types is None and family in LAYER_TYPES_REQUIRED:
        raise ValueError(
            f"{f.where}: {family} configs list layer_types, one of {' or '.join(ATTENTION_KINDS)} per layer "
            f"({n}, num_hidden_layers); this one has none: use the checkpoint's own config.json"
        )
    window = f.count("sliding_window", default=0, least=0)
    if family in ("llama4", "llama4_text") and f.count("attention_chunk_size", default=0, least=0):
        chunk = f.count("attention_chunk_size")
        # an empty list is the default pattern, as transformers' Llama4TextConfig reads it; any
        # other list gives one flag per layer
        nope = f.items("no_rope_layers", (int, bool))
        if nope:  # 1 = RoPE layer with chunked attention, 0 = global NoPE
            f.items("no_rope_layers", (int, bool), n)  # of the model's length, or an error naming it
            return tuple(chunk if r else None for r in nope)
        interval = f.count("nope_layer_interval", default=4)
        return tuple(None if (i + 1) % interval == 0 else chunk for i in range(n))
    if types is not None:
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


def moe_layout(f: Fields, family: str, n: int) -> tuple[bool, ...]:
    """Whether each layer's MLP is a mixture of experts: none without experts; Llama 4 every
    ``interleave_moe_layer_step``-th layer (or its ``moe_layers``); Jamba every
    ``expert_layer_period``-th from ``expert_layer_offset``; others every ``moe_layer_freq``-th
    (``decoder_sparse_step``) from ``first_k_dense_replace``, but ``mlp_only_layers``."""
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


def family_config(cfg: dict[str, Any], family: str, where: str) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """``cfg`` with the family's own defaults and key names, and Nemotron-H's (mixer, MLP) blocks
    (empty for other families): Gemma 3 takes transformers' ``Gemma3TextConfig`` defaults;
    Nemotron-H has one gpucap layer per mixer block of ``hybrid_override_pattern``
    (``gpucap.catalog.hybrid.nemotron_blocks``) and ``attention_head_dim``; Falcon names its
    counts ``n_layer``, ``n_head`` and ``n_head_kv`` (one KV head when absent)."""
    if family in ("gemma3", "gemma3_text"):
        cfg = {**_GEMMA3_TEXT_DEFAULTS, **cfg}
    blocks: list[tuple[str, str]] = []  # Nemotron-H's (mixer, MLP) layers
    if family == "nemotron_h":  # one gpucap layer per mixer block (gpucap.catalog.hybrid.nemotron_blocks)
        f = Fields(cfg, where)
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
    return cfg, blocks


def check_required(cfg: Mapping[str, Any], family: str, where: str) -> None:
    """Raise ValueError naming the keys the family needs that ``cfg`` lacks (``_REQUIRED``, and
    an MLA model's ``kv_lora_rank``, ``qk_rope_head_dim`` and ``qk_nope_head_dim``)."""
    missing = [k for k in _REQUIRED if cfg.get(k) is None]
    if family in MLA_FAMILIES:
        missing += [k for k in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim") if cfg.get(k) is None]
    if missing:
        raise ValueError(f"{where}: config of family {family!r} lacks required keys: {', '.join(missing)}")


def attention_shape(f: Fields, mla: bool, where: str) -> tuple[int, int, int, int, int]:
    """Layers, hidden size, attention heads, KV heads (all heads when absent: MHA) and head_dim
    (``hidden / heads`` when absent). GQA/MQA needs ``heads = g x KV heads`` (each KV head
    serves a whole group of query heads); MLA has no KV heads to group."""
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
    return n, hidden, heads, kv_heads, head_dim


class MlaFields(TypedDict):
    """``ModelSpec``'s MLA and indexer fields."""

    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    index_n_heads: int
    index_head_dim: int
    index_topk: int


def mla_fields(f: Fields, mla: bool) -> MlaFields:
    """Multi-head latent attention's ranks and head dims (DeepSeek-V2 paper, sec. 2.1; all 0 for
    GQA/MQA): the query's low rank (0 = a full-rank query), the KV latent's rank, the per-head
    dims without and with RoPE, and V's head dim; and DeepSeek-V3.2's sparse-attention indexer:
    its heads, head dim and the top-k keys each query attends to (0 without one)."""
    return MlaFields(
        q_lora_rank=f.count("q_lora_rank", default=0, least=0) if mla else 0,
        kv_lora_rank=f.count("kv_lora_rank") if mla else 0,
        qk_nope_head_dim=f.count("qk_nope_head_dim") if mla else 0,
        qk_rope_head_dim=f.count("qk_rope_head_dim") if mla else 0,
        v_head_dim=f.count("v_head_dim", default=0, least=0) if mla else 0,
        index_n_heads=f.count("index_n_heads", default=0, least=0),
        index_head_dim=f.count("index_head_dim", default=0, least=0),
        index_topk=f.count("index_topk", default=0, least=0),
    )


def moe_counts(
    f: Fields, family: str, n: int, blocks: list[tuple[str, str]], where: str
) -> tuple[tuple[bool, ...], tuple[bool, ...], int, int]:
    """Which layers are MoE (``moe_layout``; Nemotron-H: the MLP block after each mixer, dense,
    MoE or none), which have an MLP (``()``: all), the routed experts E of a MoE layer and the
    k each token picks (``k <= E``; both 0 for a dense model)."""
    layer_is_moe = moe_layout(f, family, n)
    layer_has_mlp: tuple[bool, ...] = ()
    if family == "nemotron_h":  # the MLP block after each mixer: dense, MoE or none
        layer_is_moe = tuple(mlp == "moe" for _, mlp in blocks)
        layer_has_mlp = tuple(bool(mlp) for _, mlp in blocks)
    moe = any(layer_is_moe)
    experts = f.count(*EXPERT_KEYS) if moe else 0
    per_token = f.count("num_experts_per_tok", "experts_per_token") if moe else 0
    if per_token > experts:
        raise ValueError(f"{where}: num_experts_per_tok = {per_token} is more than the {experts} experts of a layer")
    return layer_is_moe, layer_has_mlp, experts, per_token


def mlp_widths(f: Fields, family: str, hidden: int, moe: bool, where: str) -> tuple[int, int, int]:
    """Widths of the dense MLP, of one routed expert, and of all shared experts of a layer
    together. Llama 4: ``intermediate_size_mlp`` dense, one shared expert as wide as a routed
    one; Nemotron-H: ``n_shared_experts x moe_shared_expert_intermediate_size`` shared; Jamba:
    one width for dense and experts; Mixtral, gpt-oss, MiniMax: every layer MoE, no shared
    expert; others: ``n_shared_experts x moe_intermediate_size`` plus
    ``shared_expert_intermediate_size`` shared, the dense width ``4 x hidden`` when absent."""
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
    return dense_inter, moe_inter, shared_inter


def quantization(f: Fields, where: str) -> tuple[frozenset[str], str]:
    """The weights that stay 16-bit whatever the format ("attention" where an MXFP4 checkpoint
    lists ``self_attn`` in ``modules_to_not_convert``: gpt-oss) and the checkpoint's weight
    format (``checkpoint_format``), from ``quantization_config``."""
    unquantized: set[str] = set()
    quant = Fields(f.section("quantization_config"), f"{where}: quantization_config")
    skip = quant.items("modules_to_not_convert", (str,)) or []
    if quant.text("quant_method") == "mxfp4" and any("self_attn" in m for m in skip):
        unquantized.add("attention")
    return frozenset(unquantized), checkpoint_format(quant)
