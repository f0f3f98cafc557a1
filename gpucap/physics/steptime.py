"""Time of one engine step (DESIGN.md section 4): the roofline that turns a step's work
(``gpucap.physics.step.step_work``) into seconds with the efficiency coefficients, term by term
(``step_terms``) and combined (``combine``, ``step_time``)."""

from __future__ import annotations

import numpy as np

from gpucap.config import Hardware
from gpucap.physics.coefficients import EAGER_LAUNCH_S_PER_LAYER, Coefficients
from gpucap.physics.step import Array, StepTime, StepWork, matmul_format, mxfp4_expert_share

# Rows of the stacked step terms (``step_terms``): each is affine in the work, and ``combine``
# turns them into seconds. The batching solver uses them as lines in the arrivals per step.
GEMM_COMPUTE, GEMM_MEMORY, ATTN_COMPUTE, ATTN_MEMORY, COMM, OVERHEAD = range(6)


def step_terms(hw: Hardware, work: StepWork, coef: Coefficients) -> Array:
    """The six parts of a step, stacked on a new first axis (rows named above), each affine in
    the work: matmul compute ``linear FLOP / (peak_format x u_compute)`` (the MXFP4 x bf16
    experts' share at ``_mixed_input_rate`` instead), matmul memory ``weight bytes / (hbm x
    u_hbm)``, attention compute ``(attention FLOP + softmax excess) / (peak_bf16 x u_compute)``,
    attention memory ``KV bytes / (hbm x u_hbm)``, link ``(1 - overlap) x (alpha + link bytes /
    (link x u_link))`` (these per pipeline stage), and the host's scheduling time
    ``t_overhead`` (which an engine may run beside the GPU: ``combine``).

    Within a kernel the shorter roofline hides under the longer by the device's
    ``roofline_overlap`` rho (``gpucap.catalog.gpus``): ``max(c, m) + (1 - rho) min(c, m)``, the
    roofline's max on a GPU (rho = 1), their sum on one CPU core (rho = 0: vLLM's oneDNN GEMMs
    of a 20 M-parameter model at 16 rows took 8.9 ms against 4.7 ms for the weights' read and
    3.4 ms for the multiplies at peak, benchmarks/README.md). It is written as two lines whose max
    is that, ``c' = c + (1 - rho) m`` and ``m' = m + (1 - rho) c``, so that every step term stays
    affine in the work (the closed forms of ``gpucap.physics.steady`` rely on it); with rho < 1
    each of the two rows then carries part of the other's time.

    Kernels have a floor the rooflines miss: ``t_layer`` per layer per step (back-to-back kernels
    of a CUDA graph, plus ``50 us`` of kernel launches per layer when CUDA graphs are off), and
    the work per running sequence the step waits for, ``t_seq x sequences`` (scheduling, input
    preparation, each new token's bookkeeping; vLLM's measured, ``coefficients.py``). Both run
    with the step, so they are added to both matmul rows.

    The vision encoder and the drafter are kernels of their own, so their seconds are added to
    both matmul rows (``max(c + e, m + e) = max(c, m) + e``: they add to the step and neither
    roofline of the language model hides them):

    ``t_encoder = max(encoder FLOP / (peak_bf16 x u_compute), encoder bytes / (hbm x u_hbm))``
    (exact: both grow with the images); ``t_draft = draft linear FLOP / (peak_format x
    u_compute) + draft attention FLOP / (peak_bf16 x u_compute) + draft bytes / (hbm x u_hbm)``,
    the sum rather than the max of its rooflines so that it stays affine in the batch: an upper
    bound, close while the drafter is memory-bound (a one-layer head or a small model up to
    hundreds of sequences)."""
    gpu = hw.gpu
    bw = gpu.hbm_bytes_per_s * coef.u_hbm
    peak_format = gpu.peak_flops_per_s(matmul_format(hw)) * coef.u_compute
    peak_bf16 = gpu.peak_flops_per_s("bf16") * coef.u_compute
    extra: Array | float = 0.0
    if work.encoder_bytes.any() or work.draft_bytes.any():
        extra = np.maximum(work.encoder_flop / peak_bf16, work.encoder_bytes / bw) + (
            (work.draft_linear_flop - work.draft_bf16_weight_flop) / peak_format
            + work.draft_bf16_weight_flop / peak_bf16
            + work.draft_attention_flop / peak_bf16
            + work.draft_bytes / bw
        )
    pp = hw.layout.pp
    per_layer = coef.t_layer_s + (0.0 if hw.engine.cuda_graphs else EAGER_LAUNCH_S_PER_LAYER)
    floor = (per_layer * hw.spec.num_layers + coef.t_seq_s * work.sequences) / pp  # per stage slot
    extra = extra + floor
    mixed, wide = work.mixed_input_flop, work.bf16_weight_flop
    gemm_c = (work.linear_flop - mixed - wide) / peak_format + wide / peak_bf16 + mixed / _mixed_input_rate(hw, coef)
    attn_c = (work.attention_flop + work.softmax_excess_flop) / peak_bf16
    gemm_m, attn_m = work.weight_bytes / bw, work.kv_bytes / bw
    hidden = 1.0 - gpu.roofline_overlap
    if hidden > 0:  # max(c', m') = max(c, m) + (1 - rho) min(c, m)
        gemm_c, gemm_m = gemm_c + hidden * gemm_m, gemm_m + hidden * gemm_c
        attn_c, attn_m = attn_c + hidden * attn_m, attn_m + hidden * attn_c
    comm = (1.0 - coef.overlap) * (work.link_latency_s + work.link_bytes_s / coef.u_link)
    host = coef.t_overhead_s + 0.0 * work.sequences
    return np.stack(np.broadcast_arrays(gemm_c + extra, gemm_m + extra, attn_c, attn_m, comm, host))


def _mixed_input_rate(hw: Hardware, coef: Coefficients) -> float:
    """FLOP/s of the MXFP4 expert matmuls (``mixed_input_experts``): the peak of their format
    (``matmul_format``) x ``min(u_compute, share)``, with ``share`` the measured ceiling where the
    catalog has one (``mxfp4_expert_share``), so ``u_compute`` only counts below it:

    - bf16 activations, H100: a Marlin W4A16 MoE GEMM at 16,384-token prefill chunks ran at 25.7%
      of bf16 peak, issue-bound on its dequantizing instructions (sgl-project/sglang#38884);
    - MXFP8 activations, B200: TensorRT-LLM's trtllm-gen fused MoE for gpt-oss-120b's shape took
      0.125 ms more for 1024 tokens than for 512 on a B200 locked at 1500 MHz
      (flashinfer-ai/flashinfer#1475): 512 x 226.5 MFLOP in 0.125 ms is 928 TFLOP/s, 25.5% of the
      fp8 peak at that clock (4.5 PFLOP/s x 1500 / 1856 MHz). All experts are read at both sizes,
      so the difference is the multiplies' cost. The shape is that benchmark script's default;
      TensorRT-LLM's CUTLASS MoE backend, which its performance overview runs gpt-oss with, is
      taken to reach the same (no measurement of it was found)."""
    fmt = matmul_format(hw)
    share = mxfp4_expert_share(hw)
    return hw.gpu.peak_flops_per_s(fmt) * (min(coef.u_compute, share) if share else coef.u_compute)


def combine(hw: Hardware, terms: Array) -> StepTime:
    """Matmuls and attention are separate kernels that run one after the other, so each gets its
    own roofline (as in LLM-Viewer) and the two add; the host's per-step work adds to the GPU's,
    or runs beside it when the engine overlaps it (``EngineConfig.overlap_host``):

    ``t_gpu = pp x [max(gemm compute, gemm memory) + max(attn compute, attn memory) + link]``
    ``t_step = t_gpu + host``, or ``max(t_gpu, host)`` when overlapped."""
    pp = hw.layout.pp
    gemm_c, gemm_m, attn_c, attn_m, comm, host = terms
    gpu = pp * (np.maximum(gemm_c, gemm_m) + np.maximum(attn_c, attn_m) + comm)
    total = np.maximum(gpu, host) if hw.engine.overlap_host else gpu + host
    return StepTime(
        compute_s=pp * (gemm_c + attn_c),
        memory_s=pp * (gemm_m + attn_m),
        comm_s=pp * comm,
        overhead_s=host,
        total_s=total,
        device_s=gpu,
    )


def step_time(hw: Hardware, work: StepWork, coef: Coefficients) -> StepTime:
    """The one place efficiencies are applied (``step_terms``), combined by ``combine``:

    ``t_gemm = max(linear FLOP / (peak_format x u_compute), weight bytes / (hbm x u_hbm))``
    ``t_attn = max(attention FLOP / (peak_bf16 x u_compute), KV bytes / (hbm x u_hbm))``
    (each ``max(c, m) + (1 - rho) min(c, m)`` where the device hides less, ``step_terms``)
    ``t_step = pp x [t_gemm + t_attn + (1 - overlap) x (alpha + link bytes / (link x u_link))]
    + t_overhead``, with the floor ``t_layer x layers + t_seq x sequences`` inside ``t_gemm`` (the
    host's ``t_overhead`` in ``max`` instead of ``+`` where the engine overlaps it with the GPU)
    """
    return combine(hw, step_terms(hw, work, coef))
