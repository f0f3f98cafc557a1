"""Vision encoders of multimodal models: parameters, tokens per image, work per image.

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
  projection (transformers ``modeling_llama4.py`` and ``image_processing_llama4_fast.py``).

Encoder FLOP per image = 2 x (layer params x encoder sequence + adapter params x tokens)
+ attention ``4 x hidden`` per (query, key) pair per layer (bidirectional: all pairs, not half).
Biases and norms are counted as if they were matrix entries (< 0.1% of the FLOP).
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
ENCODER_TP_MODES = ("weights", "data")
ENCODER_BYTES_PER_PARAM = 2.0  # encoders stay bf16 in quantized checkpoints (quantization ignore lists)

# Qwen2.5-VL image processor (preprocessor_config.json of Qwen/Qwen2.5-VL-7B-Instruct).
QWEN_MIN_PIXELS = 3136  # 56 x 56
QWEN_MAX_PIXELS = 12_845_056  # 16384 x 28 x 28
LLAMA4_MAX_TILES = 16  # Llama4ImageProcessorFast.max_patches


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


@dataclass(frozen=True)
class ImageGrid:
    """How one image is cut up: encoder runs (tiles), patches each, language-model tokens."""

    tiles: int
    patches_per_tile: int  # pixel patches of one tile (the patch projection's inputs)
    tokens: int  # language-model tokens of the whole image
    attention_pairs: float  # (query, key) pairs summed over all layers and tiles

    @property
    def patches(self) -> int:
        """Pixel patches of the whole image."""
        return self.tiles * self.patches_per_tile


@dataclass(frozen=True)
class ImageWork:
    """Encoder work for one image, unsharded."""

    tokens: int
    linear_flop: float
    attention_flop: float
    sequence: int  # encoder positions (for activation and all-reduce traffic)

    @property
    def flop(self) -> float:
        return self.linear_flop + self.attention_flop


@dataclass(frozen=True)
class Images:
    """Images each request carries.

    ``size_px``: the side of a square image or ``(height, width)``; ``None`` takes the encoder's
    native size (Gemma 3: 896, Llama 4: one 336-px tile); Qwen2.5-VL needs a size.
    ``encoder_tp_mode``: vLLM's ``--mm-encoder-tp-mode``: ``"weights"`` (default) splits each
    encoder layer over the tp GPUs like the language model, ``"data"`` keeps the whole encoder
    on every GPU and spreads the images over them.
    """

    per_request: float = 1.0
    size_px: int | tuple[int, int] | None = None
    encoder_tp_mode: str = "weights"

    def __post_init__(self) -> None:
        n = self.per_request
        if isinstance(n, bool) or not isinstance(n, (int, float)) or not (n >= 0 and math.isfinite(n)):
            raise ValueError(f"images_per_request must be a number >= 0, got {n!r}; use 0 for text-only requests")
        size = self.size_px
        sides = size if isinstance(size, tuple) else (size, size)
        if size is not None and not (
            len(sides) == 2 and all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in sides)
        ):
            raise ValueError(
                f"image_size_px must be a positive integer (a square side) or (height, width), got {size!r}"
            )
        if self.encoder_tp_mode not in ENCODER_TP_MODES:
            raise ValueError(
                f"encoder_tp_mode must be one of {', '.join(ENCODER_TP_MODES)}, got {self.encoder_tp_mode!r}"
            )

    def height_width(self, enc: VisionEncoder) -> tuple[int, int]:
        """The image size in pixels, the encoder's native size when none is given."""
        if self.size_px is None:
            if not enc.image_size_px:
                raise ValueError(
                    f"image_size_px is needed for a {enc.kind} encoder (it reads images at their own "
                    "resolution); give e.g. image_size_px=1344"
                )
            return enc.image_size_px, enc.image_size_px
        if isinstance(self.size_px, tuple):
            return self.size_px
        return self.size_px, self.size_px


# ---- tokens per image ---------------------------------------------------------------------
def qwen_resized_px(
    height_px: int,
    width_px: int,
    *,
    factor: int = 28,
    min_pixels: int = QWEN_MIN_PIXELS,
    max_pixels: int = QWEN_MAX_PIXELS,
) -> tuple[int, int]:
    """Qwen2.5-VL ``smart_resize``: round each side to a multiple of ``factor`` (patch x merge =
    28 px), then scale both down (up) to keep ``height x width`` within [min, max] pixels.

    ``h = round(H / 28) x 28``; if ``h w > max``: ``h = floor(H / beta / 28) x 28`` with
    ``beta = sqrt(H W / max)``; if below min: ``ceil(H beta / 28) x 28`` with
    ``beta = sqrt(min / (H W))`` (transformers ``image_processing_qwen2_vl.smart_resize``).
    """
    h = max(factor, round(height_px / factor) * factor)
    w = max(factor, round(width_px / factor) * factor)
    if h * w > max_pixels:
        beta = math.sqrt(height_px * width_px / max_pixels)
        h = max(factor, math.floor(height_px / beta / factor) * factor)
        w = max(factor, math.floor(width_px / beta / factor) * factor)
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height_px * width_px))
        h = math.ceil(height_px * beta / factor) * factor
        w = math.ceil(width_px * beta / factor) * factor
    return h, w


def llama4_canvas_tiles(
    height_px: int, width_px: int, *, tile_px: int = 336, max_tiles: int = LLAMA4_MAX_TILES
) -> tuple[int, int]:
    """Tiles (rows, columns) of the canvas Llama 4 fits an image to (``get_best_fit``).

    Canvases are all ``r x c`` tile grids with ``r c <= max_tiles``. Each allows the scale
    ``min(r tile / H, c tile / W)``; the smallest scale >= 1 wins (no downscaling), else the
    largest scale < 1; ties go to the smallest canvas.
    """
    canvases = [(r, c) for r in range(1, max_tiles + 1) for c in range(1, max_tiles // r + 1)]
    scales = {rc: min(rc[0] * tile_px / height_px, rc[1] * tile_px / width_px) for rc in canvases}
    up = [s for s in scales.values() if s >= 1]
    best = min(up) if up else max(scales.values())
    return min((rc for rc in canvases if scales[rc] == best), key=lambda rc: rc[0] * rc[1])


def window_pairs(rows: int, cols: int, window: int) -> int:
    """Attention pairs of a ``rows x cols`` grid of merged tokens cut into ``window x window``
    windows (edge windows smaller), each merged token being ``m`` patches that all attend
    within their window: ``sum over windows of (patches in window)^2``. With window side
    lengths ``l_r`` (rows) and ``l_c`` (columns) this factorizes as
    ``m^2 x (sum l_r^2) x (sum l_c^2)``; the caller multiplies by ``m^2``."""

    def squares(n: int) -> int:
        return (n // window) * window * window + (n % window) ** 2

    return squares(rows) * squares(cols)


def image_grid(enc: VisionEncoder, height_px: int, width_px: int) -> ImageGrid:
    """Tiles, patches and language-model tokens of one image, and the encoder's attention pairs.

    Qwen2.5-VL at 1344 x 1344 px: 96 x 96 = 9216 patches of 14 px, 9216 / 4 = 2304 tokens.
    Gemma 3: any image is resized to 896 px: 64 x 64 = 4096 patches, 256 tokens.
    Llama 4: one tile (24 x 24 + 1 class token, 144 tokens), or r x c tiles plus a global one.
    """
    layers = enc.num_layers
    if enc.kind == "qwen2_5_vl":
        h, w = qwen_resized_px(height_px, width_px, factor=enc.patch_size * enc.merge_side)
        gh, gw = h // enc.patch_size, w // enc.patch_size
        n = gh * gw
        m = enc.merge_side
        windowed = window_pairs(gh // m, gw // m, enc.window_side_tokens) * enc.patches_per_token**2
        pairs = enc.full_attention_layers * n * n + (layers - enc.full_attention_layers) * windowed
        return ImageGrid(tiles=1, patches_per_tile=n, tokens=n // enc.patches_per_token, attention_pairs=float(pairs))
    side = enc.image_size_px // enc.patch_size
    if enc.kind == "siglip":
        n = side * side
        return ImageGrid(
            tiles=1, patches_per_tile=n, tokens=enc.tokens_per_image, attention_pairs=float(layers * n * n)
        )
    rows, cols = llama4_canvas_tiles(height_px, width_px, tile_px=enc.image_size_px)
    tiles = rows * cols + (1 if rows * cols > 1 else 0)
    seq = side * side + enc.class_tokens
    return ImageGrid(
        tiles=tiles,
        patches_per_tile=side * side,
        tokens=tiles * side * side // enc.patches_per_token,
        attention_pairs=float(tiles * layers * seq * seq),
    )


def image_work(enc: VisionEncoder, images: Images) -> ImageWork:
    """Encoder FLOP for one image of ``images.size_px``:

    ``linear = 2 x [(layers x layer params) x sequence + patch params x patches
    + adapter params x tokens]``, ``attention = 4 x hidden x pairs`` (QK^T and AV, 2 x hidden
    FLOP each per pair, pairs summed over layers)."""
    g = image_grid(enc, *images.height_width(enc))
    sequence = g.patches + g.tiles * enc.class_tokens
    linear = 2.0 * (
        enc.num_layers * enc.layer_params * sequence + enc.patch_params * g.patches + enc.adapter_params * g.tokens
    )
    return ImageWork(
        tokens=g.tokens,
        linear_flop=linear,
        attention_flop=4.0 * enc.hidden_size * g.attention_pairs,
        sequence=sequence,
    )


# ---- memory -------------------------------------------------------------------------------
def encoder_weight_bytes_per_gpu(enc: VisionEncoder, tp: int, mode: str = "weights") -> float:
    """Encoder weights one GPU holds, bf16.

    vLLM's default ``--mm-encoder-tp-mode weights`` splits the encoder layers and the adapter
    like the language model (column/row-parallel linears), so ``(layers + adapter) / tp``; the
    patch projection and position embeddings are small and counted whole on every GPU. With
    ``data`` every GPU holds the whole encoder and encodes its share of the images (vLLM
    ``MultiModalConfig.mm_encoder_tp_mode``). The encoder sits on the first pipeline stage.
    """
    split = enc.num_layers * enc.layer_params + enc.adapter_params
    whole = enc.patch_params + enc.fixed_params
    shards = tp if mode == "weights" else 1
    return (split / shards + whole) * ENCODER_BYTES_PER_PARAM


def encoder_cache_bytes(enc: VisionEncoder, tokens_per_image: int, max_num_batched_tokens: int) -> float:
    """vLLM's encoder cache: encoder outputs (one ``text hidden`` bf16 vector per image token)
    waiting for their prefill, sized ``max(max_num_batched_tokens, tokens of one image)``
    embeddings (vLLM V1 ``compute_encoder_budget``), on every GPU."""
    return max(max_num_batched_tokens, tokens_per_image) * enc.text_hidden_size * ENCODER_BYTES_PER_PARAM


def encoder_activation_bytes(enc: VisionEncoder, work: ImageWork, *, images: int, tp: int) -> float:
    """Peak activations of the encoder's profiling run over ``images`` images:
    ``sequence x (4 x hidden + 2 x intermediate / tp) x 2 bytes`` per image, as
    ``gpucap.physics.memory.activation_bytes_per_gpu`` counts the language model's."""
    per_position = (4 * enc.hidden_size + 2 * enc.intermediate_size / tp) * ENCODER_BYTES_PER_PARAM
    return images * work.sequence * per_position


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


def _siglip(v: Fields, top: Fields, text_hidden: int) -> VisionEncoder:
    """SigLIP layer: LayerNorm x 2, q, k, v, o (h -> h) with bias, MLP fc1 / fc2 with bias.
    Patch projection: Conv2d 3 x 14 x 14 -> h with bias; position embedding per patch; final
    LayerNorm. Gemma 3 projector: RMSNorm (h) and Linear(h, text hidden) without bias."""
    h, i = v.count("hidden_size"), v.count("intermediate_size")
    p, size = v.count("patch_size"), v.count("image_size")
    tokens = top.count("mm_tokens_per_image", default=256)
    patches = (size // p) ** 2
    if patches < tokens:
        raise v.bad("image_size", size, f"large enough for {tokens} tokens of {p}-pixel patches")
    layers = v.count("num_hidden_layers")
    layer = vit_layer_params(h, i)
    return VisionEncoder(
        kind="siglip",
        num_layers=layers,
        hidden_size=h,
        intermediate_size=i,
        num_heads=v.count("num_attention_heads", default=16),
        patch_size=p,
        image_size_px=size,
        patches_per_token=patches // tokens,
        layer_params=float(layer),
        patch_params=float(v.count("num_channels", default=3) * p * p * h + h),
        fixed_params=float(patches * h + 2 * h),
        adapter_params=float(h + h * text_hidden),
        text_hidden_size=text_hidden,
        full_attention_layers=layers,
        tokens_per_image=tokens,
    )


def _llama4(v: Fields, text_hidden: int) -> VisionEncoder:
    """Llama 4 layer: LayerNorm x 2, q, k, v, o with bias, MLP fc1 / fc2 with bias. Patch
    projection: unfold + Linear(3 x 14 x 14, h) without bias; class embedding, position
    embedding per patch + class, LayerNorm pre and post. Adapter: pixel shuffle, then
    Linear(intermediate, projector_input_dim) and Linear(projector_output_dim,
    projector_output_dim) without bias; projector Linear(vision_output_dim, text hidden)."""
    h, i = v.count("hidden_size"), v.count("intermediate_size")
    p, size = v.count("patch_size"), v.count("image_size")
    ratio = v.number("pixel_shuffle_ratio", default=0.5, high=1.0)
    proj_in = v.count("projector_input_dim", default=4096)
    proj_out = v.count("projector_output_dim", default=4096)
    vision_out = v.count("vision_output_dim", default=proj_out)
    patches = (size // p) ** 2
    layers = v.count("num_hidden_layers")
    layer = vit_layer_params(h, i)
    return VisionEncoder(
        kind="llama4",
        num_layers=layers,
        hidden_size=h,
        intermediate_size=i,
        num_heads=v.count("num_attention_heads", default=16),
        patch_size=p,
        image_size_px=size,
        patches_per_token=round(1.0 / (ratio * ratio)),
        layer_params=float(layer),
        patch_params=float(v.count("num_channels", default=3) * p * p * h),
        fixed_params=float(h + (patches + 1) * h + 4 * h),
        adapter_params=float(i * proj_in + proj_out * proj_out + vision_out * text_hidden),
        text_hidden_size=text_hidden,
        full_attention_layers=layers,
        class_tokens=1,
    )
