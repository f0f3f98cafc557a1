"""What an estimate assumed that its reader should know, in words: the checkpoint's format, a
kernel limit that applies, an engine's KV charge, a tp beyond one link domain, the images', the
prefix cache's and the drafter's share (``gpucap.estimate``)."""

from __future__ import annotations

from gpucap.config import Deployment, Hardware, Workload
from gpucap.physics.attention import softmax_slowdown
from gpucap.physics.extras import Extras
from gpucap.physics.memory import MemoryBreakdown, charged_held_tokens_per_layer, held_tokens_per_layer
from gpucap.physics.step import matmul_format, mxfp4_expert_share
from gpucap.units import GiB


def estimate_notes(
    hw: Hardware, wl: Workload, deployment: Deployment, mem: MemoryBreakdown, extras: Extras, image_tokens: float,
    why: str,
) -> list[str]:  # fmt: skip
    """What the answer assumed that the user should know: the checkpoint's format, why not even
    one request meets the SLOs (``why``), a kernel limit that applies (the MXFP4 experts'
    measured ceiling, the softmax's exponentials: ``gpucap.physics.attention``, ``gpucap.physics.step``), an engine charging
    windowed layers more KV than they hold (``charged_held_tokens_per_layer``), a tp beyond one link
    domain, the images' and the prefix cache's share, the drafter."""
    notes = []
    images, speculative = extras.images, extras.speculative
    if deployment.weight_dtype is None and hw.weight_dtype != "bf16":
        notes.append(
            f"weights in the checkpoint's own format, {hw.weight_dtype} (its quantization_config); "
            "give a weight format to estimate another"
        )
    if why:
        notes.append(why)
    share = mxfp4_expert_share(hw)
    if share:
        bf16 = matmul_format(hw) == "bf16"
        notes.append(
            f"the MXFP4 experts are multiplied by {'bf16' if bf16 else 'MXFP8'} activations: on {hw.gpu.key} such a "
            f"MoE GEMM runs at no more than {share:.1%} of {'bf16' if bf16 else 'fp8'} peak (measured; the GPU "
            f"catalog's {'mxfp4_bf16_peak_share' if bf16 else 'mxfp4_mxfp8_peak_share'})"
        )
    context = wl.input_len + wl.output_len
    held = float(held_tokens_per_layer(hw.spec, context))
    charged = float(charged_held_tokens_per_layer(hw.spec, context, engine=hw.engine.engine))
    if charged > 1.01 * held:
        notes.append(
            "TensorRT-LLM gives each attention window size an equal share of the KV memory, so a "
            f"{context:.0f}-token request takes {charged / held:.2f}x the KV its windowed layers hold "
            "(its default; TRTLLM_WINDOW_SIZE_SHARES changes it)"
        )
    slowdown = softmax_slowdown(hw)
    if slowdown > 1.0 + 1e-3:
        notes.append(
            f"prompt attention is bound by the softmax's exponentials on {hw.gpu.key}: heads of {hw.spec.head_dim} "
            f"do fewer tensor FLOP per (query, key) pair than the GPU does per exponential, so attention compute "
            f"takes {slowdown:.2f}x its tensor-core time"
        )
    domain = hw.gpu.max_tp_on_link
    if hw.layout.tp > domain:
        notes.append(
            f"tp={hw.layout.tp} spans more than the {domain} GPUs one {hw.gpu.link_kind} domain of {hw.gpu.key} "
            f"joins: gpucap models every all-reduce at {hw.gpu.link_kind} speed, but across servers it runs over "
            "the network (InfiniBand/RoCE, several times slower), so TPOT and throughput here are optimistic; "
            f"keep tp <= {domain} and add pipeline stages (pp) or replicas instead"
        )
    if images is not None:
        notes.append(
            f"{images.per_request:g} image(s) per request add {image_tokens:.0f} prompt tokens; the vision encoder "
            f"holds {mem.weights.vision_encoder / GiB:.2f} GiB per GPU and its cache {mem.encoder_cache / GiB:.2f} GiB"
        )
    if wl.cached_tokens:
        notes.append(
            f"prefix cache: {wl.cached_tokens:,.0f} of each {wl.prompt_len:,.0f}-token prompt (mean) are cached and skip "
            f"the prefill; the {wl.shared_tokens:,.0f}-token system prompt's KV is held once; the saturation figure "
            "(all requests at once) does not count the cache"
        )
    if speculative is not None:
        notes.append(
            f"speculative decoding: {speculative.draft_tokens} draft tokens, {speculative.acceptance_length:g} kept per "
            f"step; the drafter holds {mem.weights.draft / GiB:.2f} GiB per GPU"
        )
    return notes
