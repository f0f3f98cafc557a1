"""``gpucap estimate``: memory, the concurrency each resource allows, the recommendation and the
speed of one deployment (``gpucap.estimate.estimate_for``). The options build the config
objects (``Deployment``, ``Workload``, ``SLO``, ``OperatingPoint``) the estimator takes."""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

from gpucap.calibration.startuplog import StartupMemory, compare_text, read_startup_log
from gpucap.cli.args import positive_float, positive_int
from gpucap.config import SLO, Deployment, EngineConfig, OperatingPoint, Workload
from gpucap.estimate import estimate_for
from gpucap.physics.speculative import Speculative, acceptance_length
from gpucap.report.text import estimate_to_dict, format_estimate
from gpucap.types import ENGINES, LENGTHS, MOE_BACKENDS, SAMPLERS
from gpucap.units import KV_BYTES_PER_ELEMENT, WEIGHT_BYTES_PER_PARAM, GiB


def _image_size(text: str) -> int | tuple[int, int]:
    """``1344`` (a square side) or ``1080x1920`` (height x width), pixels."""
    try:
        parts = [int(p) for p in text.lower().split("x")]
    except ValueError:
        parts = []
    if len(parts) not in (1, 2) or min(parts) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not an image size; give a side like 1344 or HxW like 1080x1920")
    return parts[0] if len(parts) == 1 else (parts[0], parts[1])


def _speculative(a: argparse.Namespace) -> Speculative | None:
    """The speculative-decoding options as one ``Speculative``, or None when not asked for."""
    given = a.speculative_acceptance_length is not None or a.speculative_acceptance_rate is not None
    if a.speculative_draft_tokens is None:
        if given or a.speculative_draft_model:
            raise ValueError("--speculative-draft-tokens K is needed with the other --speculative options")
        return None
    k = a.speculative_draft_tokens
    if a.speculative_acceptance_rate is not None:
        tau = acceptance_length(acceptance_rate=a.speculative_acceptance_rate, draft_tokens=k)
    elif a.speculative_acceptance_length is not None:
        tau = a.speculative_acceptance_length
    else:
        raise ValueError("give --speculative-acceptance-length TAU or --speculative-acceptance-rate ALPHA")
    return Speculative(
        draft_tokens=k,
        acceptance_length=tau,
        draft_layers=a.speculative_draft_layers,
        draft_vocab_size=a.speculative_draft_vocab,
        draft_model=a.speculative_draft_model,
    )


def add_parser(sub: Any) -> None:
    e = sub.add_parser("estimate", help="memory, per-resource concurrency, recommendation, speed")
    e.add_argument("--model", required=True, help="catalog id (see `gpucap models`) or path to a config.json")
    e.add_argument("--gpu", required=True, help="catalog key (see `gpucap gpus`)")
    e.add_argument("--num-gpus", type=positive_int, default=None, help="GPUs in all (default: one replica)")
    e.add_argument("--tp", type=positive_int, default=1)
    e.add_argument("--pp", type=positive_int, default=1)
    e.add_argument("--ep", type=positive_int, default=1)
    e.add_argument(
        "--attn-dp",
        type=positive_int,
        default=1,
        help="attention data-parallel copies: TensorRT-LLM's DEP8 is --tp 1 --ep 8 --attn-dp 8; SGLang's "
        "--tp 8 --dp 8 --enable-dp-attention is --tp 8 --attn-dp 8 --num-gpus 8 (read as its convention)",
    )
    e.add_argument(
        "--weight-dtype",
        default=None,
        choices=list(WEIGHT_BYTES_PER_PARAM),
        help="weight format (default: the checkpoint's own, from its quantization_config; bf16 for most)",
    )
    e.add_argument("--kv-dtype", default="auto", choices=list(KV_BYTES_PER_ELEMENT))
    e.add_argument("--input-len", type=positive_float, required=True, help="input tokens per request")
    e.add_argument("--output-len", type=positive_float, required=True, help="output tokens per request")
    e.add_argument(
        "--lengths",
        default="varied",
        choices=list(LENGTHS),
        help="varied: traffic whose lengths differ (default); fixed: a fixed-length load test, whose closed loop "
        "runs in waves (TTFT grows with the concurrency)",
    )
    load = e.add_mutually_exclusive_group()
    load.add_argument("--concurrency", type=positive_float, default=None, help="requests in flight, all replicas")
    load.add_argument(
        "--request-rate", type=positive_float, default=None, help="arrivals per second, all replicas (open loop)"
    )
    e.add_argument("--ttft-slo", type=positive_float, default=2.0, help="seconds (default 2)")
    e.add_argument("--tpot-slo", type=positive_float, default=0.1, help="seconds (default 0.1)")
    e.add_argument("--engine", default="vllm", choices=list(ENGINES))
    e.add_argument("--max-num-seqs", type=positive_int, default=None)
    e.add_argument("--max-num-batched-tokens", type=positive_int, default=None)
    e.add_argument("--gpu-memory-utilization", type=positive_float, default=None)
    e.add_argument("--block-size", type=positive_int, default=None)
    e.add_argument("--no-cuda-graphs", action="store_true", help="as vLLM --enforce-eager")
    kv = e.add_mutually_exclusive_group()
    kv.add_argument(
        "--kv-cache-memory", type=positive_float, default=None, help="KV budget per GPU, GiB (as vLLM's option)"
    )
    kv.add_argument(
        "--startup-log", default=None, help="a vLLM start-up log: its KV budget is used, each term compared"
    )
    e.add_argument(
        "--sampler",
        default=None,
        choices=list(SAMPLERS),
        help="vLLM's sampler at start-up: logits (V2 runner, the default), in-place (V1 runner), "
        "sort (V1 with PyTorch's sort: 0.11.1-0.16, or 0.10-0.11.0 without FlashInfer); "
        "default: what --startup-log shows, else logits",
    )
    e.add_argument(
        "--moe-backend",
        default=None,
        choices=list(MOE_BACKENDS),
        help="as vLLM's option; sets how MXFP4 experts are padded (default: what --startup-log "
        "names, else auto, the GPU's kernel)",
    )
    e.add_argument(
        "--enable-eplb", action="store_true", help="an expert-parallel load balancer evens the GPUs' expert loads"
    )
    e.add_argument(
        "--routing-skew",
        type=float,
        default=0.0,
        help="MoE expert popularity as a Zipf exponent (0 uniform; ~0.5 DeepSeek-V3)",
    )
    e.add_argument("--coefficients", default=None, help="calibration JSON")
    e.add_argument("--gpu-file", default=None, help="CSV of extra GPUs (columns of data/gpus.csv)")
    e.add_argument(
        "--prefix-tokens", type=float, default=0.0, help="a system prompt inside --input-len, kept in the prefix cache"
    )
    e.add_argument("--prefix-share", type=float, default=1.0, help="share of requests that carry it (default 1)")
    e.add_argument(
        "--turns", type=int, default=1, help="turns per conversation; each turn's prompt carries the earlier ones"
    )
    e.add_argument("--images-per-request", type=float, default=0.0, help="images each request carries (multimodal)")
    e.add_argument("--image-size-px", type=_image_size, default=None, help="image side, or HxW like 1080x1920")
    e.add_argument("--mm-encoder-tp-mode", default="weights", choices=["weights", "data"], help="as vLLM's option")
    e.add_argument("--speculative-draft-tokens", type=positive_int, default=None, help="k tokens drafted per step")
    tau = e.add_mutually_exclusive_group()
    tau.add_argument("--speculative-acceptance-length", type=positive_float, default=None, help="tau, bonus included")
    tau.add_argument("--speculative-acceptance-rate", type=float, default=None, help="alpha per drafted token (i.i.d.)")
    e.add_argument("--speculative-draft-layers", type=positive_int, default=1, help="layers of an EAGLE/MTP head")
    e.add_argument("--speculative-draft-vocab", type=positive_int, default=None, help="head vocabulary (EAGLE-3)")
    e.add_argument("--speculative-draft-model", default=None, help="a separate draft model: catalog id or config.json")
    e.add_argument("--json", action="store_true")


def _kv_cache_memory_bytes(a: argparse.Namespace, logged: StartupMemory | None) -> float | None:
    """The KV budget per GPU the options fix: ``--kv-cache-memory`` GiB, or the start-up log's."""
    if a.kv_cache_memory is not None:
        return float(a.kv_cache_memory) * GiB
    if logged is None:
        return None
    if logged.kv_gib is None:
        raise ValueError(f"{logged.source}: no 'Available KV cache memory' line, so no KV budget to use")
    if logged.kv_gib <= 0:
        raise ValueError(
            f"{logged.source}: the logged KV budget is {logged.kv_gib:g} GiB, so that start-up did not fit; "
            "raise --gpu-memory-utilization or use more GPUs per replica"
        )
    return logged.kv_gib * GiB


def deployment(a: argparse.Namespace, logged: StartupMemory | None = None) -> Deployment:
    """The deployment the options describe: model, GPUs, split, formats and engine knobs."""
    engine = EngineConfig(
        kv_cache_memory_bytes=_kv_cache_memory_bytes(a, logged),
        engine=a.engine,
        max_num_seqs=a.max_num_seqs,
        max_num_batched_tokens=a.max_num_batched_tokens,
        gpu_memory_utilization=a.gpu_memory_utilization,
        block_size=a.block_size,
        cuda_graphs=not a.no_cuda_graphs,
        eplb=a.enable_eplb,
        sampler=a.sampler or (logged and logged.sampler) or EngineConfig.sampler,
        moe_backend=a.moe_backend or (logged and logged.moe_backend) or EngineConfig.moe_backend,
    )
    return Deployment(
        a.model,
        a.gpu,
        a.num_gpus,
        tp=a.tp,
        pp=a.pp,
        ep=a.ep,
        attn_dp=a.attn_dp,
        weight_dtype=a.weight_dtype,
        kv_dtype=a.kv_dtype,
        engine=engine,
        gpu_file=a.gpu_file,
        routing_skew=a.routing_skew,
        encoder_tp_mode=a.mm_encoder_tp_mode,
    )


def workload(a: argparse.Namespace) -> Workload:
    """The requests the options describe: lengths, images, prefix cache, turns."""
    return Workload(
        a.input_len,
        a.output_len,
        images_per_request=a.images_per_request,
        image_size_px=a.image_size_px,
        lengths=a.lengths,
        prefix_tokens=a.prefix_tokens,
        prefix_share=a.prefix_share,
        turns=a.turns,
    )


def run(a: argparse.Namespace) -> int:
    logged = read_startup_log(a.startup_log) if a.startup_log else None
    est = estimate_for(
        deployment(a, logged),
        workload(a),
        SLO(ttft_s=a.ttft_slo, tpot_s=a.tpot_slo),
        OperatingPoint(concurrency=a.concurrency, request_rate=a.request_rate),
        coefficients=a.coefficients,
        speculative=_speculative(a),
    )
    if a.json:
        out = estimate_to_dict(est)
        if logged is not None:
            out["startup_log"] = dataclasses.asdict(logged)
        print(json.dumps(out, indent=2))
        return 0
    if logged is not None:
        print(compare_text(logged, est.memory) + "\n")
    print(format_estimate(est))
    return 0
