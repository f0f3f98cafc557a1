"""Memory per GPU (DESIGN.md section 3): weights, KV cache per token, reservations, KV budget,
and the concurrency memory allows; with images, the vision encoder and its cache; with
speculative decoding, the drafter's weights and KV cache.

Functions accept numpy arrays for lengths, so one call sweeps many contexts.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from gpucap.catalog.gpus import GPU
from gpucap.catalog.hybrid import STATE_COPIES
from gpucap.catalog.models import ModelSpec
from gpucap.config import EngineConfig, Hardware, Layout, Speculative
from gpucap.physics.activations import activation_bytes_per_gpu, expert_width_per_gpu
from gpucap.physics.doesnotfit import does_not_fit
from gpucap.physics.extras import NO_EXTRAS, Extras, serves_images
from gpucap.physics.speculative import draft_layout, draft_spec, shares_output_head
from gpucap.physics.vision import (
    encoder_activation_bytes,
    encoder_cache_bytes,
    encoder_weight_bytes_per_gpu,
    image_work,
)
from gpucap.units import ACTIVATION_BYTES, kv_bytes_per_element, weight_bytes_per_param

ArrayLike = float | npt.NDArray[np.float64]

# vLLM and TensorRT-LLM keep the DeepSeek-V3.2 indexer's keys in fp8 with one fp32 scale per
# 128 values: 128 + 4 bytes per token per layer (vLLM ``DeepseekV32IndexerCache``).
INDEXER_SCALE_BYTES = 4.0
# Weights above this share of the usable memory leave a KV budget that the reservations' error
# can move by a large part: where published start-ups show gpucap furthest off (data/memory)
TIGHT_WEIGHT_SHARE = 0.7


@dataclass(frozen=True)
class WeightBytes:
    """Weight bytes one GPU holds, by part (``vision_encoder`` and ``draft`` only when images are
    served or speculative decoding is on)."""

    embeddings: float
    attention: float
    dense_mlp: float
    experts: float
    vision_encoder: float = 0.0
    draft: float = 0.0

    @property
    def total(self) -> float:
        return self.embeddings + self.attention + self.dense_mlp + self.experts + self.vision_encoder + self.draft


def _round_up(x: float, to: int) -> float:
    return float(math.ceil(x / to) * to)


def mxfp4_expert_padding(spec: ModelSpec, layout: Layout, gpu: GPU | None, moe_backend: str = "auto") -> float:
    """Factor by which vLLM's MXFP4 expert kernels pad the expert matrices: both are
    ``hidden x intermediate`` per GPU, stored at their padded sizes ``H' x I' / (H x I)``.

    vLLM 0.32 ``mxfp4_round_up_hidden_size_and_intermediate_size`` (``fused_moe/oracle/mxfp4.py``),
    by the backend: Marlin (``moe_backend="marlin"``; "auto" on GPUs without fp8, Ampere) and
    FlashInfer TRTLLM-gen ("flashinfer_trtllm"; "auto" on Blackwell, with fp4 cores): I to 128, H
    to 256; Triton ("triton"; "auto" on Hopper): I to 64; ROCm, whichever backend: both to 256.
    ``I`` is ``expert_width_per_gpu``. gpt-oss (H 2880, I 2880) on 4 A100s: 768 x 3072 / (720 x 2880) = 1.138; on one H100 with
    Marlin (vLLM 0.10.1 chose it there): 2944 x 3072 / 2880^2 = 1.090.
    """
    if gpu is None or not spec.is_moe:
        return 1.0
    h, i = float(spec.hidden_size), expert_width_per_gpu(spec, layout)
    if gpu.is_amd:
        to_i, to_h = 256, 256
    elif moe_backend in ("marlin", "flashinfer_trtllm"):
        to_i, to_h = 128, 256
    elif moe_backend == "triton":
        to_i, to_h = 64, 1
    elif not gpu.flops_per_s.get("fp8") or gpu.flops_per_s.get("fp4"):
        to_i, to_h = 128, 256
    else:
        to_i, to_h = 64, 1
    return _round_up(i, to_i) * _round_up(h, to_h) / (i * h)


def weight_bytes_per_gpu(
    spec: ModelSpec, weight_dtype: str, layout: Layout, gpu: GPU | None = None, moe_backend: str = "auto"
) -> WeightBytes:
    """Bytes of weights on the most loaded GPU.

    ``bytes = sum over tensors of params x bytes_per_param(format) / shards``. Attention and dense
    MLPs are split ``tp`` ways (K/V projections replicated when tp exceeds the KV heads),
    embeddings and lm_head are vocabulary-parallel over ``tp`` and stay 16-bit (quantized
    checkpoints keep them in bf16), routed experts are split over the ``tp x attn_dp`` GPUs of a
    stage, layers over ``pp`` (the first/last stage also holds the embedding/lm_head). MXFP4
    experts are stored padded to the tiles of the ``moe_backend`` kernel on ``gpu``
    (``mxfp4_expert_padding``).
    """
    padding = mxfp4_expert_padding(spec, layout, gpu, moe_backend) if weight_dtype == "mxfp4" else 1.0
    return _weight_bytes(spec, weight_dtype, layout, padding)


@lru_cache(maxsize=1024)
def _weight_bytes(spec: ModelSpec, weight_dtype: str, layout: Layout, expert_padding: float) -> WeightBytes:
    b = weight_bytes_per_param(weight_dtype)
    b_attn = ACTIVATION_BYTES if "attention" in spec.unquantized_modules else b
    layer_share = 1.0 / layout.pp
    attn = spec.attention_params / layout.tp
    if not spec.is_mla:  # K/V projections replicated where tp exceeds the KV heads
        extra_heads = layout.kv_heads_per_gpu(spec) - spec.num_kv_heads / layout.tp
        attn += 2 * spec.hidden_size * spec.head_dim * extra_heads * spec.num_kv_layers
    dense = (
        spec.dense_mlp_params * spec.num_dense_layers
        + (spec.shared_expert_params + spec.router_params) * spec.num_moe_layers
    ) / layout.tp
    experts = spec.routed_expert_params / layout.stage_gpus * expert_padding
    embed_params = spec.vocab_size * spec.hidden_size
    embed = embed_params * (1 if spec.tie_embeddings or layout.pp > 1 else 2) / layout.tp
    return WeightBytes(
        embeddings=embed * ACTIVATION_BYTES,
        attention=(attn * b_attn + spec.norm_params * ACTIVATION_BYTES) * layer_share,
        dense_mlp=dense * b * layer_share,
        experts=experts * b * layer_share,
    )


def kv_bytes_per_token(spec: ModelSpec, kv_dtype: str = "auto") -> float:
    """KV-cache bytes of one token over all attention layers, unsharded, inside every window.

    GQA/MQA: ``layers x 2 x num_kv_heads x head_dim x kv_bytes`` (Llama-3-70B bf16:
    80 x 2 x 8 x 128 x 2 = 327,680). MLA: ``layers x (kv_lora_rank + qk_rope_head_dim) x
    kv_bytes`` (DeepSeek-V3: 61 x 576 x 2 = 70,272), plus the V3.2 indexer keys. A hybrid's
    linear layers keep no KV: only its ``num_kv_layers`` count (Qwen3-Next: 12 x 2 x 2 x 256 x 2
    = 24,576).
    """
    per_layer = spec.kv_elements_per_token_per_layer * kv_bytes_per_element(kv_dtype)
    if spec.index_head_dim:
        per_layer += spec.index_head_dim + INDEXER_SCALE_BYTES
    return float(per_layer * spec.num_kv_layers)


def kv_bytes_per_token_per_gpu(spec: ModelSpec, kv_dtype: str, layout: Layout) -> float:
    """KV bytes one token costs on one GPU: the GPU's KV heads (``max(1, kv_heads / tp)``;
    MLA's latent is replicated on every TP rank) over the ``layers / pp`` layers it holds."""
    per_gpu = kv_bytes_per_token(spec, kv_dtype)
    if not spec.is_mla:
        per_gpu *= layout.kv_heads_per_gpu(spec) / spec.num_kv_heads
    return per_gpu / layout.pp


def held_tokens_per_layer(spec: ModelSpec, context_tokens: ArrayLike, block_size: int = 1) -> ArrayLike:
    """Tokens a request of ``context_tokens`` holds, summed over attention layers, in units of
    layers.

    A full-attention layer holds the whole context; a sliding-window or chunked layer holds
    ``min(context, window)``; a hybrid's linear layer none. Each layer's tokens round up to whole
    paged blocks. Divided by the attention-layer count (``num_kv_layers``), so that
    ``result x kv_bytes_per_token`` is the request's KV bytes.
    """
    ctx = np.asarray(context_tokens, dtype=float)
    total = np.zeros_like(ctx)
    for window, count in window_counts(spec).items():
        held = ctx if window is None else np.minimum(ctx, window)
        total = total + count * np.ceil(held / block_size) * block_size
    return total / max(spec.num_kv_layers, 1)


def charged_held_tokens_per_layer(
    spec: ModelSpec, context_tokens: ArrayLike, block_size: int = 1, engine: str = ""
) -> ArrayLike:
    """What a request takes from the KV budget, in the units of ``held_tokens_per_layer`` (which
    it is, except under TensorRT-LLM).

    TensorRT-LLM splits the KV memory into equal shares, one per window size, whatever the
    windows (``calculateMaxNumBlocks`` in ``cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp``:
    "we are first allocating identical number of blocks for all layers";
    ``TRTLLM_WINDOW_SIZE_SHARES`` overrides it, and is in 1.2.1's source; earlier versions split in
    proportion to window x layers, as gpucap charges every other engine), so the window group
    that fills its share first sets the requests held: ``max over groups g of G x n_g x held_g /
    N`` with ``G`` window sizes, ``n_g`` layers of size ``g``, ``N`` attention layers. gpt-oss (18
    layers of 128 tokens, 18 full) is charged its whole context on every layer. Llama 4's chunks are not window sizes of the KV
    manager (its chunked attention is a mask on context requests,
    ``docs/source/features/long-sequence.md``), and what it keeps of them is not documented, so
    they keep the charge every engine gets."""
    if engine != "trtllm" or spec.family in ("llama4", "llama4_text"):
        return held_tokens_per_layer(spec, context_tokens, block_size)
    ctx = np.asarray(context_tokens, dtype=float)
    groups = {window: count for window, count in window_counts(spec).items() if window != 0}  # 0: no KV
    worst = np.zeros_like(ctx)
    for window, count in groups.items():
        held = ctx if window is None else np.minimum(ctx, window)
        worst = np.maximum(worst, len(groups) * count * np.ceil(held / block_size) * block_size)
    return worst / max(spec.num_kv_layers, 1)


@lru_cache(maxsize=256)
def window_counts(spec: ModelSpec) -> dict[int | None, int]:
    counts: dict[int | None, int] = {}
    for w in spec.layer_window:
        counts[w] = counts.get(w, 0) + 1
    return counts


def state_bytes_per_request_per_gpu(spec: ModelSpec, layout: Layout, copies: int = STATE_COPIES) -> float:
    """A hybrid model's per-request state on one GPU, all its linear layers:
    ``copies x (conv elements x 2 + recurrent elements x state bytes) x linear layers / (tp x pp)``.

    The convolution state is kept in the model's 16-bit dtype, the recurrent state in 16 bits too
    (vLLM's ``mamba_ssm_cache_dtype`` "auto") except where vLLM keeps it in fp32 (Nemotron-H:
    ``LinearMixer.state_bytes_per_element``); split over tp with the heads, and held twice per
    request (``gpucap.catalog.hybrid.STATE_COPIES``; ``copies=1``: the one a step reads or a transfer moves). Qwen3-Next at tp 1: 2 x (24,576 + 524,288) x 2 x 36
    = 79,036,416 bytes, as much as ~3,200 tokens of its KV cache. 0 for other models.
    """
    if spec.linear is None:
        return 0.0
    lin = spec.linear
    per_layer = lin.conv_elements * ACTIVATION_BYTES + lin.state_elements * lin.state_bytes_per_element
    return copies * per_layer * spec.num_linear_layers / (layout.tp * layout.pp)


def draft_weight_bytes_per_gpu(spec: ModelSpec, sp: Speculative, weight_dtype: str, layout: Layout) -> float:
    """Weights the drafter adds to one GPU: a head's layers (its embedding and lm_head are the
    target's, unless it has a draft vocabulary: then its own ``draft_vocab x hidden`` lm_head,
    16-bit); a separate draft model's whole weights, split like the target."""
    d = draft_spec(spec, sp)
    w = weight_bytes_per_gpu(d, weight_dtype, draft_layout(layout, d))
    if sp.draft_model is not None:
        return w.total
    own_head = 0.0 if shares_output_head(sp) else d.vocab_size * d.hidden_size / layout.tp * ACTIVATION_BYTES
    return w.attention + w.dense_mlp + w.experts + own_head


def draft_kv_bytes_per_token_per_gpu(spec: ModelSpec, sp: Speculative, kv_dtype: str, layout: Layout) -> float:
    """KV bytes the drafter stores per token on one GPU, in the same paged pool as the target's
    (vLLM allocates the draft layers' KV next to the target's)."""
    d = draft_spec(spec, sp)
    return kv_bytes_per_token_per_gpu(d, kv_dtype, draft_layout(layout, d))


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes of one GPU: what is usable, what the weights and reservations take, and the KV
    budget that is left. A negative ``kv_budget`` means the model does not fit. The KV bytes per
    token include a drafter's KV when speculative decoding is on; ``encoder_cache`` holds vision
    encoder outputs waiting for their prefill."""

    total: float
    usable: float
    weights: WeightBytes
    activations: float
    cuda_graphs: float
    runtime_overhead: float  # non-torch memory charged: the engine's runtime, and NCCL's buffers across GPUs
    kv_budget: float
    kv_bytes_per_token: float  # one token, all layers, unsharded
    kv_bytes_per_token_per_gpu: float
    encoder_cache: float = 0.0
    state_bytes_per_request: float = 0.0  # a hybrid's linear-layer state, per request per GPU
    kv_budget_given: bool = False  # the budget was given (vLLM --kv-cache-memory), not worked out

    @property
    def fits(self) -> bool:
        return self.kv_budget > 0

    @property
    def tight(self) -> bool:
        """The weights take over ``TIGHT_WEIGHT_SHARE`` of what the engine may use, so the
        reservations' error (activations, CUDA graphs, non-torch memory: each a fraction of a GiB
        to ~2 GiB, ``data/memory/README.md``) is a large share of the KV budget."""
        return self.weights.total > TIGHT_WEIGHT_SHARE * self.usable

    @property
    def reserved(self) -> float:
        return self.activations + self.cuda_graphs + self.runtime_overhead + self.encoder_cache

    @property
    def kv_tokens_per_gpu(self) -> float:
        """Tokens of context the KV budget holds; infinite for a model with no attention layer
        that keeps a KV cache (all linear or state-space: memory binds on the state alone)."""
        if self.kv_bytes_per_token_per_gpu <= 0.0:
            return math.inf if self.kv_budget > 0 else 0.0
        return max(self.kv_budget, 0.0) / self.kv_bytes_per_token_per_gpu


def memory_breakdown(
    spec: ModelSpec,
    gpu: GPU,
    layout: Layout,
    *,
    weight_dtype: str,
    kv_dtype: str,
    engine: EngineConfig,
    extras: Extras = NO_EXTRAS,
) -> MemoryBreakdown:
    """Per-GPU memory: ``kv_budget = usable - weights - activations - cuda_graphs - overhead
    - encoder cache``.

    ``usable = gpu_memory_utilization x total`` for vLLM/SGLang; TensorRT-LLM gives the KV cache
    ``free_gpu_memory_fraction x (total - weights - reservations)``. With
    ``engine.kv_cache_memory_bytes`` (vLLM ``--kv-cache-memory``, or the "Available KV cache memory"
    a start-up logged) the budget is that, and the utilization is not used, as in vLLM. Where a
    replica spans GPUs, ``engine.nccl_bytes`` joins the runtime overhead.

    With ``extras.images`` the vision encoder's weights (``gpucap.physics.vision.encoder_weight_bytes_per_gpu``)
    and the encoder cache are added, and the activation reservation is the larger of the
    language model's and the encoder's profiling run. Without images the server is taken to run
    text-only (vLLM: ``--limit-mm-per-prompt`` 0 for every modality, which skips loading the
    encoder, vLLM PR #22299), so nothing is added. With ``extras.speculative`` the drafter's weights
    and KV per token are added.
    """
    engine = engine.resolve(gpu)
    util = float(engine.gpu_memory_utilization or 0.9)
    weights = weight_bytes_per_gpu(spec, weight_dtype, layout, gpu, engine.moe_backend)
    act = activation_bytes_per_gpu(spec, layout, engine)
    kv_tok, kv_tok_gpu = kv_bytes_per_token(spec, kv_dtype), kv_bytes_per_token_per_gpu(spec, kv_dtype, layout)
    cache = 0.0
    images, speculative = extras.images, extras.speculative
    if serves_images(spec, images):
        assert images is not None and spec.vision is not None
        enc, work = spec.vision, image_work(spec.vision, images)
        tokens_budget = int(engine.max_num_batched_tokens or 0)
        cache = encoder_cache_bytes(enc, work.tokens, tokens_budget)
        in_budget = max(1, tokens_budget // max(work.tokens, 1))  # images the profiling run encodes
        act = max(act, encoder_activation_bytes(enc, work, images=in_budget, tp=layout.tp))
        weights = dataclasses.replace(
            weights, vision_encoder=encoder_weight_bytes_per_gpu(enc, layout.tp, images.encoder_tp_mode)
        )
    if speculative is not None:
        weights = dataclasses.replace(
            weights, draft=draft_weight_bytes_per_gpu(spec, speculative, weight_dtype, layout)
        )
        d = draft_spec(spec, speculative)
        kv_tok += kv_bytes_per_token(d, kv_dtype)
        kv_tok_gpu += draft_kv_bytes_per_token_per_gpu(spec, speculative, kv_dtype, layout)
    graphs = engine.cuda_graph_bytes if engine.cuda_graphs else 0.0
    overhead = float(engine.runtime_overhead_bytes or 0.0)
    if layout.gpus_per_replica > 1:
        overhead += float(engine.nccl_bytes or 0.0)
    reserved = weights.total + act + graphs + overhead + cache
    if engine.kv_cache_memory_bytes is not None:
        budget = float(engine.kv_cache_memory_bytes)
        usable = reserved + budget
    elif engine.memory_basis == "free":
        usable = gpu.memory_bytes
        free = gpu.memory_bytes - reserved
        budget = util * free if free > 0 else free
    else:
        usable = util * gpu.memory_bytes
        budget = usable - reserved
    return MemoryBreakdown(
        total=gpu.memory_bytes,
        usable=usable,
        weights=weights,
        activations=act,
        cuda_graphs=graphs,
        runtime_overhead=overhead,
        kv_budget=budget,
        kv_bytes_per_token=kv_tok,
        kv_bytes_per_token_per_gpu=kv_tok_gpu,
        encoder_cache=cache,
        state_bytes_per_request=state_bytes_per_request_per_gpu(spec, layout),
        kv_budget_given=engine.kv_cache_memory_bytes is not None,
    )


def charged_tokens_per_layer(
    spec: ModelSpec, layout: Layout, kv_dtype: str, context_tokens: ArrayLike, engine: str = ""
) -> ArrayLike:
    """``charged_held_tokens_per_layer`` (the engine's charge for the windows) plus a hybrid's
    state per request in tokens of KV it displaces (``state bytes / kv bytes per token per GPU``):
    what one request takes from the KV budget, in the units of ``kv_bytes_per_token``."""
    held = charged_held_tokens_per_layer(spec, context_tokens, engine=engine)
    state = state_bytes_per_request_per_gpu(spec, layout)
    if not state:
        return held
    return held + state / kv_bytes_per_token_per_gpu(spec, kv_dtype, layout)


def concurrency_by_memory(
    mem: MemoryBreakdown,
    spec: ModelSpec,
    layout: Layout,
    context_tokens: ArrayLike,
    block_size: int = 1,
    engine: str = "",
) -> ArrayLike:
    """Requests one replica can hold: ``attn_dp x kv_budget / (held tokens x kv bytes/token/GPU
    + state bytes)`` (the state: a hybrid's linear layers, ``state_bytes_per_request_per_gpu``;
    the held tokens as ``engine`` charges them, ``charged_held_tokens_per_layer``).

    ``context_tokens`` is the length each request is charged: the maximum (input + output, safe)
    or the average over its life (input + output / 2); the caller chooses and says which.
    """
    per_request = request_bytes_per_gpu(mem, spec, context_tokens, block_size, engine)
    return np.floor(layout.attn_dp * max(mem.kv_budget, 0.0) / per_request)


def request_bytes_per_gpu(
    mem: MemoryBreakdown, spec: ModelSpec, context_tokens: ArrayLike, block_size: int = 1, engine: str = ""
) -> ArrayLike:
    """What one request of ``context_tokens`` takes from each GPU's KV budget: ``held tokens x kv
    bytes/token/GPU + state bytes`` (the held tokens as ``engine`` charges them,
    ``charged_held_tokens_per_layer``); ``concurrency_by_memory`` divides the budget by it."""
    held = charged_held_tokens_per_layer(spec, context_tokens, block_size, engine)
    return held * mem.kv_bytes_per_token_per_gpu + mem.state_bytes_per_request


def short_of_one_request_bytes(
    mem: MemoryBreakdown, spec: ModelSpec, layout: Layout, context_tokens: float, block_size: int = 1, engine: str = ""
) -> float:
    """Bytes per GPU the KV budget lacks to hold one request of ``context_tokens``: ``per request
    / attn_dp - kv_budget`` (``concurrency_by_memory`` is below 1 exactly when this is positive),
    0 when one fits."""
    per_request = float(request_bytes_per_gpu(mem, spec, context_tokens, block_size, engine))
    return max(per_request / layout.attn_dp - mem.kv_budget, 0.0)


def hardware_memory(hw: Hardware, extras: Extras = NO_EXTRAS) -> MemoryBreakdown:
    """``gpucap.physics.memory.memory_breakdown`` of resolved hardware; does not raise when it does not fit
    (a negative ``kv_budget`` says by how much)."""
    return memory_breakdown(
        hw.spec,
        hw.gpu,
        hw.layout,
        weight_dtype=hw.weight_dtype,
        kv_dtype=hw.kv_dtype,
        engine=hw.engine,
        extras=extras,
    )


def memory_limit(
    hw: Hardware,
    context_tokens: float,
    *,
    extras: Extras = NO_EXTRAS,
    shared_tokens: float = 0.0,
    shared_by: float = 1.0,
) -> tuple[MemoryBreakdown, float]:
    """Per-GPU breakdown and the requests one replica's KV cache holds at ``context_tokens``
    (image tokens included); raises ``DoesNotFit`` when the weights leave no room.

    ``shared_tokens`` of a prefix that ``shared_by`` of the requests carry (a system prompt in
    the prefix cache) hold their KV once: the budget loses one copy, and each request is charged
    ``context - shared_by x shared_tokens``."""
    mem = hardware_memory(hw, extras)
    if not mem.fits:
        raise does_not_fit(mem, hw.spec, hw.gpu, hw.layout, hw.weight_dtype)
    block = int(hw.engine.block_size or 1)
    counted = mem
    if shared_tokens:
        engine = hw.engine.engine
        one_copy = charged_held_tokens_per_layer(hw.spec, shared_tokens, block, engine)
        counted = dataclasses.replace(mem, kv_budget=mem.kv_budget - float(one_copy) * mem.kv_bytes_per_token_per_gpu)
    charged = context_tokens - shared_by * shared_tokens
    limit = float(concurrency_by_memory(counted, hw.spec, hw.layout, charged, block, hw.engine.engine))
    return mem, limit


def batch_slots(hw: Hardware, kv_slots: float | None = None, *, context_tokens: float | None = None) -> float:
    """Requests one replica runs at once: the smaller of the engine's ``max_num_seqs`` and the
    requests its KV cache holds (``kv_slots``, or found by ``memory_limit`` at ``context_tokens``)."""
    if kv_slots is None:
        if context_tokens is None:
            raise ValueError("give kv_slots or context_tokens")
        _, kv_slots = memory_limit(hw, context_tokens)
    return float(min(float(hw.engine.max_num_seqs or np.inf), kv_slots))
