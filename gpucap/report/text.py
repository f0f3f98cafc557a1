"""Turn an Estimate or a Plan into text (memory breakdown, constraint bars, recommendation; plans table) and JSON."""

from __future__ import annotations

import dataclasses
import math
import textwrap
from typing import TYPE_CHECKING, Any

from gpucap.calibration.ranges import range_note
from gpucap.physics.memory import MemoryBreakdown
from gpucap.physics.step import experts_touched
from gpucap.types import RESOURCES
from gpucap.units import GiB

if TYPE_CHECKING:
    from gpucap.estimate import Estimate

# The bottlenecks (gpucap.types.BOTTLENECKS) as the page and figures say them to people.
PLAIN_NAMES = {
    "memory": "memory (KV cache)", "compute": "compute", "hbm_bandwidth": "HBM bandwidth",
    "interconnect": "interconnect", "host": "host (HTTP server, scheduler)",
    "max_num_seqs": "engine batch limit (max_num_seqs)", "step_overhead": "time per step outside the GPU",
    "ttft_slo": "TTFT SLO (missed by one request alone)", "tpot_slo": "TPOT SLO (missed by one request alone)",
}  # fmt: skip
# ... and as bar labels, where space is short: the resources in plain words
BAR_NAMES: dict[str, str] = {
    **{name: "HBM bandwidth" if name == "hbm_bandwidth" else name for name in RESOURCES},
    "max_num_seqs": "batch slots",
    "step_overhead": "host per step",
}
BAR_WIDTH = 40
RANGE_NAMES = {
    "ttft_s": "TTFT",
    "tpot_s": "TPOT",
    "output_tokens_per_s": "tokens/s",
    "saturation_output_tokens_per_s": "saturation",
}


def text_bars(values: dict[str, float | None], highlight: str = "", width: int = BAR_WIDTH) -> str:
    """Horizontal bars on a linear scale (length proportional to the value, the longest ``width``
    characters), the value printed beside each; None means 'not binding'."""
    finite = [v for v in values.values() if v is not None and v > 0]
    top = max(finite) if finite else 1.0
    lines = []
    for name, v in values.items():
        label = BAR_NAMES.get(name, name)
        if v is None:
            lines.append(f"  {label:<14} {'':<{width}}  not binding")
            continue
        n = 0 if v <= 0 else max(1, round(width * v / top))
        mark = "  <- binds first" if name == highlight else ""
        lines.append(f"  {label:<14} {'#' * n:<{width}}  {v:>9,.0f}{mark}")
    return "\n".join(lines)


def memory_note(m: MemoryBreakdown, give: str = "the server's start-up log (--startup-log)") -> str:
    """Where the KV budget comes from, when it was given or when it is tight (``give``: how the
    reader passes the server's own figure); empty otherwise."""
    if m.kv_budget_given:
        return "KV budget as given (the server's own figure)"
    if m.tight and m.fits:
        return (
            f"tight: the weights take {m.weights.total / m.usable:.0%} of the usable memory, so the estimated "
            f"reservations move the KV budget by a large share; {give} gives it exactly"
        )
    return ""


def format_estimate(e: Estimate) -> str:
    hw, wl, m = e.hw, e.workload, e.memory
    lay = hw.layout
    w = m.weights
    head = (
        f"{hw.spec.name} on {e.replicas * lay.gpus_per_replica} x {hw.gpu.key} "
        f"(tp={lay.tp} pp={lay.pp} ep={lay.ep} attn_dp={lay.attn_dp}, {e.replicas} replica(s)), "
        f"weights {hw.weight_dtype}, KV {hw.kv_dtype}, {hw.engine.engine}\n"
        f"workload: {wl.input_len:g} in / {wl.output_len:g} out tokens; SLO TTFT <= {e.slo.ttft_s:g} s, "
        f"TPOT <= {e.slo.tpot_s * 1e3:g} ms"
    )
    mem = (
        "memory per GPU (GiB):\n"
        f"  total {m.total / GiB:8.2f}   usable {m.usable / GiB:8.2f}\n"
        f"  weights {w.total / GiB:8.2f}  (embeddings {w.embeddings / GiB:.2f}, attention {w.attention / GiB:.2f}, "
        f"dense MLP {w.dense_mlp / GiB:.2f}, experts {w.experts / GiB:.2f})\n"
        f"  activations {m.activations / GiB:.2f}   CUDA graphs {m.cuda_graphs / GiB:.2f}   runtime {m.runtime_overhead / GiB:.2f}\n"
        f"  KV budget {m.kv_budget / GiB:8.2f}   = {m.kv_tokens_per_gpu:,.0f} tokens "
        f"({m.kv_bytes_per_token_per_gpu:,.0f} B/token/GPU; {m.kv_bytes_per_token:,.0f} B/token whole model)"
        + (
            "\n" + textwrap.fill(memory_note(m), 100, initial_indent="  ", subsequent_indent="  ")
            if memory_note(m)
            else ""
        )
    )
    bars = "concurrency each limit allows (all replicas; bars to scale):\n" + text_bars(e.limits, e.bottleneck)
    r = e.ranges
    speed = (
        f"recommended concurrency: {e.recommended_concurrency:,}{range_note(r, 'recommended_concurrency', '{:,.0f}')}"
        f"   bottleneck: {PLAIN_NAMES.get(e.bottleneck, e.bottleneck)}\n"
        + (f"  {e.binds}\n" if e.binds else "")
        + f"  memory holds {e.limits['memory']:,.0f} at input+output, {e.memory_limit_mean_context:,.0f} at input+output/2\n"
        + (
            f"at concurrency {e.concurrency:,.1f}: TTFT {e.ttft_s * 1e3:,.0f} ms{range_note(r, 'ttft_s', '{:,.0f}', 1e3)}, "
            f"TPOT {e.tpot_s * 1e3:,.1f} ms{range_note(r, 'tpot_s', '{:,.1f}', 1e3)}, "
            if math.isfinite(e.concurrency)
            else "overloaded (queue grows without bound, TTFT unbounded): "
            f"TPOT {e.tpot_s * 1e3:,.1f} ms{range_note(r, 'tpot_s', '{:,.1f}', 1e3)}, "
        )
        + f"{e.output_tokens_per_s:,.0f} output tokens/s{range_note(r, 'output_tokens_per_s', '{:,.0f}')}, "
        f"communication {e.comm_share:.0%} of a step\n"
        f"saturation (all requests at once): {e.saturation_output_tokens_per_s:,.0f} output tokens/s"
        f"{range_note(r, 'saturation_output_tokens_per_s', '{:,.0f}')}"
    )
    if r:
        first = next(iter(r.values())).band
        groups = "; ".join(
            f"{RANGE_NAMES[k]} from {x.band.group} ({x.band.runs} runs)" for k, x in r.items() if k in RANGE_NAMES
        )
        speed += f"\nranges: {first.level:.0%} of {first.basis} measured inside them; {groups}"
    if hw.spec.is_moe:
        batch = float(e.at.decode_batch) / lay.pp
        speed += (
            f"\nmixture of experts: {hw.spec.active_params / 1e9:.1f}B of {hw.spec.total_params / 1e9:.1f}B parameters "
            f"active per token; a decode step of {batch:,.0f} tokens reads "
            f"{float(experts_touched(hw.spec, batch)):.0%} of the routed experts"
        )
    notes = "".join(f"\nnote: {n}" for n in e.notes)
    return "\n\n".join([head, mem, bars, speed]) + notes


def _clean(v: float | None) -> float | None:
    return None if v is None or not math.isfinite(v) else float(v)


def estimate_to_dict(e: Estimate) -> dict[str, Any]:
    hw, m = e.hw, e.memory
    lay = hw.layout
    return {
        "model": hw.spec.name,
        "gpu": hw.gpu.key,
        "num_gpus": e.replicas * lay.gpus_per_replica,
        "replicas": e.replicas,
        "layout": {"tp": lay.tp, "pp": lay.pp, "ep": lay.ep, "attn_dp": lay.attn_dp},
        "weight_dtype": hw.weight_dtype,
        "kv_dtype": hw.kv_dtype,
        "engine": hw.engine.engine,
        "engine_config": {
            "max_num_seqs": hw.engine.max_num_seqs,
            "max_num_batched_tokens": hw.engine.max_num_batched_tokens,
            "gpu_memory_utilization": hw.engine.gpu_memory_utilization,
            "block_size": hw.engine.block_size,
            "cuda_graphs": hw.engine.cuda_graphs,
        },
        "workload": {
            "input_len": e.workload.input_len,
            "output_len": e.workload.output_len,
            "ttft_slo_s": e.slo.ttft_s,
            "tpot_slo_s": e.slo.tpot_s,
        },
        "coefficients": e.coefficients.as_dict(),
        "memory": {
            "total_bytes_per_gpu": m.total,
            "usable_bytes_per_gpu": m.usable,
            "weights_bytes_per_gpu": m.weights.total,
            "weights_breakdown_bytes_per_gpu": {
                "embeddings": m.weights.embeddings,
                "attention": m.weights.attention,
                "dense_mlp": m.weights.dense_mlp,
                "experts": m.weights.experts,
                "vision_encoder": m.weights.vision_encoder,
                "draft": m.weights.draft,
            },
            "activation_bytes_per_gpu": m.activations,
            "cuda_graph_bytes_per_gpu": m.cuda_graphs,
            "runtime_overhead_bytes_per_gpu": m.runtime_overhead,
            "kv_budget_bytes_per_gpu": m.kv_budget,
            "kv_bytes_per_token": m.kv_bytes_per_token,
            "kv_bytes_per_token_per_gpu": m.kv_bytes_per_token_per_gpu,
            "kv_tokens_per_gpu": m.kv_tokens_per_gpu,
            "kv_budget_given": m.kv_budget_given,
            "tight": m.tight,
        },
        "limits": {k: _clean(v) for k, v in e.limits.items()},
        "memory_limit_mean_context": e.memory_limit_mean_context,
        "recommended_concurrency": e.recommended_concurrency,
        "bottleneck": e.bottleneck,
        "binding": e.binding,
        "binds": e.binds,
        "concurrency": _clean(e.concurrency),
        "ttft_s": _clean(e.ttft_s),
        "tpot_s": _clean(e.tpot_s),
        "output_tokens_per_s": _clean(e.output_tokens_per_s),
        "comm_share": e.comm_share,
        "saturation_output_tokens_per_s": e.saturation_output_tokens_per_s,
        "images": None
        if e.images is None
        else {
            **dataclasses.asdict(e.images),  # the images as given, then what they take
            "tokens_per_request": e.image_tokens_per_request,
            "encoder_bytes_per_gpu": m.weights.vision_encoder,
            "encoder_cache_bytes_per_gpu": m.encoder_cache,
        },
        "speculative": None
        if e.speculative is None
        else {
            "draft_tokens": e.speculative.draft_tokens,
            "acceptance_length": e.speculative.acceptance_length,
            "draft_layers": e.speculative.draft_layers,
            "draft_model": None
            if e.speculative.draft_model is None
            else getattr(e.speculative.draft_model, "name", str(e.speculative.draft_model)),
            "draft_bytes_per_gpu": m.weights.draft,
        },
        "ranges": {
            k: {
                "value": _clean(x.value),
                "low": _clean(x.low),
                "high": _clean(x.high),
                "level": x.level,
                "group": x.band.group,
                "runs": x.band.runs,
                "basis": x.band.basis,
            }
            for k, x in e.ranges.items()
        },
        "notes": e.notes,
    }
