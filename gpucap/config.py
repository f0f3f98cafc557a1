"""What is asked: the deployment (model, GPUs, split, formats, engine knobs), the workload (request
lengths, images, prefix cache), the SLOs and the operating point, as frozen dataclasses that can
be cache keys and swept with ``dataclasses.replace``. ``Deployment.resolve()`` looks the names up
in the catalog and fills the engine's defaults: the ``Hardware`` of one replica, with no field
left to a default.

Parallel layout (``Layout``)
----------------------------
How one replica of a model is split over GPUs: tensor, pipeline, expert and attention-data
parallelism.

A replica uses ``tp x pp x attn_dp`` GPUs. Attention and dense layers are split ``tp`` ways and
copied ``attn_dp`` times (each copy serves its own requests, as TensorRT-LLM "DEP" and SGLang
``--enable-dp-attention`` do); routed experts are spread over all ``tp x attn_dp`` GPUs of a
pipeline stage: ``ep`` ways by expert and ``tp x attn_dp / ep`` ways inside each expert. Layers
are split ``pp`` ways.

Two conventions name the same split (``split_of`` reads both):

- gpucap's and TensorRT-LLM's: ``tp`` is the attention split, ``attn_dp`` the number of its
  copies; TensorRT-LLM's "DEP8" is tp 1, ep 8, attn_dp 8 on 8 GPUs.
- SGLang's ``--tp 8 --dp 8 --enable-dp-attention``: ``tp`` counts all the GPUs of the group and
  ``dp`` the attention copies inside it, each ``tp / dp`` GPUs wide: gpucap's tp 1, attn_dp 8.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpucap.catalog.gpus import GPU, get_gpu
from gpucap.catalog.lookup import load_model
from gpucap.catalog.models import ModelSpec
from gpucap.catalog.vision import VisionEncoder
from gpucap.options import option
from gpucap.types import ENGINES, FRONT_ENDS, LENGTHS, MOE_BACKENDS, SAMPLERS, STATISTICS
from gpucap.units import KV_BYTES_PER_ELEMENT, WEIGHT_BYTES_PER_PARAM, GiB

MAX_ROUTING_SKEW = 3.0  # a Zipf exponent past which one expert takes nearly every token
ENCODER_TP_MODES = ("weights", "data")


VLLM_UTILIZATION = 0.92  # vLLM's gpu_memory_utilization default since v0.20 (vllm/config/cache.py)
VLLM_UTILIZATION_BEFORE_0_20 = 0.9
# CUDA context, NCCL buffers and allocator slack, where an engine's budget counts them
RUNTIME_OVERHEAD_BYTES = 1.0 * GiB
# What vLLM's profiling run adds outside PyTorch (cuBLAS and attention workspaces): "0.07 GiB for
# non-torch memory" in the breakdown line's first published log (vLLM PR #21489, tp 1).
VLLM_NON_TORCH_BYTES = 0.07 * GiB
# NCCL's buffers, which the communicator allocates at its first collective (lazy connection, the
# default since NCCL 2.22): inside vLLM's profiling run, so charged at tp x pp x attn_dp > 1. The
# smallest figure vLLM logs for them: non-torch memory 0.21 GiB at tp 8 (vLLM 0.10.2, 8 x L40S),
# 0.20-0.43 GiB at tp 2-16 (V0: vllm-project/vllm#13061, #16570, PR #14447); larger on some boxes
# (1.38 GiB at tp 2 on H200s, 1.70 at tp 4 on RTX PRO 6000s: data/memory).
VLLM_NCCL_BYTES = 0.25 * GiB


@dataclass(frozen=True)
class EngineConfig:
    """Engine knobs. ``None`` means the engine's own default for this GPU (``resolve``).

    memory_basis: "total" when the fraction applies to the whole GPU (vLLM
    ``gpu_memory_utilization``, SGLang ``mem_fraction_static``), "free" when it applies to what
    is left after weights and activations (TensorRT-LLM ``free_gpu_memory_fraction``).

    overlap_host: the host's per-step work (scheduling, sampling, detokenizing) runs while the GPU
    computes the step before, so a step lasts ``max(GPU, host)`` instead of their sum
    (``gpucap.physics.steptime.combine``): vLLM's async scheduling (default since v0.14.0, PR #27614; off in
    vLLM 0.13 and earlier), SGLang's overlap scheduler, TensorRT-LLM's overlap scheduler. ``None``
    is on, as today's versions of all three run.
    front_end: "http" or "offline" (``FRONT_ENDS``): whether requests pass the engine's HTTP
    server, whose per-request costs (``Coefficients.t_frontend_s``, ``t_request_s``) apply.
    prefix_caching: vLLM's automatic prefix caching (on by default in its V1 engine;
    ``--no-enable-prefix-caching`` turns it off). Besides shared prefixes, it decides what a
    preemption costs: with it, the full blocks a preempted request computed stay hashed in the
    free pool and hit again when it resumes; without it, the request recomputes them all
    (``gpucap.queueing.engine.Engine._preempt``).
    """

    engine: str = option(
        "vllm",
        choices=ENGINES,
        help="vLLM, SGLang or TensorRT-LLM: their batch limits, memory reservations and per-step overheads",
    )
    max_num_seqs: int | None = option(None, kind="positive_int", help="most requests running at once")
    max_num_batched_tokens: int | None = option(None, kind="positive_int", help="tokens a step takes at most")
    gpu_memory_utilization: float | None = option(
        None,
        kind="positive_float",
        help="share of GPU memory the engine takes (vLLM, SGLang: of the whole GPU; TensorRT-LLM: of what is free "
        "after the weights)",
    )
    block_size: int | None = option(None, kind="positive_int", help="tokens a KV block holds")
    cuda_graphs: bool = option(
        True,
        kind="no_switch",
        help="off (--enforce-eager) frees the CUDA-graph memory pool but adds kernel launch time per layer",
    )
    runtime_overhead_bytes: float | None = None  # non-torch memory charged to the KV budget (resolve)
    # CUDA-graph pools: captures logged 0.09-3.45 GiB; vLLM's estimate charged from 0.20 logged
    # 0.13-1.2 GiB (data/memory/README.md). Kept at 1 GiB while the activation term falls short.
    cuda_graph_bytes: float = 1.0 * GiB
    kv_cache_memory_bytes: float | None = None  # vLLM --kv-cache-memory: the KV budget per GPU, as given
    nccl_bytes: float | None = None  # NCCL buffers charged to the KV budget when GPUs communicate (resolve)
    overlap_host: bool | None = option(
        None, kind="no_switch", help="host work between steps, not beside them (vLLM 0.13 and earlier)"
    )
    front_end: str = "http"
    # an expert-parallel load balancer (--enable-eplb): gpucap.physics.routing.ep_imbalance
    eplb: bool = option(
        False, kind="switch", flag="--enable-eplb", help="an expert-parallel load balancer evens the GPUs' expert loads"
    )
    # how vLLM's sampler runs at its profiling run (SAMPLERS): "logits" for the V2 model runner,
    # "in-place" or "sort" for the V1 runner's top-k/top-p (gpucap.physics.activations.sampler_bytes_per_gpu)
    sampler: str = option(
        "logits",
        choices=SAMPLERS,
        help="vLLM's sampler at start-up: logits (V2 runner, the default), in-place (V1 runner), "
        "sort (V1 with PyTorch's sort: 0.11.1-0.16, or 0.10-0.11.0 without FlashInfer)",
    )
    # vLLM --moe-backend (MOE_BACKENDS): the MXFP4 experts' padding follows it
    moe_backend: str = option(
        "auto",
        choices=MOE_BACKENDS,
        help="as vLLM's option; sets how MXFP4 experts are padded (auto: the GPU's kernel)",
    )
    prefix_caching: bool = True

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"unknown engine {self.engine!r}; use one of {', '.join(ENGINES)}")
        if self.front_end not in FRONT_ENDS:
            raise ValueError(f"unknown front end {self.front_end!r}; use one of {', '.join(FRONT_ENDS)}")
        if self.sampler not in SAMPLERS:
            raise ValueError(f"unknown sampler {self.sampler!r}; use one of {', '.join(SAMPLERS)}")
        if self.moe_backend not in MOE_BACKENDS:
            raise ValueError(f"unknown moe_backend {self.moe_backend!r}; use one of {', '.join(MOE_BACKENDS)}")
        if self.gpu_memory_utilization is not None and not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        for name in ("runtime_overhead_bytes", "kv_cache_memory_bytes", "nccl_bytes"):
            v = getattr(self, name)
            if v is not None and not (math.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be a finite number of bytes >= 0, got {v}")
        for name in ("max_num_seqs", "max_num_batched_tokens", "block_size"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise ValueError(f"{name} must be >= 1, got {v}")

    @property
    def memory_basis(self) -> str:
        return "free" if self.engine == "trtllm" else "total"

    def resolve(self, gpu: GPU) -> EngineConfig:
        """Fill ``None`` knobs with the engine's defaults for ``gpu``.

        vLLM (``EngineArgs.get_batch_defaults``): API server on GPUs with >= 160 GiB (B200, MI300X;
        v0.31 and v0.33, not v0.21): 1024 sequences, 16384 batched tokens; on GPUs with >= 70 GiB
        that are not A100 (v0.10+): 1024 and 8192; otherwise 256 and 2048.
        gpu_memory_utilization 0.92 (``vllm/config/cache.py`` since v0.20, which also counts the
        CUDA-graph estimate in the budget; 0.9 before), block 16.
        SGLang (``server_args.py``): chunked_prefill_size 8192 on >= 60 GB GPUs (4096 / 2048 on
        smaller), mem_fraction_static ~0.88, page size 1; running requests capped by memory,
        taken here as 1024.
        TensorRT-LLM (``BuildConfig``): max_batch_size 2048, max_num_tokens 8192,
        free_gpu_memory_fraction 0.9, tokens_per_block 32.

        Runtime overhead, the non-torch memory charged to the KV budget: vLLM takes its memory
        snapshot after the CUDA context and the distributed environment (NCCL, custom all-reduce
        buffers) exist (``Worker.init_device``, v0.11+: "Initialize the distributed environment
        BEFORE taking memory snapshot"), so only what its profiling run adds is charged:
        ``VLLM_NON_TORCH_BYTES``, and where GPUs communicate the NCCL buffers its first
        all-reduce allocates, ``VLLM_NCCL_BYTES``. SGLang and TensorRT-LLM:
        ``RUNTIME_OVERHEAD_BYTES`` (CUDA context, NCCL buffers, allocator slack), no NCCL term.
        """
        big = gpu.memory_bytes >= 70 * GiB
        if self.engine == "vllm":
            a100 = gpu.key.upper().startswith("A100")
            huge = gpu.memory_bytes >= 160 * GiB
            seqs, tokens = (1024, 16384) if huge else (1024, 8192) if big and not a100 else (256, 2048)
            util, block, runtime, nccl = VLLM_UTILIZATION, 16, VLLM_NON_TORCH_BYTES, VLLM_NCCL_BYTES
        elif self.engine == "sglang":
            seqs, util, block, runtime, nccl = 1024, 0.88, 1, RUNTIME_OVERHEAD_BYTES, 0.0
            tokens = 8192 if gpu.memory_bytes >= 60 * GiB else 4096 if gpu.memory_bytes >= 35 * GiB else 2048
        else:
            seqs, tokens, util, block, runtime, nccl = 2048, 8192, 0.9, 32, RUNTIME_OVERHEAD_BYTES, 0.0
        return dataclasses.replace(
            self,
            max_num_seqs=self.max_num_seqs or seqs,
            max_num_batched_tokens=self.max_num_batched_tokens or tokens,
            gpu_memory_utilization=self.gpu_memory_utilization or util,
            block_size=self.block_size or block,
            runtime_overhead_bytes=runtime if self.runtime_overhead_bytes is None else self.runtime_overhead_bytes,
            nccl_bytes=nccl if self.nccl_bytes is None else self.nccl_bytes,
            overlap_host=True if self.overlap_host is None else self.overlap_host,
        )


@dataclass(frozen=True)
class Layout:
    tp: int = 1
    pp: int = 1
    ep: int = 1
    attn_dp: int = 1

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "ep", "attn_dp"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if (self.tp * self.attn_dp) % self.ep:
            raise ValueError(
                f"ep={self.ep} must divide tp x attn_dp = {self.tp * self.attn_dp} "
                "(experts are spread over the GPUs of one pipeline stage)"
            )

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.pp * self.attn_dp

    @property
    def stage_gpus(self) -> int:
        """GPUs of one pipeline stage: the ones the routed experts are spread over."""
        return self.tp * self.attn_dp

    def check(self, spec: ModelSpec) -> None:
        """Raise a clear error when the model cannot be split this way."""
        if spec.num_heads % self.tp:
            raise ValueError(
                f"tp={self.tp} does not divide {spec.name}'s {spec.num_heads} attention heads; "
                f"use a tp among {[t for t in (1, 2, 4, 8, 16) if spec.num_heads % t == 0]}"
            )
        kv = spec.num_kv_heads
        if not spec.is_mla and kv % self.tp and self.tp % kv:
            raise ValueError(f"tp={self.tp} and {spec.name}'s {kv} KV heads do not divide one another")
        if self.pp > spec.num_layers:
            raise ValueError(f"pp={self.pp} exceeds {spec.name}'s {spec.num_layers} layers")
        if self.ep > 1 and not spec.is_moe:
            raise ValueError(f"ep={self.ep} given but {spec.name} is not a mixture-of-experts model")
        if spec.is_moe and spec.num_experts % self.ep:
            raise ValueError(f"ep={self.ep} does not divide {spec.name}'s {spec.num_experts} experts")

    def kv_heads_per_gpu(self, spec: ModelSpec) -> float:
        """``max(1, num_kv_heads / tp)``: KV heads are replicated when tp exceeds them."""
        return max(1.0, spec.num_kv_heads / self.tp)


def split_of(num_gpus: int | None, *, tp: int, pp: int = 1, ep: int = 1, attn_dp: int = 1) -> tuple[Layout, str]:
    """The replica's Layout from parallel degrees in either convention (module docstring), and
    a note when SGLang's was read: with attention data parallelism, ``num_gpus`` given, not a
    multiple of ``tp x pp x attn_dp`` but a multiple of ``tp x pp``, and ``attn_dp`` dividing
    ``tp``, the degrees are SGLang's (``--tp tp --dp attn_dp --enable-dp-attention``) and the
    attention split is ``tp / attn_dp``."""
    n = num_gpus or 0
    sglang = attn_dp > 1 and n > 0 and n % (tp * pp * attn_dp) != 0 and n % (tp * pp) == 0 and tp % attn_dp == 0
    if not sglang:
        return Layout(tp=tp, pp=pp, ep=ep, attn_dp=attn_dp), ""
    note = (
        f"tp={tp} with attn_dp={attn_dp} on {num_gpus} GPUs read as SGLang's --tp {tp} --dp {attn_dp} "
        f"--enable-dp-attention: {attn_dp} attention copies of tp={tp // attn_dp} over {tp * pp} GPUs per replica"
    )
    return Layout(tp=tp // attn_dp, pp=pp, ep=ep, attn_dp=attn_dp), note


@dataclass(frozen=True)
class Hardware:
    """What the step runs on: model, GPU, split, formats, engine."""

    spec: ModelSpec
    gpu: GPU
    layout: Layout
    weight_dtype: str
    kv_dtype: str
    engine: EngineConfig


@dataclass(frozen=True)
class Images:
    """Images each request carries.

    ``size_px``: the side of a square image or ``(height, width)``; ``None`` takes the encoder's
    native size (Gemma 3: 896, Llama 4: one 336-px tile); Qwen2.5-VL needs a size.
    ``encoder_tp_mode``: vLLM's ``--mm-encoder-tp-mode``: ``"weights"`` (default) splits each
    encoder layer over the tp GPUs like the language model, ``"data"`` keeps the whole encoder
    on every GPU and spreads the images over them.
    """

    per_request: float = 1.0
    size_px: int | tuple[int, int] | None = None
    encoder_tp_mode: str = "weights"

    def __post_init__(self) -> None:
        n = self.per_request
        if isinstance(n, bool) or not isinstance(n, (int, float)) or not (n >= 0 and math.isfinite(n)):
            raise ValueError(f"images_per_request must be a number >= 0, got {n!r}; use 0 for text-only requests")
        size = self.size_px
        sides = size if isinstance(size, tuple) else (size, size)
        if size is not None and not (
            len(sides) == 2 and all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in sides)
        ):
            raise ValueError(
                f"image_size_px must be a positive integer (a square side) or (height, width), got {size!r}"
            )
        if self.encoder_tp_mode not in ENCODER_TP_MODES:
            raise ValueError(
                f"encoder_tp_mode must be one of {', '.join(ENCODER_TP_MODES)}, got {self.encoder_tp_mode!r}"
            )

    def height_width(self, enc: VisionEncoder) -> tuple[int, int]:
        """The image size in pixels, the encoder's native size when none is given."""
        if self.size_px is None:
            if not enc.image_size_px:
                raise ValueError(
                    f"image_size_px is needed for a {enc.kind} encoder (it reads images at their own "
                    "resolution); give e.g. image_size_px=1344"
                )
            return enc.image_size_px, enc.image_size_px
        if isinstance(self.size_px, tuple):
            return self.size_px
        return self.size_px, self.size_px


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


@dataclass(frozen=True)
class Workload:
    """Request lengths (text tokens), the images each request carries, and its prefix cache.

    ``input_len`` counts text tokens; images add their tokens on top (``gpucap.physics.vision``).
    ``image_size_px``: side of a square image or (height, width); None = the encoder's native
    size (Qwen2.5-VL reads images at their own size and needs one). ``lengths``: "varied"
    (traffic whose requests differ in length: steady state) or "fixed" (a load test with one
    length for all requests: the closed loop runs in waves, ``gpucap.physics.waves``).
    """

    input_len: float = option(kind="positive_float", help="prompt tokens per request")
    output_len: float = option(kind="positive_float", help="output tokens per request")
    images_per_request: float = option(0.0, kind="float", help="images each request carries (multimodal)")
    image_size_px: int | tuple[int, int] | None = option(
        None, kind="image_size", help="image side, or HxW like 1080x1920"
    )
    lengths: str = option(
        "varied",
        choices=LENGTHS,
        help="varied: traffic whose lengths differ (steady state); fixed: a load test's equal lengths (the closed "
        "loop runs in waves)",
    )
    prefix_tokens: float = option(
        0.0,
        kind="float",
        help="a system prompt every request starts with (inside the input tokens), held once in the prefix cache: "
        "its prefill is skipped and its KV stored once (vLLM --enable-prefix-caching, on by default); 0: none",
    )
    prefix_share: float = option(1.0, kind="float", help="share of requests that carry it (default 1)")
    turns: int = option(
        1, kind="positive_int", help="turns per conversation; each turn's prompt carries the earlier ones"
    )

    def __post_init__(self) -> None:
        if self.lengths not in LENGTHS:
            raise ValueError(f"lengths must be one of {', '.join(LENGTHS)}, got {self.lengths!r}")
        for name in ("input_len", "output_len"):
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
class SLO:
    """Latency targets: time to first token and time per output token, in seconds, at
    ``statistic`` over the requests (``gpucap.types.STATISTICS``). The estimator's closed loop
    predicts means; the planner applies any statistic to rate targets (its queueing model)."""

    ttft_s: float = 2.0
    tpot_s: float = 0.1
    statistic: str = "mean"

    def __post_init__(self) -> None:
        for name in ("ttft_s", "tpot_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not (isinstance(v, (int, float)) and v > 0 and np.isfinite(v)):
                raise ValueError(f"{name.replace('_s', '_slo_s')} must be a positive number, got {v!r}")
        if self.statistic not in STATISTICS:
            raise ValueError(f"stat must be one of {', '.join(STATISTICS)}, got {self.statistic!r}")

    def __str__(self) -> str:
        return f"{self.statistic} TTFT <= {self.ttft_s:g} s, TPOT <= {self.tpot_s * 1e3:g} ms"


@dataclass(frozen=True)
class OperatingPoint:
    """Where the speed is evaluated: ``concurrency`` requests kept in flight (closed loop), or
    ``request_rate`` arrivals per second (open loop), both across all replicas; neither: at the
    recommended concurrency."""

    concurrency: float | None = None
    request_rate: float | None = None

    def __post_init__(self) -> None:
        if self.concurrency is not None and self.request_rate is not None:
            raise ValueError("give concurrency (closed loop) or request_rate (open loop), not both")
        if self.concurrency is not None and not self.concurrency > 0:
            raise ValueError(f"concurrency must be positive, got {self.concurrency}")
        if self.request_rate is not None and not self.request_rate > 0:
            raise ValueError(f"request_rate must be positive, got {self.request_rate}")


@dataclass(frozen=True)
class Deployment:
    """What is deployed: ``num_gpus`` GPUs of one kind serving ``model`` as replicas of
    ``tp x pp x attn_dp`` GPUs (either convention, see ``split_of``), the formats, the engine and
    its knobs. ``weight_dtype`` None: the checkpoint's own format. ``num_gpus`` None: one replica.
    ``routing_skew``: Zipf exponent of a MoE router's expert popularity
    (``gpucap.physics.routing``). ``encoder_tp_mode``: how a vision encoder is split (``Images``)."""

    model: str | Path | ModelSpec = option(help="catalog id (see `gpucap models`) or path to a config.json")
    gpu: str | GPU = option(
        help="a GPU of the catalog (`gpucap gpus`; data/gpus.csv: datasheet memory, FLOP/s, HBM and link bandwidth)"
    )
    num_gpus: int | None = option(
        None,
        kind="positive_int",
        help="GPUs in all; they form num_gpus / (tp x pp x attn_dp) replicas, each serving its own requests",
    )
    tp: int = option(
        1,
        kind="positive_int",
        help="tensor parallelism: GPUs one layer is split over (two all-reduces per layer per step)",
    )
    pp: int = option(1, kind="positive_int", help="pipeline parallelism: stages the layers are split into")
    ep: int = option(1, kind="positive_int", help="expert parallelism (MoE models): GPUs the experts are spread over")
    attn_dp: int = option(
        1,
        kind="positive_int",
        help="attention data-parallel copies: TensorRT-LLM's DEP8 is --tp 1 --ep 8 --attn-dp 8; SGLang's "
        "--tp 8 --dp 8 --enable-dp-attention is --tp 8 --attn-dp 8 --num-gpus 8 (read as its convention)",
    )
    weight_dtype: str | None = option(
        None,
        choices=list(WEIGHT_BYTES_PER_PARAM),
        help="the weights' format; default: the checkpoint's own (its quantization_config; bf16 for most)",
    )
    kv_dtype: str = option(
        "auto",
        choices=list(KV_BYTES_PER_ELEMENT),
        help="the KV cache's format: auto is the model's own dtype, fp8 halves it",
    )
    engine: str | EngineConfig = "vllm"
    gpu_file: str | Path | None = option(None, help="CSV of extra GPUs (columns of data/gpus.csv)")
    routing_skew: float = option(
        0.0, kind="float", help="MoE expert popularity as a Zipf exponent (0 uniform; ~0.5 DeepSeek-V3)"
    )
    encoder_tp_mode: str = option(
        "weights", flag="--mm-encoder-tp-mode", choices=["weights", "data"], help="as vLLM's option"
    )

    def split(self) -> tuple[Layout, str]:
        """The replica's layout, and a note when SGLang's convention was read (``split_of``)."""
        return split_of(self.num_gpus, tp=self.tp, pp=self.pp, ep=self.ep, attn_dp=self.attn_dp)

    def resolve(self) -> Hardware:
        """The checked ``Hardware`` of one replica: catalog entries looked up, the layout checked
        against the model, the engine's defaults for this GPU filled in. ``weight_dtype`` None:
        the checkpoint's own format (``ModelSpec.checkpoint_dtype``); ``routing_skew``: Zipf
        exponent of a MoE router's expert popularity (``gpucap.physics.routing``)."""
        layout, _ = self.split()
        spec = load_model(self.model)
        if self.routing_skew:
            if not (spec.is_moe and 0 < self.routing_skew <= MAX_ROUTING_SKEW):
                raise ValueError(
                    f"routing_skew={self.routing_skew:g}: give a number in (0, {MAX_ROUTING_SKEW:g}] for a "
                    f"mixture-of-experts model ({spec.name} is {'MoE' if spec.is_moe else 'dense'}); DeepSeek-V3's "
                    "published popularity is ~0.52"
                )
            spec = dataclasses.replace(spec, routing_skew=float(self.routing_skew))
        g = get_gpu(self.gpu, self.gpu_file)
        if g.is_amd and self.kv_dtype == "fp8_e5m2":
            raise ValueError(
                f"kv_dtype fp8_e5m2 does not run on {g.key}: vLLM's ROCm KV-cache kernels take fp8 (= fp8_e4m3) "
                "only (csrc/quantization/fp8/amd/quant_utils.cuh); use kv_dtype fp8 or auto"
            )
        layout.check(spec)
        eng = EngineConfig(engine=self.engine) if isinstance(self.engine, str) else self.engine
        return Hardware(
            spec=spec,
            gpu=g,
            layout=layout,
            weight_dtype=self.weight_dtype or spec.checkpoint_dtype,
            kv_dtype=self.kv_dtype,
            engine=eng.resolve(g),
        )

    def replicas(self, layout: Layout) -> int:
        """Replicas the GPUs form; a count that is not a multiple of the replica's GPUs is an error
        that names the nearest count that is."""
        per_replica = layout.gpus_per_replica
        num_gpus = self.num_gpus or per_replica
        if num_gpus % per_replica:
            degrees = "tp x pp" + (" x attn_dp" if layout.attn_dp > 1 else "")
            raise ValueError(
                f"num_gpus={num_gpus} is not a multiple of the GPUs per replica, {degrees} = {per_replica}: "
                f"use {per_replica * max(num_gpus // per_replica, 1)} GPUs or another split"
            )
        return num_gpus // per_replica


def hardware(model: str | Path | ModelSpec, gpu: str | GPU, **knobs: Any) -> Hardware:
    """One replica's checked ``Hardware``: ``Deployment(model, gpu, **knobs).resolve()``, the
    knobs named as ``Deployment``'s fields (``tp``, ``weight_dtype``, ``engine``, ...)."""
    return Deployment(model, gpu, **knobs).resolve()
