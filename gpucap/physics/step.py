"""Work of one engine step (DESIGN.md section 4): FLOP, HBM bytes and link traffic per GPU; the
roofline that turns them into seconds with the efficiency coefficients is
``gpucap.physics.steptime``.

A step processes ``decode_tokens`` running sequences (one new token each, mean context
``decode_context``) plus ``prefill_tokens`` prompt tokens that carry ``prefill_pairs`` causal
attention (query, key) pairs per layer. All arguments may be numpy arrays (broadcast together).
With ``pp`` pipeline stages the batch runs as ``pp`` micro-batches: a token passes all stages, so
the step takes ``pp`` stage slots.

Two optional kinds of work ride along. ``images`` encoded in the step run the vision encoder
(``gpucap.physics.vision``) before the language model. With ``speculative`` decoding
(``gpucap.physics.speculative``) every decoding sequence verifies ``k + 1`` tokens and a drafter makes
``k`` passes over the batch. Both run as kernels of their own, so their time adds to the
language model's rooflines instead of hiding under them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gpucap.catalog.models import ModelSpec
from gpucap.config import Hardware, Images, Speculative
from gpucap.physics.attention import (  # prefill_pairs_per_layer re-exported: callers import it from here
    attended_tokens_per_layer,
    attention_flop_per_pair,
    prefill_pairs_per_layer,  # noqa: F401
    softmax_excess_flop,
)
from gpucap.physics.extras import NO_EXTRAS, Extras, serves_images
from gpucap.physics.memory import (
    ArrayLike,
    kv_bytes_per_token_per_gpu,
    mxfp4_expert_padding,
    state_bytes_per_request_per_gpu,
    weight_bytes_per_gpu,
)
from gpucap.physics.routing import ep_imbalance
from gpucap.physics.routing import experts_touched as routing_experts_touched
from gpucap.physics.speculative import draft_layout, draft_spec
from gpucap.physics.vision import encoder_weight_bytes_per_gpu, image_work
from gpucap.units import ACTIVATION_BYTES, COMPUTE_FORMAT, kv_bytes_per_element

Array = npt.NDArray[np.float64]

# Activation traffic per token per layer in units of hidden (residual read/write, norm, attention
# in/out, MLP in/out); small next to weights except in large prefill chunks.
ACTIVATION_HIDDEN_PASSES = 10


def matmul_format(hw: Hardware) -> str:
    """The tensor-core format the linear layers run in: the weights' (``COMPUTE_FORMAT``), except
    for MXFP4 experts, which the engines multiply by wider activations.

    TensorRT-LLM: MXFP8 activations on Blackwell (its ``TRTLLM`` and ``CUTLASS`` MoE backends,
    ``examples/models/core/gpt_oss/README.md``), so the fp8 peak there (the datasheet's fp4 rate
    is for fp4 on both operands), capped for the experts by the kernel's measured share of it
    (``_mixed_input_rate``); bf16 activations on Hopper (``TRITON``). vLLM 0.32 picks a bf16-activation
    backend first on every GPU (``_get_priority_backends_for_gpt_oss``: FlashInfer TRTLLM MXFP4 x BF16
    on Blackwell, Triton ``matmul_ogs`` on Hopper, Marlin on Ampere, W4A16 on ROCm); SGLang is taken
    to run them as vLLM does (not checked). So the bf16 rate, unless TensorRT-LLM runs on fp4
    tensor cores."""
    if hw.weight_dtype == "mxfp4":
        if hw.engine.engine == "trtllm" and not hw.gpu.is_amd and hw.gpu.flops_per_s.get("fp4"):
            return "fp8"
        return "bf16"
    return COMPUTE_FORMAT[hw.weight_dtype]


def _zeros() -> Array:
    return np.zeros(())


@dataclass(frozen=True)
class StepWork:
    """Work of one pipeline-stage slot on one GPU, before any efficiency is applied. The
    encoder and draft parts (zero unless images or speculative decoding are given) are separate
    kernels with rooflines of their own (``step_terms``); their link traffic is in ``link_*``."""

    linear_flop: Array  # matmuls against weights, at the weight format's tensor-core rate
    attention_flop: Array  # QK^T and AV (and the V3.2 indexer), at bf16 rate
    weight_bytes: Array  # weights read, plus activations
    kv_bytes: Array  # KV cache read and written by attention
    link_bytes_s: Array  # link transfer time at full per-direction bandwidth
    link_latency_s: Array  # sum of per-collective latencies (alpha)
    sequences: Array  # running sequences one scheduler handles (batch / attn_dp)
    mixed_input_flop: Array = field(default_factory=_zeros)  # of linear_flop: MXFP4 experts x wider activations
    bf16_weight_flop: Array = field(default_factory=_zeros)  # of linear_flop: weights kept 16-bit, at bf16 rate
    softmax_excess_flop: Array = field(default_factory=_zeros)  # bf16 FLOP the softmax's exponentials add
    encoder_flop: Array = field(default_factory=_zeros)  # vision encoder, bf16
    encoder_bytes: Array = field(default_factory=_zeros)  # encoder weights and activations
    draft_linear_flop: Array = field(default_factory=_zeros)  # drafter matmuls, weight format's rate
    draft_bf16_weight_flop: Array = field(default_factory=_zeros)  # of those: weights kept 16-bit
    draft_attention_flop: Array = field(default_factory=_zeros)
    draft_bytes: Array = field(default_factory=_zeros)  # drafter weights, KV and activations


@dataclass(frozen=True)
class StepTime:
    """Seconds of one engine step, by part. ``total_s`` is what a running sequence waits per token;
    ``device_s`` the GPU's share of it (the kernels and the link, without the host's
    ``overhead_s``): what vLLM's step log times (``gpucap.telemetry.steplog``)."""

    compute_s: Array
    memory_s: Array
    comm_s: Array
    overhead_s: Array
    total_s: Array
    device_s: Array

    @property
    def comm_share(self) -> Array:
        return self.comm_s / self.total_s


def experts_touched(spec: ModelSpec, tokens: ArrayLike) -> Array:
    """Expected fraction of a MoE layer's routed experts that a step of T tokens reads:
    ``1 - (1 - k / E)^T`` (each token picks k of E experts, taken as independent and uniform: an
    assumption), or with ``spec.routing_skew`` the Zipf-popularity form of
    ``gpucap.physics.routing.experts_touched``. One token reads k / E; a few hundred tokens read nearly all."""
    return routing_experts_touched(spec.num_experts, spec.experts_per_token, tokens, spec.routing_skew)


def step_work(
    hw: Hardware,
    *,
    decode_tokens: ArrayLike,
    decode_context: ArrayLike,
    prefill_tokens: ArrayLike = 0.0,
    prefill_pairs: ArrayLike = 0.0,
    images: ArrayLike = 0.0,
    extras: Extras = NO_EXTRAS,
    touched: ArrayLike | None = None,
) -> StepWork:
    """FLOP, bytes and link traffic of one stage slot on one GPU (one replica's batch).

    FLOP = 2 x dense params x tokens / tp + 2 x expert params x k x tokens / stage GPUs
    + 2 x hidden x vocab x sampled tokens / tp + attention pairs x FLOP per pair / tp.
    Bytes = dense weights + experts the batch routes to (``E (1 - (1 - k/E)^T)`` of E) + KV read
    for every attended key + KV written + activations. A hybrid's linear layers attend to no KV:
    they add their recurrence FLOP per token (``LinearMixer.flop_per_token``) and read and write
    each decoding sequence's state once per step (in ``kv_bytes``). Link: two ring all-reduces per layer
    under tp (``2 (tp-1)/tp x message``), two all-to-alls per MoE layer under ep, one
    point-to-point send per pipeline stage. Under ep the expert FLOP and the all-to-all messages
    are the busiest GPU's: ``ep_imbalance(ep)`` times the mean (``gpucap.physics.routing``).

    ``decode_tokens`` counts decoding sequences. With ``extras.speculative`` each verifies ``k + 1``
    tokens: tokens = ``(k + 1) x decode_tokens + prefill_tokens`` in the FLOP, sampled tokens,
    KV writes, activations and messages, while the KV cache is read once per sequence; the
    drafter's work is ``speculative_draft_work``. ``images`` (of size ``extras.images``) are encoded in
    the step: ``encoder_work``. All of it stays affine in decode tokens, prompt tokens, prefill
    pairs and images, which the closed-loop solver relies on (``gpucap.physics.steady``).
    The parts: ``_linear_parts``, ``_attention_flop``, ``_weight_bytes``, ``_kv_bytes``, ``_link_s``;
    of the linear FLOP, the experts' where their weights are MXFP4 against bf16 activations
    (``mixed_input_experts``); beside the attention FLOP, what the softmax's exponentials add
    (``gpucap.physics.attention.softmax_excess_flop``).

    The routed experts' bytes are the one part that is not affine: ``touched`` replaces their
    share read, ``experts_touched(T)``, by a given one (0 leaves the affine rest; the closed loop
    of a mixture-of-experts model adds the experts' share itself, ``gpucap.physics.solvers``).
    """
    speculative = extras.speculative
    slot = _slot_tokens(hw, decode_tokens, prefill_tokens, prefill_pairs, extras.tokens_per_sequence)
    attended = attended_tokens_per_layer(hw.spec, decode_context)
    link_s, lat_s = _link_s(hw, slot)
    zero = np.zeros_like(slot.tokens)
    dense, experts, lm_head = _linear_parts(hw, slot)
    work = StepWork(
        linear_flop=np.asarray(dense + experts + lm_head, dtype=float),
        mixed_input_flop=np.asarray(experts + zero if mixed_input_experts(hw) else zero, dtype=float),
        bf16_weight_flop=np.asarray(_bf16_weight_flop(hw, slot, lm_head) + zero, dtype=float),
        softmax_excess_flop=np.asarray(
            softmax_excess_flop(hw, slot.decode_tokens, slot.prompt_pairs, attended) + zero, dtype=float
        ),
        attention_flop=np.asarray(_attention_flop(hw, slot, attended, decode_context), dtype=float),
        weight_bytes=np.asarray(_weight_bytes(hw, slot, touched), dtype=float),
        kv_bytes=np.asarray(_kv_bytes(hw, slot, attended, decode_context), dtype=float),
        link_bytes_s=np.asarray(link_s, dtype=float),
        link_latency_s=np.asarray(lat_s + zero, dtype=float),
        sequences=np.asarray(slot.sequences * hw.layout.pp / hw.layout.attn_dp + zero, dtype=float),
    )
    image = extras.images or Images()
    if np.any(images) and serves_images(hw.spec, image):
        work = _add(work, encoder_work(hw, images=images, image=image))
    if speculative is not None:
        work = _add(
            work,
            speculative_draft_work(
                hw,
                speculative,
                decode_tokens=decode_tokens,
                decode_context=decode_context,
                prefill_tokens=prefill_tokens,
                prefill_pairs=prefill_pairs,
            ),
        )
    return work


@dataclass(frozen=True)
class SlotTokens:
    """The tokens of one pipeline-stage slot: one micro-batch, the step's tokens / pp."""

    sequences: Array  # decoding sequences, b = decode_tokens / pp
    decode_tokens: Array  # tokens they put through the model, v = (k + 1) b (b without speculation)
    prompt_pairs: Array  # prefill attention pairs per layer / pp
    tokens: Array  # T = v + p, with p = prefill_tokens / pp


def _slot_tokens(
    hw: Hardware,
    decode_tokens: ArrayLike,
    prefill_tokens: ArrayLike,
    prefill_pairs: ArrayLike,
    verify: int = 1,
) -> SlotTokens:
    """``step_work``'s tokens split over ``pp`` micro-batches, each decoding sequence verifying
    ``verify = k + 1`` tokens under speculative decoding: ``b = decode_tokens / pp``, ``v = (k + 1) b``,
    ``p = prefill_tokens / pp``, ``T = v + p``."""
    pp = hw.layout.pp
    b = np.asarray(decode_tokens, dtype=float) / pp  # decoding sequences of one micro-batch
    p = np.asarray(prefill_tokens, dtype=float) / pp
    pairs_prefill = np.asarray(prefill_pairs, dtype=float) / pp
    v = verify * b  # tokens the decoding sequences put through the model
    return SlotTokens(sequences=b, decode_tokens=v, prompt_pairs=pairs_prefill, tokens=v + p)


def _linear_parts(hw: Hardware, slot: SlotTokens) -> tuple[Array, Array, Array]:
    """Matmul FLOP against weights in one stage slot on one GPU, with T tokens, v of them sampled,
    in three parts (their sum is ``StepWork.linear_flop``):

    dense ``2 x dense params / pp x T / (tp x attn_dp)`` (attention, dense MLPs, shared experts,
    routers); experts ``2 x expert params x k x MoE layers / pp x T / stage GPUs x ep_imbalance(ep)
    x padding`` (the busiest GPU of the expert-parallel group sets the step,
    ``gpucap.physics.routing``; MXFP4 experts are multiplied at the padded sizes they are stored
    at, ``mxfp4_expert_padding``); lm_head ``2 x hidden x vocab x v / (tp x attn_dp)``."""
    spec, lay = hw.spec, hw.layout
    pp, group = lay.pp, lay.tp * lay.attn_dp
    tokens, v = slot.tokens, slot.decode_tokens
    moe_layers = spec.num_moe_layers / pp
    dense_flop = 2 * spec.dense_params / pp * tokens / group
    busiest = ep_imbalance(lay.ep, hw.engine.eplb)  # the busiest GPU of the expert-parallel group sets the step
    padding = mxfp4_expert_padding(spec, lay, hw.gpu, hw.engine.moe_backend) if hw.weight_dtype == "mxfp4" else 1.0
    expert_flop = (
        2 * spec.expert_params * spec.experts_per_token * moe_layers * tokens / lay.stage_gpus * busiest * padding
    )
    lm_head_flop = 2 * spec.hidden_size * spec.vocab_size * v / group
    return dense_flop, expert_flop, lm_head_flop


def _bf16_weight_flop(hw: Hardware, slot: SlotTokens, lm_head_flop: Array) -> Array:
    """Of the linear FLOP, the matmuls whose weights stay 16-bit whatever the checkpoint's format,
    run at the bf16 rate (``step_terms``): the lm_head (quantized checkpoints keep it in bf16,
    ``weight_bytes_per_gpu``), plus the attention projections where the checkpoint's
    quantization config leaves them unquantized (``ModelSpec.unquantized_modules``; gpt-oss lists
    ``self_attn`` in ``modules_to_not_convert``): ``2 x attention params / pp x T / (tp x
    attn_dp)``."""
    spec, lay = hw.spec, hw.layout
    flop = lm_head_flop
    if "attention" in spec.unquantized_modules:
        flop = flop + 2 * spec.attention_params / lay.pp * slot.tokens / (lay.tp * lay.attn_dp)
    return np.asarray(flop, dtype=float)


def mixed_input_experts(hw: Hardware) -> bool:
    """Whether the routed experts' matmuls take MXFP4 weights against wider activations, in the
    format ``matmul_format`` gives: bf16 (the kernel converts every weight to bf16 in registers
    before the tensor cores take it) or, TensorRT-LLM on Blackwell, MXFP8 (block-scaled fp8 x fp4
    on the tensor cores). Their rate is ``_mixed_input_rate``. Only a MoE's experts are MXFP4 in
    the checkpoints that use it (gpt-oss: attention and router in bf16)."""
    return hw.weight_dtype == "mxfp4" and hw.spec.is_moe


def mxfp4_expert_share(hw: Hardware) -> float:
    """The measured ceiling of ``hw``'s MXFP4 expert GEMMs as a share of the peak of the format
    they run in (``matmul_format``): the GPU's ``mxfp4_bf16_share`` for bf16 activations,
    ``mxfp4_fp8_share`` for MXFP8; 0 where none was measured (or the experts are not MXFP4)."""
    if not mixed_input_experts(hw):
        return 0.0
    return hw.gpu.mxfp4_bf16_share if matmul_format(hw) == "bf16" else hw.gpu.mxfp4_fp8_share


def _attention_flop(hw: Hardware, slot: SlotTokens, attended: Array, decode_context: ArrayLike) -> Array:
    """Token-mixing FLOP in one stage slot on one GPU (run at the bf16 rate):

    ``attention layers / pp / (tp x attn_dp) x (v x attended keys x F_decode + prefill pairs x
    F_prefill)`` (``attention_flop_per_pair``, ``attended_tokens_per_layer``); DeepSeek-V3.2's
    indexer adds ``2 x index heads x index dim x (v x context + prefill pairs)`` per attention
    layer (it scores every key of the full context, fp8); a hybrid's linear layers add their
    recurrence, ``LinearMixer.flop_per_token x linear layers / pp x T / (tp x attn_dp)``."""
    spec, lay = hw.spec, hw.layout
    pp, group = lay.pp, lay.tp * lay.attn_dp
    v, pairs_prefill = slot.decode_tokens, slot.prompt_pairs
    kv_layers = spec.num_kv_layers / pp  # attention layers (a hybrid's linear layers attend to no KV)
    attn_flop = (
        kv_layers
        / group
        * (
            v * attended * attention_flop_per_pair(spec, decode=True)
            + pairs_prefill * attention_flop_per_pair(spec, decode=False)
        )
    )
    if spec.index_n_heads:  # V3.2 indexer scores every key of the full context (fp8)
        ctx = np.asarray(decode_context, dtype=float)
        attn_flop = attn_flop + kv_layers / group * 2 * spec.index_n_heads * spec.index_head_dim * (
            v * ctx + pairs_prefill
        )
    if spec.linear is not None:  # linear layers: recurrence FLOP per token
        attn_flop = attn_flop + spec.linear.flop_per_token * spec.num_linear_layers / pp * slot.tokens / group
    return attn_flop


def _weight_bytes(hw: Hardware, slot: SlotTokens, touched: ArrayLike | None = None) -> Array:
    """HBM bytes of weights and activations in one stage slot on one GPU: ``attention + dense
    MLPs + lm_head + experts x experts_touched(T)`` of ``weight_bytes_per_gpu`` (lm_head: the
    embedding bytes, halved when untied on one stage; ``touched``, when given, in place of
    ``experts_touched(T)``) ``+ T / attn_dp x layers / pp x 10 x hidden x 2`` bytes of
    activations (``ACTIVATION_HIDDEN_PASSES``)."""
    spec, lay = hw.spec, hw.layout
    pp, tokens = lay.pp, slot.tokens
    w = weight_bytes_per_gpu(spec, hw.weight_dtype, lay, hw.gpu, hw.engine.moe_backend)
    lm_head_bytes = w.embeddings / (1 if spec.tie_embeddings or pp > 1 else 2)
    if touched is None:
        touched = experts_touched(spec, tokens) if spec.is_moe else np.zeros_like(tokens)
    weights = w.attention + w.dense_mlp + lm_head_bytes + w.experts * touched
    layers = spec.num_layers / pp
    act = tokens / lay.attn_dp * layers * ACTIVATION_HIDDEN_PASSES * spec.hidden_size * ACTIVATION_BYTES
    return weights + act


def _kv_bytes(hw: Hardware, slot: SlotTokens, attended: Array, decode_context: ArrayLike) -> Array:
    """HBM bytes of the KV cache in one stage slot on one GPU: read ``b / attn_dp x attended keys
    x KV bytes per token`` (DeepSeek-V3.2: the latent for the top-k keys, the indexer's keys for
    the whole context), written ``T / attn_dp x KV bytes per token``; a hybrid's linear layers
    read and write each decoding sequence's state once per step, ``2 b / attn_dp x state bytes``
    (one copy of it)."""
    spec, lay = hw.spec, hw.layout
    b, tokens = slot.sequences, slot.tokens
    kv_tok = kv_bytes_per_token_per_gpu(spec, hw.kv_dtype, lay)
    if spec.index_head_dim:  # main latent read for top-k keys, indexer keys for all
        kv_layers = spec.num_kv_layers / lay.pp
        idx_tok = kv_tok - spec.kv_elements_per_token_per_layer * kv_bytes_per_element(hw.kv_dtype) * kv_layers
        kv_read = b / lay.attn_dp * (attended * (kv_tok - idx_tok) + np.asarray(decode_context) * idx_tok)
    else:
        kv_read = b / lay.attn_dp * attended * kv_tok
    kv_write = tokens / lay.attn_dp * kv_tok
    if spec.linear is not None:  # each decoding sequence's state read and written once per step
        kv_write = kv_write + 2 * b / lay.attn_dp * state_bytes_per_request_per_gpu(spec, lay, copies=1)
    return kv_read + kv_write


def _link_s(hw: Hardware, slot: SlotTokens) -> tuple[Array, Array]:
    """Link transfer seconds at full per-direction bandwidth, and the collectives' latencies
    (alpha each), in one stage slot on one GPU. With a message of ``T / attn_dp x hidden x 2``
    bytes: under tp two ring all-reduces per layer (attention and dense MLP; one per MoE layer
    under ep), ``2 (tp - 1) / tp x message / link`` each; under ep two all-to-alls per MoE
    layer of ``message / tp x k x ep_imbalance(ep)`` bytes, ``(ep - 1) / ep`` of it sent; under
    pp one point-to-point send of the ``attn_dp`` groups' messages per stage."""
    spec, lay = hw.spec, hw.layout
    pp, tokens = lay.pp, slot.tokens
    layers = spec.num_layers / pp
    moe_layers = spec.num_moe_layers / pp
    busiest = ep_imbalance(lay.ep, hw.engine.eplb)  # the busiest GPU of the expert-parallel group sets the step
    link, alpha = hw.gpu.link_bytes_per_s, hw.gpu.link_latency_s
    group_tokens = tokens / lay.attn_dp
    msg = group_tokens * spec.hidden_size * ACTIVATION_BYTES
    zero = np.zeros_like(tokens)
    link_s, lat_s = zero.copy(), zero.copy()
    if lay.tp > 1:
        n_ar = 2 * layers if lay.ep == 1 else layers + (layers - moe_layers)  # attention + dense MLPs
        link_s = link_s + n_ar * 2 * (lay.tp - 1) / lay.tp * msg / link
        lat_s = lat_s + n_ar * alpha
    if lay.ep > 1:
        sent = group_tokens / lay.tp * spec.experts_per_token * spec.hidden_size * ACTIVATION_BYTES * busiest
        link_s = link_s + 2 * moe_layers * sent * (lay.ep - 1) / lay.ep / link
        lat_s = lat_s + 2 * moe_layers * alpha
    if pp > 1:
        link_s = link_s + msg * lay.attn_dp / link
        lat_s = lat_s + alpha
    return link_s, lat_s


def _add(a: StepWork, b: StepWork) -> StepWork:
    """Field-by-field sum of two works (broadcast)."""
    return StepWork(
        **{f: np.asarray(getattr(a, f) + getattr(b, f), dtype=float) for f in StepWork.__dataclass_fields__}
    )


def _only(zero: Array, **fields: Array) -> StepWork:
    """A work with the given fields and zeros elsewhere (shaped like ``zero``)."""
    base = {f: zero for f in StepWork.__dataclass_fields__}
    base.update({k: np.asarray(v + zero, dtype=float) for k, v in fields.items()})
    return StepWork(**base)


def encoder_work(hw: Hardware, *, images: ArrayLike, image: Images) -> StepWork:
    """Vision-encoder work of ``images`` images in one step, per GPU and stage slot.

    Per image (``gpucap.physics.vision.image_work``): FLOP ``F`` and encoder sequence ``S``. Each
    attention-data-parallel group encodes its own requests' images (``n = images / attn_dp``),
    on the first pipeline stage, once per step (so ``/ pp`` per stage slot):

    ``FLOP = n F / tp``; ``bytes = n x (encoder weights / tp + S x layers x 10 x hidden x 2)``;
    with ``--mm-encoder-tp-mode weights`` two all-reduces of ``S x hidden x 2`` bytes per encoder
    layer (``data`` mode: none, and each image on one GPU, ``1 / tp`` of them per GPU).
    Weights and collective latencies are charged per image: vLLM encodes a step's images in one
    call, so this overcounts when several images share a step (the encoder is compute-bound at
    hundreds of patches per image, so the error is small).
    """
    spec, lay = hw.spec, hw.layout
    enc = spec.vision
    if enc is None:
        raise ValueError(f"{spec.name} has no vision encoder")
    w = image_work(enc, image)
    n = np.asarray(images, dtype=float) / (lay.attn_dp * lay.pp)
    tp = lay.tp
    act = w.sequence * enc.num_layers * ACTIVATION_HIDDEN_PASSES * enc.hidden_size * ACTIVATION_BYTES
    zero = np.zeros_like(n)
    link_s, lat_s = zero, zero
    if image.encoder_tp_mode == "weights":
        per_image_bytes = encoder_weight_bytes_per_gpu(enc, tp, "weights") + act
        if tp > 1:
            collectives = 2 * enc.num_layers
            msg = w.sequence * enc.hidden_size * ACTIVATION_BYTES
            link_s = n * collectives * 2 * (tp - 1) / tp * msg / hw.gpu.link_bytes_per_s
            lat_s = n * collectives * hw.gpu.link_latency_s
    else:
        per_image_bytes = (encoder_weight_bytes_per_gpu(enc, tp, "data") + act) / tp
    return _only(
        zero,
        encoder_flop=n * w.flop / tp,
        encoder_bytes=n * per_image_bytes,
        link_bytes_s=link_s,
        link_latency_s=lat_s,
    )


def draft_hardware(hw: Hardware, sp: Speculative) -> Hardware:
    """The drafter on the target's GPUs, formats and engine (``gpucap.physics.speculative``)."""
    d = draft_spec(hw.spec, sp)
    return Hardware(
        spec=d,
        gpu=hw.gpu,
        layout=draft_layout(hw.layout, d),
        weight_dtype=hw.weight_dtype,
        kv_dtype=hw.kv_dtype,
        engine=hw.engine,
    )


def speculative_draft_work(
    hw: Hardware,
    sp: Speculative,
    *,
    decode_tokens: ArrayLike,
    decode_context: ArrayLike,
    prefill_tokens: ArrayLike = 0.0,
    prefill_pairs: ArrayLike = 0.0,
) -> StepWork:
    """The drafter's work in one step: ``k`` decode passes over the B decoding sequences, each
    a full decode step of the drafter (its weights, KV read and written, lm_head), plus one
    pass over the step's prompt tokens (the drafter's own prefill):

    ``draft = k x W_d(B decode) + [W_d(P prompt) - W_d(empty)]``

    with ``W_d`` = ``step_work`` of the drafter (EAGLE/MTP: one target-shaped layer plus the
    lm_head; or a separate draft model). Returned in the ``draft_*`` fields (and its link
    traffic in ``link_*``).
    """
    dhw = draft_hardware(hw, sp)
    one = step_work(dhw, decode_tokens=decode_tokens, decode_context=decode_context)
    pre = step_work(
        dhw,
        decode_tokens=0.0,
        decode_context=decode_context,
        prefill_tokens=prefill_tokens,
        prefill_pairs=prefill_pairs,
    )
    empty = step_work(dhw, decode_tokens=0.0, decode_context=decode_context)
    k = sp.draft_tokens

    def total(f: str) -> Array:
        return np.asarray(k * getattr(one, f) + getattr(pre, f) - getattr(empty, f), dtype=float)

    zero = np.zeros_like(total("linear_flop") + np.asarray(decode_tokens, dtype=float))
    return _only(
        zero,
        draft_linear_flop=total("linear_flop"),
        draft_bf16_weight_flop=total("bf16_weight_flop"),
        draft_attention_flop=total("attention_flop") + total("softmax_excess_flop"),
        draft_bytes=total("weight_bytes") + total("kv_bytes"),
        link_bytes_s=total("link_bytes_s"),
        link_latency_s=total("link_latency_s"),
    )
