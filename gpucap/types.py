"""The words gpucap's inputs and results use, one list per concept. Every module that checks or
names one of these takes it from here, so a statistic, a resource or an engine is spelled the
same in the physics, the planner, the calibration, the CLI and the pages."""

from __future__ import annotations

from typing import Literal

# Serving engines (gpucap.config.EngineConfig).
Engine = Literal["vllm", "sglang", "trtllm"]
ENGINES: tuple[Engine, ...] = ("vllm", "sglang", "trtllm")
# engines whose scheduler runs prompts first: a step with prompt chunks decodes nothing (SGLang,
# ``gpucap.queueing.scheduler``); the others decode beside them
PREFILL_FIRST_ENGINES = frozenset({"sglang"})

# How requests reach the engine: through its OpenAI-compatible HTTP server ("http": vllm serve,
# SGLang's launch_server, trtllm-serve), or handed to it in-process ("offline": trtllm-bench,
# vllm bench throughput), with no front end at all.
FrontEndKind = Literal["http", "offline"]
FRONT_ENDS: tuple[FrontEndKind, ...] = ("http", "offline")

# How vLLM's sampler runs at its profiling run, which sets the memory it reserves for it:
# "logits" (the V2 model runner, today's default: logits only), "in-place" (the V1 runner with
# FlashInfer's sampler or the Triton top-k/top-p of v0.17+) or "sort" (the V1 runner with
# PyTorch's sort: v0.11.1-v0.16 by default, v0.10-v0.11.0 without FlashInfer). gpucap.physics.memory.
SamplerKind = Literal["logits", "in-place", "sort"]
SAMPLERS: tuple[SamplerKind, ...] = ("logits", "in-place", "sort")

# vLLM's --moe-backend, of the choices that set how MXFP4 experts are stored
# (gpucap.physics.memory.mxfp4_expert_padding): "auto" is the kernel vLLM picks for the GPU.
MoeBackend = Literal["auto", "marlin", "triton", "flashinfer_trtllm"]
MOE_BACKENDS: tuple[MoeBackend, ...] = ("auto", "marlin", "triton", "flashinfer_trtllm")

# Request lengths of the load: "varied" (desynchronized traffic: the steady state of
# gpucap.physics.batching.closed_loop) or "fixed" (a load test with one length for all, whose
# closed loop runs in waves: gpucap.physics.waves.wave_loop).
LengthKind = Literal["varied", "fixed"]
LENGTHS: tuple[LengthKind, ...] = ("varied", "fixed")

# The resources whose own share of the step limits the concurrency (Estimate.limits keys).
Resource = Literal["memory", "compute", "hbm_bandwidth", "interconnect", "host"]
RESOURCES: tuple[Resource, ...] = ("memory", "compute", "hbm_bandwidth", "interconnect", "host")
# What Estimate.bottleneck may name: a resource, the engine's slot cap, the time per step outside
# the GPU, or, when not even one request meets them, the SLO that fails. Every name but the two
# SLOs is also a key of Estimate.limits.
Bottleneck = Literal[
    "memory",
    "compute",
    "hbm_bandwidth",
    "interconnect",
    "host",
    "max_num_seqs",
    "step_overhead",
    "ttft_slo",
    "tpot_slo",
]
BOTTLENECKS: tuple[Bottleneck, ...] = (*RESOURCES, "max_num_seqs", "step_overhead", "ttft_slo", "tpot_slo")

# Statistics of a latency over the requests of a run, named as `vllm bench serve` names them
# (mean_*, median_*, p90_*, ...): the SLO statistic of the planner, the queueing model's
# outputs, the simulation's summaries and the load-test readers all use these names.
Statistic = Literal["mean", "median", "p90", "p95", "p99"]
STATISTICS: tuple[Statistic, ...] = ("mean", "median", "p90", "p95", "p99")
# the statistics an SLO-limited concurrency is fitted at: the closed forms predict means (and
# medians, read as such), not tails (gpucap.calibration.limits)
LIMIT_STATISTICS: tuple[Statistic, ...] = ("mean", "median")
# The quantile each statistic but the mean stands for.
QUANTILES: dict[str, float] = {"median": 0.50, "p90": 0.90, "p95": 0.95, "p99": 0.99}
