"""Engine knobs (``EngineConfig``) and the defaults of the engines they fall back to for a GPU."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from gpucap.catalog.gpus import GPU
from gpucap.options import Control, option
from gpucap.types import ENGINES, FRONT_ENDS, MOE_BACKENDS, PREFILL_FIRST_ENGINES, SAMPLERS
from gpucap.units import GiB

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
        page=Control("engine"),
        help="vLLM, SGLang or TensorRT-LLM: their batch limits, memory reservations and per-step overheads",
    )
    max_num_seqs: int | None = option(None, kind="positive_int", help="most requests running at once")
    max_num_batched_tokens: int | None = option(None, kind="positive_int", help="tokens a step takes at most")
    gpu_memory_utilization: float | None = option(
        None,
        kind="positive_float",
        page=Control("GPU memory share", (0.5, 1.0), "slider"),
        help="share of GPU memory the engine takes (vLLM, SGLang: of the whole GPU; TensorRT-LLM: of what is free "
        "after the weights)",
    )
    block_size: int | None = option(None, kind="positive_int", help="tokens a KV block holds")
    cuda_graphs: bool = option(
        True,
        kind="no_switch",
        page=Control("CUDA graphs"),
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
    def prefill_first(self) -> bool:
        """A step that carries prompt chunks runs no decodes (``gpucap.types.PREFILL_FIRST_ENGINES``:
        SGLang's scheduler, as the step-level simulation's ``gpucap.queueing.scheduler`` runs it)."""
        return self.engine in PREFILL_FIRST_ENGINES

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
