"""Vision encoders at work: tokens per image, work per image, and the encoder's memory. Their
shapes are read from the config (``gpucap.catalog.vision``).

Images are cut up as each family's processor does (Qwen2.5-VL at the image's own resolution, Gemma 3
on one 896-px image, Llama 4 on 336-px tiles; the families are described in ``gpucap.catalog.vision``).

Encoder FLOP per image = 2 x (layer params x encoder sequence + adapter params x tokens)
+ attention ``4 x hidden`` per (query, key) pair per layer (bidirectional: all pairs, not half).
Biases and norms are counted as if they were matrix entries (< 0.1% of the FLOP).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpucap.catalog.vision import VisionEncoder
from gpucap.config import Images

ENCODER_BYTES_PER_PARAM = 2.0  # encoders stay bf16 in quantized checkpoints (quantization ignore lists)

# Qwen2.5-VL image processor (preprocessor_config.json of Qwen/Qwen2.5-VL-7B-Instruct).
QWEN_MIN_PIXELS = 3136  # 56 x 56
QWEN_MAX_PIXELS = 12_845_056  # 16384 x 28 x 28
LLAMA4_MAX_TILES = 16  # Llama4ImageProcessorFast.max_patches


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
    ``gpucap.physics.activations.activation_bytes_per_gpu`` counts the language model's."""
    per_position = (4 * enc.hidden_size + 2 * enc.intermediate_size / tp) * ENCODER_BYTES_PER_PARAM
    return images * work.sequence * per_position
