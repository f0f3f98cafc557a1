"""The estimator: one call from (model, GPUs, split, workload, SLOs, engine) to the memory
breakdown, the concurrency each resource allows, the SLO-limited recommendation, the binding
constraint and the speed at a concurrency. This is what the CLI, notebooks and planner call.

Optional inputs: images per request (and their size) for multimodal models (``gpucap.physics.vision``),
and speculative decoding (``gpucap.physics.speculative``); without them every result is the text-only,
one-token-per-step answer.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gpucap.calibration.ranges import Band, Range, bands_from_coefficients, published_bands, slo_concurrency_range
from gpucap.catalog.gpus import GPU, get_gpu
from gpucap.catalog.lookup import load_model
from gpucap.catalog.models import ModelSpec
from gpucap.config import Layout, split_of
from gpucap.physics.batching import Extras, LoadPoint, closed_loop, open_loop, take
from gpucap.physics.coefficients import Coefficients, EngineConfig, front_end
from gpucap.physics.memory import (
    ArrayLike,
    MemoryBreakdown,
    concurrency_by_memory,
    does_not_fit_message,
    held_tokens_per_layer,
    memory_breakdown,
)
from gpucap.physics.runs import saturation_run
from gpucap.physics.speculative import Speculative
from gpucap.physics.step import Hardware, StepTime
from gpucap.physics.vision import Images
from gpucap.physics.waves import wave_loop

RESOURCES = ("memory", "compute", "hbm_bandwidth", "interconnect", "host")
# what ``Estimate.bottleneck`` may name: a resource, the engine's slot cap, the host's time per
# step, or, when not even one request meets them, the SLO that fails
BOTTLENECKS = (*RESOURCES, "max_num_seqs", "step_overhead", "ttft_slo", "tpot_slo")
# The same, as the page and figures say them to people.
PLAIN_NAMES = {
    "memory": "memory (KV cache)", "compute": "compute", "hbm_bandwidth": "HBM bandwidth",
    "interconnect": "interconnect", "host": "host (HTTP server, scheduler)",
    "max_num_seqs": "engine batch limit (max_num_seqs)", "step_overhead": "time per step outside the GPU",
    "ttft_slo": "TTFT SLO (missed by one request alone)", "tpot_slo": "TPOT SLO (missed by one request alone)",
}  # fmt: skip
# ... and as bar labels, where space is short: the resources in plain words
BAR_NAMES = {name: "HBM bandwidth" if name == "hbm_bandwidth" else name for name in RESOURCES}
# Request lengths of the load: "varied" (desynchronized traffic: the steady state of
# gpucap.physics.batching.closed_loop) or "fixed" (a load test with one length for all, whose closed loop
# runs in waves: gpucap.physics.waves.wave_loop).
LENGTHS = ("varied", "fixed")
FRONT_END_SATURATED = 0.95  # share of the HTTP server's core at which it is taken as full
COMM_SHARE_WARNING = 0.5  # seed 1's rule of thumb
MAX_SEARCH_CONCURRENCY = 1 << 16  # per replica
MAX_ROUTING_SKEW = 3.0  # a Zipf exponent past which one expert takes nearly every token


def check_prefix(input_len: float, prefix_tokens: float, share: float, turns: int) -> None:
    """Raise a one-line ValueError for a prefix longer than the prompt, a share outside [0, 1]
    or a turn count that is not a whole number >= 1."""
    if not (isinstance(prefix_tokens, (int, float)) and 0 <= prefix_tokens <= input_len):
        raise ValueError(
            f"prefix_tokens={prefix_tokens!r} must be between 0 and the prompt's input_len ({input_len:g}): "
            "the system prompt is part of the prompt"
        )
    if not (isinstance(share, (int, float)) and 0 <= share <= 1):
        raise ValueError(f"prefix_share must be a share between 0 and 1, got {share!r}")
    if not (isinstance(turns, int) and not isinstance(turns, bool) and turns >= 1):
        raise ValueError(f"turns must be a whole number >= 1, got {turns!r}")


class DoesNotFit(ValueError):
    """The model's weights and reservations leave no room for KV cache."""


@dataclass(frozen=True)
class Workload:
    """Request lengths (text tokens), SLOs, and the images each request carries.

    ``input_len`` counts text tokens; images add their tokens on top (``gpucap.physics.vision``).
    ``image_size_px``: side of a square image or (height, width); None = the encoder's native
    size (Qwen2.5-VL reads images at their own size and needs one). ``lengths``: "varied"
    (traffic whose requests differ in length: steady state) or "fixed" (a load test with one
    length for all requests: the closed loop runs in waves, ``gpucap.physics.waves``).
    """

    input_len: float
    output_len: float
    ttft_slo_s: float = 2.0
    tpot_slo_s: float = 0.1
    images_per_request: float = 0.0
    image_size_px: int | tuple[int, int] | None = None
    lengths: str = "varied"
    prefix_tokens: float = 0.0  # a system prompt (inside input_len) in the prefix cache
    prefix_share: float = 1.0  # share of requests that carry it
    turns: int = 1  # turns per conversation; each turn's prompt carries the earlier turns

    def __post_init__(self) -> None:
        if self.lengths not in LENGTHS:
            raise ValueError(f"lengths must be one of {', '.join(LENGTHS)}, got {self.lengths!r}")
        for name in ("input_len", "output_len", "ttft_slo_s", "tpot_slo_s"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and v > 0 and np.isfinite(v)):
                raise ValueError(f"{name} must be a positive number, got {v!r}")
        check_prefix(self.input_len, self.prefix_tokens, self.prefix_share, self.turns)
        if self.lengths == "fixed" and self.cached_len:
            raise ValueError(
                "prefix caching and turns are modelled for varied traffic (lengths='varied'), not fixed-length waves"
            )
        Images(per_request=self.images_per_request, size_px=self.image_size_px)  # validates both

    def images(self, encoder_tp_mode: str = "weights") -> Images | None:
        """The images of each request, or None for text-only requests."""
        if not self.images_per_request:
            return None
        return Images(per_request=self.images_per_request, size_px=self.image_size_px, encoder_tp_mode=encoder_tp_mode)

    @property
    def history_len(self) -> float:
        """Earlier turns a prompt carries, on average over a conversation's turns:
        ``(turns - 1) / 2 x (input - system prompt + output)`` (the system prompt once)."""
        return (self.turns - 1) / 2 * (self.input_len - self.prefix_tokens + self.output_len)

    @property
    def prompt_len(self) -> float:
        """Mean prompt: the turn's own input plus the history it carries."""
        return self.input_len + self.history_len

    @property
    def cached_len(self) -> float:
        """Prompt tokens found in the prefix cache, on average: the system prompt where a request
        carries it, and the whole history (taken to stay cached between turns)."""
        return self.prefix_share * self.prefix_tokens + self.history_len

    @property
    def shared_len(self) -> float:
        """Tokens whose KV one copy serves every request that carries them (the system prompt)."""
        return self.prefix_tokens if self.prefix_share > 0 else 0.0

    @property
    def max_context(self) -> float:
        """Tokens a request holds at its end: input + output (the safe length for memory), the
        last turn's for a conversation."""
        return self.input_len + 2 * self.history_len + self.output_len

    @property
    def mean_context(self) -> float:
        """Tokens a request holds on average over its life: input + output / 2."""
        return self.prompt_len + self.output_len / 2


@dataclass(frozen=True)
class Estimate:
    hw: Hardware
    workload: Workload
    coefficients: Coefficients
    replicas: int
    memory: MemoryBreakdown
    limits: dict[str, float | None]  # total concurrency each resource allows; None = not binding
    memory_limit_mean_context: float
    recommended_concurrency: int
    bottleneck: str
    concurrency: float  # where the speed below is evaluated (total across replicas)
    at: LoadPoint  # one replica at concurrency / replicas
    saturation_output_tokens_per_s: float
    notes: list[str] = field(default_factory=list)
    images: Images | None = None
    speculative: Speculative | None = None
    image_tokens_per_request: float = 0.0
    # the range each answer's measured value has fallen in (gpucap.calibration.ranges): keys
    # "recommended_concurrency", "output_tokens_per_s", "ttft_s", "tpot_s",
    # "saturation_output_tokens_per_s"; a metric without a band has no key
    ranges: dict[str, Range] = field(default_factory=dict)

    @property
    def ttft_s(self) -> float:
        return float(self.at.ttft_s)

    @property
    def tpot_s(self) -> float:
        return float(self.at.tpot_s)

    @property
    def output_tokens_per_s(self) -> float:
        return float(self.at.output_tokens_per_s) * self.replicas

    @property
    def comm_share(self) -> float:
        return float(self.at.decode_step.comm_share)

    def to_dict(self) -> dict[str, Any]:
        from gpucap.report.text import estimate_to_dict

        return estimate_to_dict(self)

    def __str__(self) -> str:
        from gpucap.report.text import format_estimate

        return format_estimate(self)


def hardware(
    model: str | Path | ModelSpec,
    gpu: str | GPU,
    *,
    tp: int = 1,
    pp: int = 1,
    ep: int = 1,
    attn_dp: int = 1,
    weight_dtype: str | None = None,
    kv_dtype: str = "auto",
    engine: str | EngineConfig = "vllm",
    gpu_file: str | Path | None = None,
    routing_skew: float = 0.0,
) -> Hardware:
    """Resolve names into a checked ``Hardware`` (model, GPU, layout, formats, engine knobs).
    ``weight_dtype`` None: the checkpoint's own format (``ModelSpec.checkpoint_dtype``).
    ``routing_skew``: Zipf exponent of a MoE router's expert popularity (``gpucap.physics.routing``)."""
    spec = load_model(model)
    if routing_skew:
        if not (spec.is_moe and 0 < routing_skew <= MAX_ROUTING_SKEW):
            raise ValueError(
                f"routing_skew={routing_skew:g}: give a number in (0, {MAX_ROUTING_SKEW:g}] for a mixture-of-experts "
                f"model ({spec.name} is {'MoE' if spec.is_moe else 'dense'}); DeepSeek-V3's published popularity is ~0.52"
            )
        spec = dataclasses.replace(spec, routing_skew=float(routing_skew))
    weight_dtype = weight_dtype or spec.checkpoint_dtype
    g = get_gpu(gpu, gpu_file)
    if g.is_amd and kv_dtype == "fp8_e5m2":
        raise ValueError(
            f"kv_dtype fp8_e5m2 does not run on {g.key}: vLLM's ROCm KV-cache kernels take fp8 (= fp8_e4m3) "
            "only (csrc/quantization/fp8/amd/quant_utils.cuh); use kv_dtype fp8 or auto"
        )
    layout = Layout(tp=tp, pp=pp, ep=ep, attn_dp=attn_dp)
    layout.check(spec)
    eng = EngineConfig(engine=engine) if isinstance(engine, str) else engine
    return Hardware(
        spec=spec, gpu=g, layout=layout, weight_dtype=weight_dtype, kv_dtype=kv_dtype, engine=eng.resolve(g)
    )


def hardware_memory(
    hw: Hardware, *, images: Images | None = None, speculative: Speculative | None = None
) -> MemoryBreakdown:
    """``gpucap.physics.memory.memory_breakdown`` of resolved hardware; does not raise when it does not fit
    (a negative ``kv_budget`` says by how much)."""
    return memory_breakdown(
        hw.spec,
        hw.gpu,
        hw.layout,
        weight_dtype=hw.weight_dtype,
        kv_dtype=hw.kv_dtype,
        engine=hw.engine,
        images=images,
        speculative=speculative,
    )


def memory_limit(
    hw: Hardware,
    context_tokens: float,
    *,
    images: Images | None = None,
    speculative: Speculative | None = None,
    shared_tokens: float = 0.0,
    shared_by: float = 1.0,
) -> tuple[MemoryBreakdown, float]:
    """Per-GPU breakdown and the requests one replica's KV cache holds at ``context_tokens``
    (image tokens included); raises ``DoesNotFit`` when the weights leave no room.

    ``shared_tokens`` of a prefix that ``shared_by`` of the requests carry (a system prompt in
    the prefix cache) hold their KV once: the budget loses one copy, and each request is charged
    ``context - shared_by x shared_tokens``."""
    mem = hardware_memory(hw, images=images, speculative=speculative)
    if not mem.fits:
        raise DoesNotFit(does_not_fit_message(mem, hw.spec, hw.gpu, hw.layout, hw.weight_dtype))
    block = int(hw.engine.block_size or 1)
    counted = mem
    if shared_tokens:
        one_copy = float(held_tokens_per_layer(hw.spec, shared_tokens, block)) * mem.kv_bytes_per_token_per_gpu
        counted = dataclasses.replace(mem, kv_budget=mem.kv_budget - one_copy)
    charged = context_tokens - shared_by * shared_tokens
    limit = float(concurrency_by_memory(counted, hw.spec, hw.layout, charged, block))
    return mem, limit


def batch_slots(hw: Hardware, kv_slots: float | None = None, *, context_tokens: float | None = None) -> float:
    """Requests one replica runs at once: the smaller of the engine's ``max_num_seqs`` and the
    requests its KV cache holds (``kv_slots``, or found by ``memory_limit`` at ``context_tokens``)."""
    if kv_slots is None:
        if context_tokens is None:
            raise ValueError("give kv_slots or context_tokens")
        _, kv_slots = memory_limit(hw, context_tokens)
    return float(min(float(hw.engine.max_num_seqs or np.inf), kv_slots))


def _grid(top: float) -> np.ndarray:
    return np.unique(np.round(np.geomspace(1, max(top, 1), 600)))


def _largest_ok(grid: np.ndarray, ok: np.ndarray) -> float | None:
    """Largest grid value before the first failure (quantities rise with concurrency)."""
    if not ok[0]:
        return 0.0
    bad = np.flatnonzero(~ok)
    return None if bad.size == 0 else float(grid[bad[0] - 1])


def loop_point(
    hw: Hardware,
    coef: Coefficients,
    wl: Workload,
    concurrency: np.ndarray | float,
    *,
    max_running: ArrayLike = np.inf,
    images: Images | None = None,
    speculative: Speculative | None = None,
) -> LoadPoint:
    """One replica at ``concurrency`` requests kept in flight: the waves of a fixed-length load
    test (``gpucap.physics.waves.wave_loop``) or the steady state of varied traffic
    (``gpucap.physics.batching.closed_loop``). Images and speculative decoding are modelled in the
    steady state only."""
    if wl.lengths == "fixed" and images is None and speculative is None:
        return wave_loop(
            hw, coef, concurrency=concurrency, input_len=wl.input_len, output_len=wl.output_len, max_running=max_running
        )
    return closed_loop(
        hw,
        coef,
        concurrency=concurrency,
        cached_tokens=wl.cached_len,
        input_len=wl.prompt_len,
        output_len=wl.output_len,
        max_running=max_running,
        images=images,
        speculative=speculative,
    )


def front_end_share(hw: Hardware, coef: Coefficients, point: LoadPoint) -> np.ndarray:
    """Share of the HTTP server's core the load takes: requests/s x ``t_request_s``."""
    return np.asarray(point.requests_per_s * front_end(hw.engine, coef).serial_s, dtype=float)


def resource_limits(
    hw: Hardware,
    coef: Coefficients,
    wl: Workload,
    top: float,
    *,
    images: Images | None = None,
    speculative: Speculative | None = None,
    point: LoadPoint | None = None,
) -> dict[str, float | None]:
    """Per replica: the concurrency at which each resource's own term alone uses up an SLO.

    For resource r (compute, HBM, link) the steady-state step is split into its terms; the limit is
    the largest C with ``term_r(decode step) <= TPOT_SLO`` and ``TTFT x term_r(prefill step) /
    prefill step <= TTFT_SLO``: TTFT, queueing for prompt-token budget included, is charged to each
    resource by its share of the step that carries the prefill. The combined recommendation can sit
    below every bar, since the terms add. With speculation a decode step yields tau tokens, so
    its terms are compared per token (``/ tau``).

    ``point``: the loop already computed on ``_grid(top)`` (``estimate`` computes this and the
    SLO search's in one call).

    The host is the fifth resource: its per-step time (scheduling, sampling) alone must stay
    within the TPOT SLO, and its HTTP server must pass the requests: the limit is where the
    server's core is full (``requests/s x t_request_s`` reaches ``FRONT_END_SATURATED``).
    """
    grid = _grid(top)
    pt = point or loop_point(hw, coef, wl, grid, images=images, speculative=speculative)
    tau = speculative.acceptance_length if speculative else 1.0
    out: dict[str, float | None] = {}
    for name, attr in (("compute", "compute_s"), ("hbm_bandwidth", "memory_s"), ("interconnect", "comm_s")):
        dec = getattr(pt.decode_step, attr) / tau
        pre = pt.ttft_s * getattr(pt.prefill_step, attr) / pt.prefill_step.total_s
        out[name] = _largest_ok(grid, (dec <= wl.tpot_slo_s) & (pre <= wl.ttft_slo_s))
    host_ok = (pt.decode_step.overhead_s / tau <= wl.tpot_slo_s) & (front_end_share(hw, coef, pt) < FRONT_END_SATURATED)
    out["host"] = _largest_ok(grid, host_ok)
    return out


def slo_limit(
    hw: Hardware,
    coef: Coefficients,
    wl: Workload,
    top: float,
    *,
    images: Images | None = None,
    speculative: Speculative | None = None,
    point: LoadPoint | None = None,
) -> float:
    """Largest concurrency per replica with TTFT <= SLO and TPOT <= SLO, at most ``top``
    (``point``: the loop already computed on ``_grid(top)`` with ``max_num_seqs`` slots)."""
    grid = _grid(top)
    cap = float(hw.engine.max_num_seqs or np.inf)
    pt = point or loop_point(hw, coef, wl, grid, max_running=cap, images=images, speculative=speculative)
    ok = (pt.ttft_s <= wl.ttft_slo_s) & (pt.tpot_s <= wl.tpot_slo_s)
    best = _largest_ok(grid, ok)
    return float(top if best is None else best)


def one_request_fails(wl: Workload, one: LoadPoint) -> tuple[str, str]:
    """Which SLO one request alone (``one``: the loop at concurrency 1) misses, and a sentence
    saying by how much, what its step is made of and what would meet it."""

    def parts(step: StepTime) -> str:
        """The step's terms, each alone (the roofline takes the larger of compute and HBM)."""
        terms = {"compute": step.compute_s, "HBM": step.memory_s, "link": step.comm_s, "host": step.overhead_s}
        total = float(step.total_s)
        return ", ".join(f"{k} {float(v) * 1e3:.3g} ms" for k, v in terms.items() if float(v) >= 0.05 * total)

    ttft, tpot = float(one.ttft_s), float(one.tpot_s)
    if ttft > wl.ttft_slo_s:
        return "ttft_slo", (
            f"no concurrency meets the SLOs: one request alone takes {ttft:.3g} s to its first token "
            f"({wl.input_len:,.0f}-token prompt; each prefill step: {parts(one.prefill_step)}) > TTFT SLO "
            f"{wl.ttft_slo_s:g} s; a TTFT of {wl.ttft_slo_s:g} s needs more GPUs per replica (tp), a faster "
            "GPU, fp8 weights, shorter prompts or a looser TTFT SLO"
        )
    return "tpot_slo", (
        f"no concurrency meets the SLOs: one request alone decodes at {tpot * 1e3:.3g} ms per token "
        f"(its decode step: {parts(one.decode_step)}) > TPOT SLO {wl.tpot_slo_s * 1e3:g} ms; that needs more GPUs "
        "per replica (tp), a faster GPU, smaller weights (fp8, fp4), speculative decoding or a looser TPOT SLO"
    )


def estimate(
    model: str | Path | ModelSpec,
    gpu: str | GPU,
    num_gpus: int | None = None,
    *,
    input_len: float,
    output_len: float,
    tp: int = 1,
    pp: int = 1,
    ep: int = 1,
    attn_dp: int = 1,
    weight_dtype: str | None = None,
    kv_dtype: str = "auto",
    concurrency: float | None = None,
    request_rate: float | None = None,
    ttft_slo_s: float = 2.0,
    tpot_slo_s: float = 0.1,
    engine: str | EngineConfig = "vllm",
    coefficients: Coefficients | str | Path | None = None,
    gpu_file: str | Path | None = None,
    images_per_request: float = 0.0,
    image_size_px: int | tuple[int, int] | None = None,
    encoder_tp_mode: str = "weights",
    speculative: Speculative | None = None,
    lengths: str = "varied",
    routing_skew: float = 0.0,
    prefix_tokens: float = 0.0,
    prefix_share: float = 1.0,
    turns: int = 1,
) -> Estimate:
    """Estimate capacity and speed of ``num_gpus`` GPUs serving ``model``.

    The GPUs form ``num_gpus / (tp x pp x attn_dp)`` replicas. Concurrency (given and reported)
    counts requests across all replicas. The speed is evaluated at ``concurrency`` requests kept
    in flight (closed loop), or at ``request_rate`` arrivals per second spread over the replicas
    (open loop: the reported concurrency is then the mean number in the system), or else at the
    recommendation. Raises ``DoesNotFit`` when the weights leave no room. ``weight_dtype`` None:
    the checkpoint's own format (fp8 for DeepSeek-V3, MXFP4 for gpt-oss; bf16 for most), said in
    the notes when it is not bf16.

    Multimodal: ``images_per_request`` images of ``image_size_px`` (side or (height, width)) per
    request; their tokens lengthen the prompt and the KV cache, the encoder's time adds to the
    prefill, and its weights and cache to memory. ``encoder_tp_mode`` is vLLM's
    ``--mm-encoder-tp-mode`` ("weights": split by tp; "data": whole on every GPU).
    ``speculative``: draft tokens, acceptance length and drafter (``gpucap.physics.speculative``).
    ``lengths``: "varied" (traffic; steady state) or "fixed" (a fixed-length load test, whose
    closed loop runs in waves and whose TTFT grows with the concurrency; ``gpucap.physics.waves``).
    ``routing_skew``: a MoE router's expert popularity as a Zipf exponent (0: uniform;
    ``gpucap.physics.routing``); an expert-parallel load balancer is ``EngineConfig(eplb=True)``.
    Prefix caching: ``prefix_tokens`` of each prompt are a system prompt that ``prefix_share`` of
    the requests carry; ``turns`` > 1 makes each request one turn of a conversation whose prompt
    carries the earlier turns (``input_len`` is then a turn's new tokens, system prompt
    included). Cached tokens skip the prefill; the system prompt's KV is held once for all.
    """
    split, convention = split_of(num_gpus, tp=tp, pp=pp, ep=ep, attn_dp=attn_dp)  # SGLang's DP attention too
    hw = hardware(
        model,
        gpu,
        tp=split.tp,
        pp=pp,
        ep=ep,
        attn_dp=attn_dp,
        weight_dtype=weight_dtype,
        kv_dtype=kv_dtype,
        engine=engine,
        gpu_file=gpu_file,
        routing_skew=routing_skew,
    )
    wl = Workload(
        float(input_len),
        float(output_len),
        float(ttft_slo_s),
        float(tpot_slo_s),
        images_per_request=images_per_request,
        image_size_px=image_size_px,
        lengths=lengths,
        prefix_tokens=float(prefix_tokens),
        prefix_share=float(prefix_share),
        turns=turns,
    )
    images = wl.images(encoder_tp_mode)
    hw.spec.check_context(wl.max_context - wl.output_len + Extras(images).image_tokens(hw), wl.output_len)
    per_replica = hw.layout.gpus_per_replica
    num_gpus = num_gpus or per_replica
    if num_gpus % per_replica:
        degrees = "tp x pp" + (" x attn_dp" if attn_dp > 1 else "")
        raise ValueError(
            f"num_gpus={num_gpus} is not a multiple of the GPUs per replica, {degrees} = {per_replica}: "
            f"use {per_replica * max(num_gpus // per_replica, 1)} GPUs or another split"
        )
    replicas = num_gpus // per_replica
    bands = published_bands(hw.engine.engine, "poisson" if request_rate else "fixed-concurrency", model_class(hw.spec))
    sat_band = published_bands(hw.engine.engine, "saturation", model_class(hw.spec)).get("output_tok_s")
    if isinstance(coefficients, (str, Path)):
        coef = Coefficients.from_file(coefficients, hw.engine.engine)
        fitted = bands_from_coefficients(coefficients)  # the calibration's own, where it saved them
        bands, sat_band = {**bands, **fitted}, fitted.get("output_tok_s", sat_band)
    else:
        coef = coefficients or Coefficients.for_engine(hw.engine.engine)

    image_tokens = Extras(images).image_tokens(hw)
    max_context, mean_context = wl.max_context + image_tokens, wl.mean_context + image_tokens
    shared = dict(shared_tokens=wl.shared_len, shared_by=wl.prefix_share)
    mem, mem_limit = memory_limit(hw, max_context, images=images, speculative=speculative, **shared)
    _, mem_limit_mean = memory_limit(hw, mean_context, images=images, speculative=speculative, **shared)
    if mem_limit < 1:
        raise DoesNotFit(
            f"{hw.spec.name} fits on {hw.gpu.key} but its KV budget ({mem.kv_budget / 2**30:.2f} GiB per GPU) "
            f"holds less than one {max_context:.0f}-token request; use more GPUs per replica or fp8 KV"
        )
    # one vectorized call for both searches: every resource's limit (no slot cap) and the SLOs'
    g_res, g_slo = _grid(MAX_SEARCH_CONCURRENCY), _grid(mem_limit)
    both = loop_point(
        hw,
        coef,
        wl,
        np.concatenate([g_res, g_slo]),
        max_running=np.concatenate(
            [np.full(g_res.size, np.inf), np.full(g_slo.size, float(hw.engine.max_num_seqs or np.inf))]
        ),
        images=images,
        speculative=speculative,
    )
    first, rest = slice(0, g_res.size), slice(g_res.size, None)
    limits_r = resource_limits(
        hw, coef, wl, MAX_SEARCH_CONCURRENCY, images=images, speculative=speculative, point=take(both, first)
    )
    slo_pt = take(both, rest)
    slo_r = slo_limit(hw, coef, wl, mem_limit, images=images, speculative=speculative, point=slo_pt)
    rec_r = min(slo_r, mem_limit)
    limits: dict[str, float | None] = {"memory": mem_limit * replicas}
    for k, v in limits_r.items():
        limits[k] = None if v is None else v * replicas

    notes: list[str] = [convention] if convention else []
    if weight_dtype is None and hw.weight_dtype != "bf16":
        notes.append(
            f"weights in the checkpoint's own format, {hw.weight_dtype} (its quantization_config); "
            "give a weight format to estimate another"
        )
    # the recommendation and one request beyond it, in one call
    pair = loop_point(
        hw,
        coef,
        wl,
        np.array([max(rec_r, 1.0), max(rec_r, 1.0) + 1.0]),
        max_running=float(hw.engine.max_num_seqs or np.inf),
        images=images,
        speculative=speculative,
    )
    probe, beyond = take(pair, 0), take(pair, 1)
    if rec_r < 1:
        bottleneck, why = one_request_fails(wl, probe)
        notes.append(why)
    elif rec_r >= mem_limit:
        bottleneck = "memory"
    elif float(front_end_share(hw, coef, probe)) >= FRONT_END_SATURATED:
        bottleneck = "host"
    elif hw.engine.max_num_seqs and rec_r >= hw.engine.max_num_seqs and float(probe.ttft_s) <= wl.ttft_slo_s:
        bottleneck = "max_num_seqs"
    else:
        # the resource whose step fails first beyond the recommendation: the prompt's step when
        # TTFT is what fails there, the decode step when TPOT is
        ttft_fails = float(beyond.ttft_s) > wl.ttft_slo_s and float(beyond.tpot_s) <= wl.tpot_slo_s
        step = probe.prefill_step if ttft_fails else probe.decode_step
        shares = {
            "compute": float(step.compute_s),
            "hbm_bandwidth": float(step.memory_s),
            "interconnect": float(step.comm_s),
            "step_overhead": float(step.overhead_s),
        }
        bottleneck = max(shares, key=lambda k: shares[k])
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
            f"holds {mem.weights.vision_encoder / 2**30:.2f} GiB per GPU and its cache {mem.encoder_cache / 2**30:.2f} GiB"
        )
    if wl.cached_len:
        notes.append(
            f"prefix cache: {wl.cached_len:,.0f} of each {wl.prompt_len:,.0f}-token prompt (mean) are cached and skip "
            f"the prefill; the {wl.shared_len:,.0f}-token system prompt's KV is held once; the saturation figure "
            "(all requests at once) does not count the cache"
        )
    if speculative is not None:
        notes.append(
            f"speculative decoding: {speculative.draft_tokens} draft tokens, {speculative.acceptance_length:g} kept per "
            f"step; the drafter holds {mem.weights.draft / 2**30:.2f} GiB per GPU"
        )

    cap = batch_slots(hw, mem_limit)
    if concurrency is not None and request_rate is not None:
        raise ValueError("give concurrency (closed loop) or request_rate (open loop), not both")
    if request_rate is not None:
        if not request_rate > 0:
            raise ValueError(f"request_rate must be positive, got {request_rate}")
        at = open_loop(
            hw,
            coef,
            request_rate=request_rate / replicas,
            input_len=wl.prompt_len,
            cached_tokens=wl.cached_len,
            output_len=wl.output_len,
            max_running=cap,
            images=images,
            speculative=speculative,
        )
        c_total = float(at.concurrency) * replicas
        if not np.isfinite(c_total):
            notes.append(
                f"{request_rate:g} requests/s exceed the service rate {float(at.requests_per_s) * replicas:.3g}/s: "
                "the queue grows without bound"
            )
    else:
        c_total = float(concurrency) if concurrency is not None else max(rec_r, 1.0) * replicas
        if c_total <= 0:
            raise ValueError(f"concurrency must be positive, got {concurrency}")
        at = loop_point(hw, coef, wl, c_total / replicas, max_running=cap, images=images, speculative=speculative)
    sat = saturation_run(
        hw,
        coef,
        num_prompts=np.inf,
        input_len=wl.prompt_len,
        output_len=wl.output_len,
        max_running=cap,
        images=images,
        speculative=speculative,
    )
    share = float(at.decode_step.comm_share)
    if share > COMM_SHARE_WARNING:
        notes.append(f"communication is {share:.0%} of the step (> 50%): fewer GPUs per replica or a faster link")
    if concurrency is not None and concurrency > mem_limit * replicas:
        notes.append(
            f"concurrency {concurrency:g} exceeds what memory holds ({mem_limit * replicas:g}); the rest wait in the queue"
        )
    ranges = answer_ranges(
        bands,
        int(rec_r * replicas),
        slo_concurrency(g_slo, slo_pt, wl, bands, mem_limit, replicas),
        output_tokens_per_s=float(at.output_tokens_per_s) * replicas,
        ttft_s=float(at.ttft_s),
        tpot_s=float(at.tpot_s),
        saturation=(float(sat.output_tokens_per_s) * replicas, sat_band),
    )
    return Estimate(
        hw=hw,
        workload=wl,
        coefficients=coef,
        replicas=replicas,
        memory=mem,
        limits=limits,
        memory_limit_mean_context=mem_limit_mean * replicas,
        recommended_concurrency=int(rec_r * replicas),
        bottleneck=bottleneck,
        concurrency=c_total,
        at=at,
        saturation_output_tokens_per_s=float(sat.output_tokens_per_s) * replicas,
        notes=notes,
        images=images,
        speculative=speculative,
        image_tokens_per_request=image_tokens,
        ranges=ranges,
    )


def model_class(spec: ModelSpec) -> str:
    """ "moe" or "dense": the model classes of ``gpucap.calibration.ranges``."""
    return "moe" if spec.is_moe else "dense"


def slo_concurrency(
    grid: np.ndarray, point: LoadPoint, wl: Workload, bands: dict[str, Band], top: float, replicas: int
) -> tuple[float, float] | None:
    """Range of the SLO-limited concurrency, all replicas (``gpucap.calibration.ranges.slo_concurrency_range``
    on the SLO search's own grid); None without both latency bands."""
    if "ttft_ms" not in bands or "tpot_ms" not in bands:
        return None
    low, high = slo_concurrency_range(
        grid,
        np.asarray(point.ttft_s, dtype=float),
        np.asarray(point.tpot_s, dtype=float),
        ttft_slo_s=wl.ttft_slo_s,
        tpot_slo_s=wl.tpot_slo_s,
        ttft=bands["ttft_ms"],
        tpot=bands["tpot_ms"],
        top=top,
    )
    return low * replicas, high * replicas


def answer_ranges(
    bands: dict[str, Band],
    recommended: int,
    concurrency: tuple[float, float] | None,
    *,
    output_tokens_per_s: float,
    ttft_s: float,
    tpot_s: float,
    saturation: tuple[float, Band | None],
) -> dict[str, Range]:
    """Each answer with its range: ``value x (f_low, f_high)`` of its metric's band; the
    concurrency's from ``slo_concurrency``, named after the TTFT band it comes from."""
    out: dict[str, Range] = {}
    for key, value, metric in (
        ("output_tokens_per_s", output_tokens_per_s, "output_tok_s"),
        ("ttft_s", ttft_s, "ttft_ms"),
        ("tpot_s", tpot_s, "tpot_ms"),
    ):
        band = bands.get(metric)
        if band is not None and np.isfinite(value):
            out[key] = Range(value, *band.apply(value), band)
    sat_value, sat_band = saturation
    if sat_band is not None and np.isfinite(sat_value):
        out["saturation_output_tokens_per_s"] = Range(sat_value, *sat_band.apply(sat_value), sat_band)
    if concurrency is not None:
        low, high = concurrency
        t, d = bands["ttft_ms"], bands["tpot_ms"]
        band = Band(
            "concurrency",
            low / max(recommended, 1),
            high / max(recommended, 1),
            min(t.runs, d.runs),
            f"TTFT: {t.group}; TPOT: {d.group}",
            t.level,
            t.basis,
        )
        out["recommended_concurrency"] = Range(float(recommended), float(np.floor(low)), float(np.floor(high)), band)
    return out
