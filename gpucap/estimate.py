"""The estimator: one call from (model, GPUs, split, workload, SLOs, engine) to the memory
breakdown, the concurrency each resource allows, the SLO-limited recommendation, the binding
constraint and the speed at a concurrency. This is what the CLI, notebooks and planner call.

``estimate_for(Deployment, Workload, SLO, OperatingPoint)`` is the core; ``estimate(...)`` takes
the same inputs as flat keywords. Optional inputs: images per request (and their size) for
multimodal models (``gpucap.physics.vision``), and speculative decoding
(``gpucap.physics.speculative``); without them every result is the text-only,
one-token-per-step answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from gpucap.calibration.ranges import (
    Band,
    Range,
    answer_ranges,
    bands_from_coefficients,
    model_class,
    published_bands,
    range_slos,
)
from gpucap.catalog.gpus import GPU
from gpucap.catalog.models import ModelSpec
from gpucap.config import SLO, Deployment, Hardware, Images, OperatingPoint, Speculative, Workload
from gpucap.errors import DoesNotFit
from gpucap.options import route
from gpucap.physics.batching import LoadPoint, open_loop, take
from gpucap.physics.coefficients import Coefficients, front_end
from gpucap.physics.concurrency import (
    FRONT_END_SATURATED,
    concurrency_grid,
    front_end_share,
    loop_point,
    one_request_fails,
    resource_limits,
    slo_limits,
    step_parts,
    workload_requests,
)
from gpucap.physics.extras import Extras
from gpucap.physics.memory import (
    MemoryBreakdown,
    batch_slots,
    memory_limit,
)
from gpucap.physics.runs import saturation_run
from gpucap.report.notes import estimate_notes

COMM_SHARE_WARNING = 0.5  # seed 1's rule of thumb
MAX_SEARCH_CONCURRENCY = 1 << 16  # per replica


@dataclass(frozen=True)
class Estimate:
    hw: Hardware
    workload: Workload
    slo: SLO
    coefficients: Coefficients
    replicas: int
    memory: MemoryBreakdown
    # total concurrency each limit allows (gpucap.types.LIMITS: the resources, the engine's slot
    # cap, the time per step outside the GPU); None = not binding
    limits: dict[str, float | None]
    memory_limit_mean_context: float
    recommended_concurrency: int
    bottleneck: str
    binding: str  # what stops the recommendation there, by name ("TPOT SLO", "memory", ...; "" for none)
    binds: str  # ... and in one sentence with its numbers
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


def estimate(
    model: str | Path | ModelSpec,
    gpu: str | GPU,
    num_gpus: int | None = None,
    *,
    input_len: float,
    output_len: float,
    concurrency: float | None = None,
    request_rate: float | None = None,
    ttft_slo_s: float = 2.0,
    tpot_slo_s: float = 0.1,
    coefficients: Coefficients | str | Path | None = None,
    **knobs: Any,
) -> Estimate:
    """Estimate capacity and speed of ``num_gpus`` GPUs serving ``model``; ``knobs`` are any
    fields of ``Deployment`` (``tp``, ``weight_dtype``, ``engine``, ...) and of ``Workload``
    (``lengths``, ``prefix_tokens``, ...), by name (``gpucap.options.route``).

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
    ``speculative``: draft tokens, acceptance length and drafter (``gpucap.config.Speculative``;
    the physics in ``gpucap.physics.speculative``).
    ``lengths``: "varied" (traffic; steady state) or "fixed" (a long fixed-length load test after
    its first wave: prompts that share a step come back together, longer waves as groups that wait
    for each other's prompt steps; ``gpucap.physics.waves``).
    ``routing_skew``: a MoE router's expert popularity as a Zipf exponent (0: uniform;
    ``gpucap.physics.routing``); an expert-parallel load balancer is ``EngineConfig(eplb=True)``.
    Prefix caching: ``prefix_tokens`` of each prompt are a system prompt that ``prefix_share`` of
    the requests carry; ``turns`` > 1 makes each request one turn of a conversation whose prompt
    carries the earlier turns (``input_len`` is then a turn's new tokens, system prompt
    included). Cached tokens skip the prefill; the system prompt's KV is held once for all.
    """
    deploy_knobs, workload_knobs = route(knobs, Deployment, Workload)
    deployment = Deployment(model, gpu, num_gpus, **deploy_knobs)
    workload = Workload(float(input_len), float(output_len), **workload_knobs)
    return estimate_for(
        deployment,
        workload,
        SLO(ttft_s=ttft_slo_s, tpot_s=tpot_slo_s),
        OperatingPoint(concurrency=concurrency, request_rate=request_rate),
        coefficients=coefficients,
    )


@dataclass(frozen=True)
class _Search:
    """What the two concurrency searches found for one replica."""

    mem: MemoryBreakdown
    mem_limit: float  # requests the KV cache holds at the longest context
    mem_limit_mean: float  # ... at the mean context
    limits: dict[str, float | None]  # each resource's own limit (no slot cap)
    slo_point: LoadPoint
    recommended: float  # min(SLO limit, memory)
    range_ends: tuple[float, float] | None  # its range with the latency bands' factors (``range_slos``)


def _coefficients(
    coefficients: Coefficients | str | Path | None, hw: Hardware, request_rate: float | None
) -> tuple[Coefficients, dict[str, Band], Band | None]:
    """The coefficients (given, read from a calibration file, or the engine's defaults) and the
    bands of the ranges: published ones, or a calibration's own where it saved them."""
    bands = published_bands(hw.engine.engine, "poisson" if request_rate else "fixed-concurrency", model_class(hw.spec))
    sat_band = published_bands(hw.engine.engine, "saturation", model_class(hw.spec)).get("output_tok_s")
    coef = Coefficients.resolve(coefficients, hw.engine.engine)
    if isinstance(coefficients, (str, Path)):  # a calibration's own ranges, where it saved them
        fitted = bands_from_coefficients(coefficients)
        return coef, {**bands, **fitted}, fitted.get("output_tok_s", sat_band)
    return coef, bands, sat_band


def _search(
    hw: Hardware,
    coef: Coefficients,
    wl: Workload,
    slo: SLO,
    extras: Extras,
    ends: tuple[SLO, SLO] | None = None,
) -> _Search:
    """Memory's limit, every resource's limit and the SLOs' limit for one replica; with ``ends``
    (``range_slos``) the limits of those SLOs too, the recommendation's range."""
    image_tokens = extras.image_tokens(hw)
    shared, held = wl.shared_tokens, wl.prefix_share
    mem, mem_limit = memory_limit(
        hw, wl.max_context + image_tokens, extras=extras, shared_tokens=shared, shared_by=held
    )
    _, mem_limit_mean = memory_limit(
        hw, wl.mean_context + image_tokens, extras=extras, shared_tokens=shared, shared_by=held
    )
    if mem_limit < 1:
        raise DoesNotFit(
            f"{hw.spec.name} fits on {hw.gpu.key} but its KV budget ({mem.kv_budget / 2**30:.2f} GiB per GPU) "
            f"holds less than one {wl.max_context + image_tokens:.0f}-token request; use more GPUs per replica or fp8 KV",
            options=("more GPUs per replica", "fp8 KV cache"),
        )
    # one vectorized call for both searches: every resource's limit (no slot cap) and the SLOs'
    g_res, g_slo = concurrency_grid(MAX_SEARCH_CONCURRENCY), concurrency_grid(mem_limit)
    slots = float(hw.engine.max_num_seqs or np.inf)
    both = loop_point(
        hw,
        coef,
        wl,
        np.concatenate([g_res, g_slo]),
        max_running=np.concatenate([np.full(g_res.size, np.inf), np.full(g_slo.size, slots)]),
        extras=extras,
    )
    first, rest = slice(0, g_res.size), slice(g_res.size, None)
    limits = resource_limits(hw, coef, wl, slo, MAX_SEARCH_CONCURRENCY, extras=extras, point=take(both, first))
    slo_point = take(both, rest)
    asked = [slo, *(ends or ())]
    found = slo_limits(hw, coef, wl, asked, mem_limit, extras=extras, point=slo_point)
    slo_r, *range_ends = (min(v, mem_limit) for v in found)
    return _Search(
        mem, mem_limit, mem_limit_mean, limits, slo_point, slo_r, (range_ends[0], range_ends[1]) if ends else None
    )


def _bottleneck(
    hw: Hardware, coef: Coefficients, wl: Workload, slo: SLO, found: _Search, pair: LoadPoint
) -> tuple[str, str]:
    """What binds first, and a sentence when not even one request meets the SLOs. ``pair``: the
    loop at the recommendation and one request beyond it."""
    probe, beyond = take(pair, 0), take(pair, 1)
    rec = found.recommended
    if rec < 1:
        return one_request_fails(wl, slo, probe)
    if rec >= found.mem_limit:
        return "memory", ""
    if float(front_end_share(hw, coef, probe)) >= FRONT_END_SATURATED:
        return "host", ""
    if hw.engine.max_num_seqs and rec >= hw.engine.max_num_seqs and float(probe.ttft_s) <= slo.ttft_s:
        return "max_num_seqs", ""
    # the resource whose step fails first beyond the recommendation: the prompt's step when
    # TTFT is what fails there, the decode step when TPOT is
    ttft_fails = float(beyond.ttft_s) > slo.ttft_s and float(beyond.tpot_s) <= slo.tpot_s
    step = probe.prefill_step if ttft_fails else probe.decode_step
    shares = {
        "compute": float(step.compute_s),
        "hbm_bandwidth": float(step.memory_s),
        "interconnect": float(step.comm_s),
        "step_overhead": float(step.overhead_s),
    }
    return max(shares, key=lambda k: shares[k]), ""


def _what_binds(
    hw: Hardware, coef: Coefficients, slo: SLO, found: _Search, pair: LoadPoint, bottleneck: str, replicas: int
) -> tuple[str, str]:
    """Which limit stops the recommendation where it is, by a short name ("TTFT SLO", "TPOT SLO",
    "memory", "batch limit", "HTTP server") and in a sentence with its numbers: the SLO that one
    more request in flight would miss and the resource that drives the step it waits for (the
    prompt's step for TTFT, the decode step for TPOT), or memory, the batch limit or the HTTP
    server. Both empty where not even one request meets the SLOs (the notes say why)."""
    from gpucap.report.text import PLAIN_NAMES

    probe, beyond = take(pair, 0), take(pair, 1)
    rec = found.recommended
    if rec < 1:
        return "", ""
    total = f"{rec * replicas:,.0f}"
    if bottleneck == "memory":
        return "memory", (
            f"memory binds at {total}: the KV cache holds {found.mem_limit * replicas:,.0f} requests at input+output "
            f"({found.mem.kv_tokens_per_gpu:,.0f} tokens per GPU)"
        )
    if bottleneck == "host":
        return "HTTP server", (
            f"the HTTP server binds at {total}: {float(probe.requests_per_s) * replicas:,.3g} requests/s at "
            f"{front_end(hw.engine, coef).serial_s * 1e3:.3g} ms of its core each fill it"
        )
    if bottleneck == "max_num_seqs":
        return "batch limit", (
            f"the engine's batch limit binds at {total}: {hw.engine.max_num_seqs:,} requests run at once per replica "
            "(max_num_seqs); the rest wait in its queue"
        )
    tpot = float(beyond.tpot_s) > slo.tpot_s
    name, now, next_, target = (
        ("TPOT", probe.tpot_s, beyond.tpot_s, slo.tpot_s) if tpot else ("TTFT", probe.ttft_s, beyond.ttft_s, slo.ttft_s)
    )
    step = probe.decode_step if tpot else probe.prefill_step
    kind = "decode step" if tpot else "step carrying a prompt chunk"
    return f"{name} SLO", (
        f"the {name} SLO binds at {total}: {float(now) * 1e3:,.4g} of {target * 1e3:,.4g} ms, "
        f"{float(next_) * 1e3:,.4g} ms with one more request; {PLAIN_NAMES.get(bottleneck, bottleneck)} drives the "
        f"{kind}: {step_parts(step)} of its {float(step.total_s) * 1e3:,.3g} ms"
    )


def _loop_points(
    hw: Hardware, coef: Coefficients, wl: Workload, op: OperatingPoint, found: _Search, replicas: int, extras: Extras
) -> tuple[LoadPoint, LoadPoint | None]:  # fmt: skip
    """In one vectorized call: the closed loop at the recommendation and one request beyond it
    (the engine's slots), and, unless the operating point is a rate, at the operating point's
    concurrency per replica (the slots memory holds): ``(pair, at)``, ``at`` None for a rate."""
    rec = max(found.recommended, 1.0)
    slots = float(hw.engine.max_num_seqs or np.inf)
    concurrency, caps = [rec, rec + 1.0], [slots, slots]
    if op.request_rate is None:
        concurrency.append(_closed_concurrency(op, found, replicas) / replicas)
        caps.append(batch_slots(hw, found.mem_limit))
    points = loop_point(hw, coef, wl, np.array(concurrency), max_running=np.array(caps), extras=extras)
    return take(points, slice(0, 2)), None if op.request_rate is not None else take(points, 2)


def _closed_concurrency(op: OperatingPoint, found: _Search, replicas: int) -> float:
    """The concurrency (all replicas) a closed-loop operating point stands for: the one asked,
    else the recommendation (at least one request a replica)."""
    return float(op.concurrency) if op.concurrency is not None else max(found.recommended, 1.0) * replicas


def _speed_at(
    hw: Hardware, coef: Coefficients, wl: Workload, op: OperatingPoint, found: _Search, replicas: int,
    extras: Extras, closed: LoadPoint | None,
) -> tuple[LoadPoint, float, list[str]]:  # fmt: skip
    """One replica at the operating point (open loop at the rate, closed loop at the
    concurrency, else at the recommendation), the concurrency it stands for (all replicas) and
    what to say about it: a rate beyond the service rate, a link that takes most of the step, a
    concurrency beyond what memory holds. ``closed``: the closed loop at that concurrency
    (``_loop_points``), for an operating point that is not a rate."""
    cap = batch_slots(hw, found.mem_limit)
    notes = []
    if op.request_rate is not None:
        at = open_loop(
            hw,
            coef,
            workload_requests(wl, max_running=cap, extras=extras),
            request_rate=op.request_rate / replicas,
        )
        c_total = float(at.concurrency) * replicas
        if not np.isfinite(c_total):
            notes.append(
                f"{op.request_rate:g} requests/s exceed the service rate {float(at.requests_per_s) * replicas:.3g}/s: "
                "the queue grows without bound"
            )
    else:
        assert closed is not None
        c_total, at = _closed_concurrency(op, found, replicas), closed
    share = float(at.decode_step.comm_share)
    if share > COMM_SHARE_WARNING:
        notes.append(f"communication is {share:.0%} of the step (> 50%): fewer GPUs per replica or a faster link")
    if op.concurrency is not None and op.concurrency > found.mem_limit * replicas:
        notes.append(
            f"concurrency {op.concurrency:g} exceeds what memory holds ({found.mem_limit * replicas:g}); "
            "the rest wait in the queue"
        )
    return at, c_total, notes


def estimate_for(
    deployment: Deployment,
    workload: Workload,
    slo: SLO | None = None,
    at: OperatingPoint | None = None,
    *,
    coefficients: Coefficients | str | Path | None = None,
) -> Estimate:
    """``estimate`` on config objects (``gpucap.config``): the deployment's memory, each
    resource's limit, the SLO-limited recommendation, what binds first, and the speed at the
    operating point. Raises ``DoesNotFit`` when the weights leave no room."""
    slo, at = slo or SLO(), at or OperatingPoint()
    if slo.statistic != "mean":
        raise ValueError(
            f"the estimator predicts means; for {slo.statistic} SLOs use the planner (gpucap.plan), whose queueing "
            "model gives the tail"
        )
    hw = deployment.resolve()
    _, convention = deployment.split()
    wl = workload
    extras = Extras(wl.images(deployment.encoder_tp_mode), deployment.speculative)
    image_tokens = extras.image_tokens(hw)
    hw.spec.check_context(wl.max_context - wl.output_len + image_tokens, wl.output_len)
    replicas = deployment.replicas(hw.layout)
    coef, bands, sat_band = _coefficients(coefficients, hw, at.request_rate)
    found = _search(hw, coef, wl, slo, extras, range_slos(slo, bands))
    rec = found.recommended
    pair, closed = _loop_points(hw, coef, wl, at, found, replicas, extras)
    bottleneck, why = _bottleneck(hw, coef, wl, slo, found, pair)
    binding, binds = _what_binds(hw, coef, slo, found, pair, bottleneck, replicas)
    notes = [convention] if convention else []
    notes += estimate_notes(hw, wl, deployment, found.mem, extras, image_tokens, why)
    point, c_total, speed_notes = _speed_at(hw, coef, wl, at, found, replicas, extras, closed)
    # all at once: the prefix cache is not counted (the notes say so)
    served = workload_requests(wl, max_running=batch_slots(hw, found.mem_limit), extras=extras)
    sat = saturation_run(hw, coef, replace(served, cached_tokens=0.0), num_prompts=np.inf)
    notes += speed_notes
    limits: dict[str, float | None] = {"memory": found.mem_limit * replicas}
    limits.update({k: None if v is None else v * replicas for k, v in found.limits.items()})
    limits["max_num_seqs"] = hw.engine.max_num_seqs * replicas if hw.engine.max_num_seqs else None
    ranges = answer_ranges(
        bands,
        int(rec * replicas),
        None if found.range_ends is None else (found.range_ends[0] * replicas, found.range_ends[1] * replicas),
        output_tokens_per_s=float(point.output_tokens_per_s) * replicas,
        ttft_s=float(point.ttft_s),
        tpot_s=float(point.tpot_s),
        saturation=(float(sat.output_tokens_per_s) * replicas, sat_band),
    )
    return Estimate(
        hw=hw,
        workload=wl,
        slo=slo,
        coefficients=coef,
        replicas=replicas,
        memory=found.mem,
        limits=limits,
        memory_limit_mean_context=found.mem_limit_mean * replicas,
        recommended_concurrency=int(rec * replicas),
        bottleneck=bottleneck,
        binding=binding,
        binds=binds,
        concurrency=c_total,
        at=point,
        saturation_output_tokens_per_s=float(sat.output_tokens_per_s) * replicas,
        notes=notes,
        images=extras.images,
        speculative=extras.speculative,
        image_tokens_per_request=image_tokens,
        ranges=ranges,
    )
