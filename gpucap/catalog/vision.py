"""Vision encoders of multimodal models as their ``config.json`` describes them: shapes and
parameter counts, from which ``gpucap.physics.vision`` computes tokens and work per image.

Three encoder families, read from the ``vision_config`` of a Hugging Face ``config.json``:

- Qwen2.5-VL (``qwen2_5_vl``): a ViT over 14-px patches at the image's own resolution (resized
  to multiples of 28 px), SwiGLU MLPs, window attention (8 x 8 patches) in all layers but
  ``fullatt_block_indexes``; a merger turns each 2 x 2 block of patches into one language-model
  token (transformers ``modeling_qwen2_5_vl.py``).
- Gemma 3 (``siglip``): SigLIP-So400m on a fixed 896 x 896 image, 64 x 64 patches of 14 px,
  average-pooled 4 x 4 to ``mm_tokens_per_image`` = 256 tokens, then one linear projection
  (transformers ``modeling_gemma3.py``, ``Gemma3MultiModalProjector``).
- Llama 4 (``llama4``): a ViT on 336-px tiles (24 x 24 patches + a class token); the image is
  fitted to a canvas of up to 16 tiles, plus one global tile when it takes more than one; pixel
  shuffle (ratio 0.5) turns 576 patches into 144 tokens per tile, then a two-layer MLP and a
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpucap.catalog.configfields import Fields

VISION_KINDS: dict[str, str] = {
    "qwen2_5_vl": "Qwen2.5-VL ViT (dynamic resolution, window attention, 2x2 patch merge)",
    "siglip": "SigLIP (Gemma 3: 896 px, 4x4 average pooling to 256 tokens)",
    "llama4": "Llama 4 ViT (336-px tiles, pixel shuffle 0.5)",
}


@dataclass(frozen=True)
class VisionEncoder:
    """Shapes of a vision encoder and what its adapter feeds the language model.

    ``layer_params``: one encoder layer (attention, MLP, their biases and norms). ``patch_params``:
    the patch projection (one matrix-vector product per patch). ``fixed_params``: position and
    class embeddings and final norms (no matrix products). ``adapter_params``: the merger /
    pixel-shuffle MLP / projection, applied once per language-model token.
    """

    kind: str
    num_layers: int
    hidden_size: int
    intermediate_size: int
    num_heads: int
    patch_size: int
    image_size_px: int  # native input side (SigLIP image, Llama 4 tile); 0 = any size (Qwen2.5-VL)
    patches_per_token: int  # 4 (2 x 2 merge, pixel shuffle 0.5) or 16 (Gemma 3 4 x 4 pooling)
    layer_params: float
    patch_params: float
    fixed_params: float
    adapter_params: float
    text_hidden_size: int
    full_attention_layers: int  # layers that attend over the whole image (or tile)
    window_side_tokens: int = 0  # Qwen2.5-VL: window side in merged tokens (112 px / 28 px = 4)
    tokens_per_image: int = 0  # fixed count (Gemma 3: 256); 0 = from the image size
    class_tokens: int = 0  # Llama 4: one class token per tile

    @property
    def params(self) -> float:
        """All encoder parameters, adapter and projection to the language model included."""
        return self.num_layers * self.layer_params + self.patch_params + self.fixed_params + self.adapter_params

    @property
    def merge_side(self) -> int:
        return math.isqrt(self.patches_per_token)


# ---- parsing ------------------------------------------------------------------------------
def _need(cfg: Mapping[str, Any], keys: tuple[str, ...], where: str) -> None:
    missing = [k for k in keys if cfg.get(k) is None]
    if missing:
        raise ValueError(f"{where}: vision_config lacks required keys: {', '.join(missing)}")


def parse_vision_config(
    family: str, vision: Mapping[str, Any], top: Mapping[str, Any], text_hidden: int, name: str = "model"
) -> VisionEncoder | None:
    """The encoder described by ``vision_config`` of a ``family`` config, or None when the model
    has none (or a family without a modelled encoder). Every field is read with its type and
    range (``gpucap.catalog.configfields``)."""
    if not vision:
        return None
    v = Fields(vision, f"{name}: vision_config")
    if family == "qwen2_5_vl":
        _need(vision, ("depth", "hidden_size", "intermediate_size", "num_heads", "patch_size"), name)
        return _qwen2_5_vl(v, text_hidden)
    if family == "gemma3":
        _need(vision, ("hidden_size", "intermediate_size", "num_hidden_layers", "patch_size", "image_size"), name)
        return _siglip(v, Fields(top, name), text_hidden)
    if family == "llama4":
        _need(vision, ("hidden_size", "intermediate_size", "num_hidden_layers", "patch_size", "image_size"), name)
        return _llama4(v, text_hidden)
    return None


def _qwen2_5_vl(v: Fields, text_hidden: int) -> VisionEncoder:
    """Per layer: RMSNorm x 2, qkv (h -> 3h) and proj (h -> h) with bias, SwiGLU MLP (gate, up,
    down) with bias. Patch projection: Conv3d over 3 x 2 x 14 x 14 inputs, no bias. Merger:
    RMSNorm, Linear(4h, 4h) + GELU + Linear(4h, out), with bias."""
    h, i = v.count("hidden_size"), v.count("intermediate_size")
    p, t = v.count("patch_size"), v.count("temporal_patch_size", default=2)
    merge = v.count("spatial_merge_size", default=2)
    out = v.count("out_hidden_size", default=text_hidden)
    depth = v.count("depth")
    full = v.layers("fullatt_block_indexes", depth)
    layer = 2 * h + (h * 3 * h + 3 * h) + (h * h + h) + 3 * h * i + 2 * i + h
    mh = h * merge * merge
    return VisionEncoder(
        kind="qwen2_5_vl",
        num_layers=depth,
        hidden_size=h,
        intermediate_size=i,
        num_heads=v.count("num_heads"),
        patch_size=p,
        image_size_px=0,
        patches_per_token=merge * merge,
        layer_params=float(layer),
        patch_params=float(v.count("in_chans", "in_channels", default=3) * t * p * p * h),
        fixed_params=0.0,
        adapter_params=float(h + mh * mh + mh + mh * out + out),
        text_hidden_size=text_hidden,
        full_attention_layers=len(full) if full is not None else depth,
        window_side_tokens=v.count("window_size", default=112) // (p * merge),
    )


def vit_layer_params(hidden: int, intermediate: int) -> float:
    """Parameters of one ViT encoder layer (SigLIP, Llama 4 vision): two LayerNorms (``4 h``),
    q, k, v, o with bias (``4 (h^2 + h)``), and a two-matrix MLP with bias (``2 h i + i + h``)."""
    h, i = hidden, intermediate
    return float(4 * h + 4 * (h * h + h) + 2 * h * i + i + h)


@dataclass(frozen=True)
class _ViT:
    """What a plain ViT's ``vision_config`` gives (SigLIP, Llama 4 vision): square images or tiles
    of ``image_size`` px cut into ``patch_size``-px patches, layers of ``vit_layer_params`` that
    all attend over the whole image."""

    hidden: int
    intermediate: int
    patch: int
    image_size: int
    layers: int
    heads: int
    channels: int

    @classmethod
    def read(cls, v: Fields) -> _ViT:
        h, i = v.count("hidden_size"), v.count("intermediate_size")
        p, size = v.count("patch_size"), v.count("image_size")
        layers, heads = v.count("num_hidden_layers"), v.count("num_attention_heads", default=16)
        return cls(h, i, p, size, layers, heads, v.count("num_channels", default=3))

    @property
    def patches(self) -> int:
        """Patches per image (or tile)."""
        return (self.image_size // self.patch) ** 2

    def encoder(self, kind: str, text_hidden: int, *, patch_bias: bool, **rest: Any) -> VisionEncoder:
        """The encoder, with the fields that differ by family in ``rest`` (``patches_per_token``,
        ``fixed_params``, ``adapter_params``, ...); the patch projection has a bias where
        ``patch_bias``."""
        h, p = self.hidden, self.patch
        return VisionEncoder(
            kind=kind,
            num_layers=self.layers,
            hidden_size=h,
            intermediate_size=self.intermediate,
            num_heads=self.heads,
            patch_size=p,
            image_size_px=self.image_size,
            layer_params=vit_layer_params(h, self.intermediate),
            patch_params=float(self.channels * p * p * h + (h if patch_bias else 0)),
            text_hidden_size=text_hidden,
            full_attention_layers=self.layers,
            **rest,
        )


def _siglip(v: Fields, top: Fields, text_hidden: int) -> VisionEncoder:
    """SigLIP layer: LayerNorm x 2, q, k, v, o (h -> h) with bias, MLP fc1 / fc2 with bias.
    Patch projection: Conv2d 3 x 14 x 14 -> h with bias; position embedding per patch; final
    LayerNorm. Gemma 3 projector: RMSNorm (h) and Linear(h, text hidden) without bias."""
    vit = _ViT.read(v)
    h, patches = vit.hidden, vit.patches
    tokens = top.count("mm_tokens_per_image", default=256)
    if patches < tokens:
        raise v.bad("image_size", vit.image_size, f"large enough for {tokens} tokens of {vit.patch}-pixel patches")
    return vit.encoder(
        "siglip",
        text_hidden,
        patch_bias=True,
        patches_per_token=patches // tokens,
        fixed_params=float(patches * h + 2 * h),
        adapter_params=float(h + h * text_hidden),
        tokens_per_image=tokens,
    )


def _llama4(v: Fields, text_hidden: int) -> VisionEncoder:
    """Llama 4 layer: LayerNorm x 2, q, k, v, o with bias, MLP fc1 / fc2 with bias. Patch
    projection: unfold + Linear(3 x 14 x 14, h) without bias; class embedding, position
    embedding per patch + class, LayerNorm pre and post. Adapter: pixel shuffle, then
    Linear(intermediate, projector_input_dim) and Linear(projector_output_dim,
    projector_output_dim) without bias; projector Linear(vision_output_dim, text hidden)."""
    vit = _ViT.read(v)
    h, i = vit.hidden, vit.intermediate
    ratio = v.number("pixel_shuffle_ratio", default=0.5, high=1.0)
    proj_in = v.count("projector_input_dim", default=4096)
    proj_out = v.count("projector_output_dim", default=4096)
    vision_out = v.count("vision_output_dim", default=proj_out)
    return vit.encoder(
        "llama4",
        text_hidden,
        patch_bias=False,
        patches_per_token=round(1.0 / (ratio * ratio)),
        fixed_params=float(h + (vit.patches + 1) * h + 4 * h),
        adapter_params=float(i * proj_in + proj_out * proj_out + vision_out * text_hidden),
        class_tokens=1,
    )
