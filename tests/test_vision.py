"""Vision encoders: tokens per image, parameters, FLOP per image, memory, and the image work in a
step and in an estimate, against numbers derived by hand from the configs' dimensions."""

import numpy as np
import pytest

from gpucap.catalog.lookup import load_model, model_cards
from gpucap.config import Images, Workload, hardware
from gpucap.estimate import estimate
from gpucap.physics.coefficients import Coefficients
from gpucap.physics.extras import Extras
from gpucap.physics.memory import hardware_memory
from gpucap.physics.requests import Requests
from gpucap.physics.runs import static_batch
from gpucap.physics.step import step_work
from gpucap.physics.steptime import step_time
from gpucap.physics.vision import image_grid, image_work, llama4_canvas_tiles, qwen_resized_px

IDEAL = Coefficients(
    u_compute=1.0, u_hbm=1.0, u_link=1.0, overlap=0.0, t_overhead_s=0.0, t_seq_s=0.0, t_request_s=0.0, t_layer_s=0.0
)
QWEN_VL = "Qwen/Qwen2.5-VL-7B-Instruct"

# Qwen2.5-VL-7B ViT (config vision_config: depth 32, hidden 1280, intermediate 3420, patch 14,
# temporal patch 2, 2x2 merge, out 3584), parameters by hand:
#   block: qkv 1280 x 3840 + 3840 = 4,919,040; proj 1280^2 + 1280 = 1,639,680;
#          SwiGLU 3 x 1280 x 3420 + 2 x 3420 + 1280 = 13,140,920; two RMSNorms 2,560
#          -> 19,702,200 per block, x 32 = 630,470,400
#   patch projection (Conv3d 3 x 2 x 14 x 14 -> 1280, no bias): 1,505,280
#   merger: RMSNorm 1280 + Linear(5120, 5120) 26,219,520 + Linear(5120, 3584) 18,353,664 = 44,574,464
QWEN_BLOCK = 19_702_200
QWEN_PATCH = 1_505_280
QWEN_MERGER = 44_574_464
QWEN_VIT = 32 * QWEN_BLOCK + QWEN_PATCH + QWEN_MERGER  # 676,550,144


def test_qwen_1344px_image_is_2304_tokens() -> None:
    # 1344 = 48 x 28 is already a multiple of patch x merge: 1344 / 14 = 96 patches a side,
    # 96 x 96 = 9216 patches, 2 x 2 merge -> 9216 / 4 = 2304 tokens.
    enc = load_model(QWEN_VL).vision
    assert qwen_resized_px(1344, 1344) == (1344, 1344)
    g = image_grid(enc, 1344, 1344)
    assert (g.patches, g.tokens) == (9216, 2304)


def test_qwen_resizes_to_multiples_of_28_and_caps_pixels() -> None:
    # 1000 x 700: round(1000 / 28) = 36 -> 1008, round(700 / 28) = 25 -> 700;
    # 72 x 50 patches = 3600, 900 tokens.
    enc = load_model(QWEN_VL).vision
    assert qwen_resized_px(1000, 700) == (1008, 700)
    assert image_grid(enc, 1000, 700).tokens == 900
    # 3000 x 5000 = 15e6 px > max 12,845,056: beta = sqrt(15e6 / 12,845,056) = 1.08063,
    # floor(3000 / 1.08063 / 28) = floor(99.15) = 99 -> 2772, floor(5000 / 1.08063 / 28) = 165 -> 4620;
    # 99 x 165 = 16,335 tokens.
    assert qwen_resized_px(3000, 5000) == (2772, 4620)
    assert image_grid(enc, 3000, 5000).tokens == 16_335


def test_qwen_vit_parameters_match_the_report() -> None:
    spec = load_model(QWEN_VL)
    assert spec.vision_params == QWEN_VIT
    card = model_cards()[QWEN_VL]
    # Qwen2.5-VL report: ViT 675M; the Hugging Face page: 8.29B for the whole checkpoint
    assert spec.vision_params == pytest.approx(card["published_vision_params"], rel=0.005)
    assert spec.total_params + spec.vision_params == pytest.approx(
        card["published_total_with_vision_params"], rel=0.005
    )


def test_qwen_encoder_flop_for_one_image() -> None:
    # 1344 px, 9216 patches, 2304 tokens:
    #   linear = 2 x (32 x 19,702,200 x 9216 + 1,505,280 x 9216 + 44,574,464 x 2304)
    #          = 2 x (5,810,415,206,400 + 13,872,660,480 + 102,699,565,056) = 11,853,974,863,872
    #   attention: 4 full layers over 9216 patches (9216^2 pairs each) and 28 window layers of
    #   8 x 8 = 64 patches (9216 x 64 pairs each), 4 x hidden FLOP per pair:
    #          (4 x 9216^2 + 28 x 9216 x 64) x 4 x 1280 = 356,253,696 x 5120 = 1,824,018,923,520
    w = image_work(load_model(QWEN_VL).vision, Images(size_px=1344))
    assert w.tokens == 2304
    assert w.linear_flop == 2 * (32 * QWEN_BLOCK * 9216 + QWEN_PATCH * 9216 + QWEN_MERGER * 2304)
    assert w.linear_flop == 11_853_974_863_872
    assert w.attention_flop == 1_824_018_923_520


def test_gemma3_siglip_is_417m_and_256_tokens_per_image() -> None:
    # SigLIP layer (hidden 1152, MLP 4304): 4 x (1152^2 + 1152) + 2 x 1152 x 4304 + 4304 + 1152
    # + 2 LayerNorms 4 x 1152 = 15,239,504; x 27 = 411,466,608. Patch Conv2d 3 x 14 x 14 x 1152 + 1152
    # = 678,528; position embedding (896 / 14)^2 x 1152 = 4,718,592; final LayerNorm 2,304
    # -> 416,866,032 (Gemma 3 report: 417M). Projector: RMSNorm 1152 + 1152 x 5376 = 6,194,304.
    enc = load_model("google/gemma-3-27b-it").vision
    assert enc.params - enc.adapter_params == 416_866_032
    assert enc.adapter_params == 6_194_304
    for size in (224, 896, (1080, 1920)):
        assert image_work(enc, Images(size_px=size)).tokens == 256  # resized to 896 x 896
    # FLOP: 2 x (27 x 15,239,504 x 4096 + 678,528 x 4096 + 6,194,304 x 256) = 3,379,464,437,760;
    # attention 27 x 4096^2 x 4 x 1152 = 2,087,354,105,856
    w = image_work(enc, Images())
    assert (w.linear_flop, w.attention_flop) == (3_379_464_437_760, 2_087_354_105_856)


def test_llama4_tiles() -> None:
    # 336-px tiles of 24 x 24 patches, pixel shuffle 0.5 -> 576 / 4 = 144 tokens per tile.
    enc = load_model("meta-llama/Llama-4-Scout-17B-16E-Instruct").vision
    assert image_grid(enc, 336, 336).tokens == 144  # one tile, no global tile
    # 672 x 1008 fits a 2 x 3 canvas at scale 1 (the smallest canvas with scale 1): 6 tiles + a
    # global tile = 7 x 144 = 1008 tokens.
    assert llama4_canvas_tiles(672, 1008) == (2, 3)
    assert image_grid(enc, 672, 1008).tokens == 1008
    # 2000 x 2000 cannot be kept at scale >= 1 within 16 tiles; the least downscaling is the
    # 4 x 4 canvas (scale 4 x 336 / 2000 = 0.672): 16 + 1 tiles = 2448 tokens.
    assert llama4_canvas_tiles(2000, 2000) == (4, 4)
    assert image_grid(enc, 2000, 2000).tokens == 17 * 144


def test_encoder_memory_split_by_tp_or_whole() -> None:
    # tp = 2, "weights" mode: blocks and merger split, patch projection whole:
    #   ((32 x 19,702,200 + 44,574,464) / 2 + 1,505,280) x 2 bytes = 678,055,424
    # "data" mode: the whole ViT on each GPU: 676,550,144 x 2 = 1,353,100,288
    hw = hardware(QWEN_VL, "H100-SXM-80GB", tp=2)
    split = hardware_memory(hw, Extras(Images(size_px=1344))).weights.vision_encoder
    whole = hardware_memory(hw, Extras(Images(size_px=1344, encoder_tp_mode="data"))).weights.vision_encoder
    assert split == ((32 * QWEN_BLOCK + QWEN_MERGER) / 2 + QWEN_PATCH) * 2 == 678_055_424
    assert whole == QWEN_VIT * 2 == 1_353_100_288
    assert hardware_memory(hw).weights.vision_encoder == 0.0  # text-only: encoder not loaded


def test_encoder_time_adds_to_the_prefill() -> None:
    # One request, static batch, ideal coefficients, tp = 1: the prefill step of 200 text tokens +
    # 2304 image tokens costs what a 2504-token text prefill costs, plus the encoder's roofline:
    #   compute (11,853,974,863,872 + 1,824,018,923,520) / 989.5e12 = 13.823 ms
    #   memory  (1,353,100,288 weights + 9216 x 32 x 10 x 1280 x 2 activations) / 3.35e12 = 2.66 ms
    # so it adds 13.823 ms.
    hw = hardware(QWEN_VL, "H100-SXM-80GB")
    img = static_batch(hw, IDEAL, Requests(200.0, 1.0, extras=Extras(Images(size_px=1344))), batch=1.0)
    text = static_batch(hw, IDEAL, Requests(2504.0, 1.0), batch=1.0)
    encoder_s = (11_853_974_863_872 + 1_824_018_923_520) / 989.5e12
    assert float(img.ttft_s - text.ttft_s) == pytest.approx(encoder_s, rel=1e-9)
    assert encoder_s == pytest.approx(13.823e-3, rel=1e-3)


def test_step_images_are_affine() -> None:
    # Encoder work is linear in the images of a step, so three images cost three times one.
    hw = hardware(QWEN_VL, "H100-SXM-80GB", tp=2)
    image = Images(size_px=672)

    def t(n: float) -> float:
        return float(
            step_time(
                hw, step_work(hw, decode_tokens=16, decode_context=1000, images=n, extras=Extras(image)), IDEAL
            ).total_s
        )

    assert t(3.0) - t(0.0) == pytest.approx(3 * (t(1.0) - t(0.0)), rel=1e-9)


def test_estimate_with_images_end_to_end() -> None:
    kw = dict(input_len=200, output_len=200, concurrency=16)
    text = estimate(QWEN_VL, "H100-SXM-80GB", **kw)
    img = estimate(QWEN_VL, "H100-SXM-80GB", images_per_request=1, image_size_px=1344, **kw)
    assert img.image_tokens_per_request == 2304
    # memory: the ViT (1,353,100,288 B) and the encoder cache, max(8192, 2304) x 3584 x 2 =
    # 58,720,256 B, come out of the KV budget (the encoder's profiling activations, 3 images x
    # 9216 x (4 x 1280 + 2 x 3420) x 2 = 661 MB, stay below the language model's 1.48 GB).
    assert text.memory.kv_budget - img.memory.kv_budget == 1_353_100_288 + 58_720_256
    # KV per request: 200 + 2304 + 200 = 2704 tokens (169 blocks of 16) x 57,344 B per token
    # (28 layers x 2 x 4 KV heads x 128 x 2 B)
    per_request = 2704 * 28 * 2 * 4 * 128 * 2
    assert img.limits["memory"] == np.floor(img.memory.kv_budget / per_request)
    assert img.ttft_s > text.ttft_s + 0.0138  # at least the encoder at full peak
    assert img.output_tokens_per_s < text.output_tokens_per_s


def test_bad_image_inputs_are_named() -> None:
    with pytest.raises(ValueError, match=r"images_per_request must be a number >= 0, got -1"):
        Workload(input_len=100, output_len=100, images_per_request=-1)
    with pytest.raises(ValueError, match="image_size_px must be a positive integer"):
        Images(size_px=0)
    with pytest.raises(ValueError, match="encoder_tp_mode must be one of weights, data"):
        Images(encoder_tp_mode="pipeline")
    with pytest.raises(ValueError, match="image_size_px is needed"):
        image_work(load_model(QWEN_VL).vision, Images())
    with pytest.raises(ValueError, match="has no vision encoder"):
        estimate("meta-llama/Llama-3.1-8B", "H100-SXM-80GB", input_len=100, output_len=100, images_per_request=1)


def test_pipeline_stages_do_not_shorten_the_encoder() -> None:
    """The encoder runs once per step on the first stage: eight images take the same seconds at
    pp = 1, 2 and 4 (dividing by pp twice, as before, halved them at each doubling)."""
    from gpucap.config import Images, hardware
    from gpucap.physics.coefficients import Coefficients
    from gpucap.physics.step import step_work
    from gpucap.physics.steptime import step_time

    coef = Coefficients.for_engine("vllm")
    seconds = []
    for pp in (1, 2, 4):
        hw = hardware("google/gemma-3-27b-it", "H100-SXM-80GB", pp=pp)

        def t(n: float, hw=hw) -> float:
            work = step_work(hw, decode_tokens=0.0, decode_context=0.0, images=n, extras=Extras(Images(per_request=1)))
            return float(step_time(hw, work, coef).total_s)

        seconds.append(t(8.0) - t(0.0))
    assert seconds[0] > 0 and seconds[1] == pytest.approx(seconds[0]) and seconds[2] == pytest.approx(seconds[0])
