"""The seed articles' own formulas, reproduced so the notebooks can show their numbers beside
gpucap's. THESE ARE NOT GPUCAP'S PHYSICS, and several of them are wrong on purpose.

gpucap started from two Chinese articles (``shared/seeds/``):

- seed 1, "从一张显卡到八张显卡：并发估算为什么总让人心里没底" ("From one GPU to eight: why
  concurrency estimates never feel safe"): a calculator with three functions, one per
  constraint (显存 memory, 算力 compute, 带宽 bandwidth), whose minimum is the recommended
  concurrency, checked against a load test of Llama 3 70B on 8 x A100;
- seed 2, "如何估算大模型推理的显存占用、并发容量和 GPU 数量？" ("How to estimate the memory,
  concurrency capacity and GPU count of LLM inference"): weights, KV bytes per token, KV token
  capacity and replicas.

Each function below computes what the article computes, with the article's argument names, units
(its "GB" is whatever unit the caller passes) and rounding (``int``, ``//``). Each docstring
quotes the article and says what is wrong with it, following DESIGN.md section 7. The notebook
``01-theory-walkthrough`` calls them next to the gpucap function that replaces them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpucap.catalog.models import ModelSpec

# Seed 2's bytes per weight value (its section 一): FP16/BF16 2, INT8 1, 4-bit 0.5. gpucap's
# table, with quantization scales, is ``gpucap.units.WEIGHT_BYTES_PER_PARAM``.
SEED2_BYTES_PER_PARAM: dict[str, float] = {"fp16": 2.0, "bf16": 2.0, "int8": 1.0, "int4": 0.5}


# ---- seed 1 ---------------------------------------------------------------------------------
def seed1_kv_cache_bytes(num_layers: int, num_heads: int, head_dim: int, seq_len: int, dtype_bytes: int = 2) -> int:
    """Seed 1's KV cache of one request, in bytes (its section 3.1, verbatim):

    ``2 x num_layers x num_heads x head_dim x seq_len x dtype_bytes``
    ("2 × 层数 × 注意力头数 × 头维度 × 序列长度 × batch_size × 精度字节数"), called as
    ``kv_cache_bytes(80, 64, 128, 4096)`` for Llama 3 70B and printed as 10.00 "GB"
    (it divides by 1024**3, so GiB).

    Wrong: K and V are stored per KV head (``num_key_value_heads``), not per attention head
    ("注意力头数"). Llama 3 70B has 64 attention heads but 8 KV heads (GQA), so the formula
    overstates its KV cache 8 times: 10 GiB instead of 1.25 GiB per 4,096-token request.
    Seed 2 uses KV heads and is right. gpucap: ``gpucap.physics.memory.kv_bytes_per_token``.
    """
    return 2 * num_layers * num_heads * head_dim * seq_len * dtype_bytes


def seed1_kv_cache_bytes_for_model(spec: ModelSpec, seq_len: int, dtype_bytes: int = 2) -> int:
    """Seed 1's formula with its inputs read from a ``config.json`` the way the article says
    ("这个公式里每一项都能从模型配置里查到"): ``num_hidden_layers``, ``num_attention_heads`` and a
    head dimension of ``hidden_size / num_attention_heads`` (Llama 3 70B: 8192 / 64 = 128).

    Wrong in up to three ways: attention heads instead of KV heads (GQA, 8x for Llama 3 70B);
    ``hidden / heads`` instead of the config's explicit ``head_dim`` where there is one (Qwen3-32B:
    5120 / 64 = 80, but ``head_dim`` is 128); and no MLA latent (DeepSeek-V3 stores one
    576-value latent per layer, whatever its 128 heads) or sliding windows (gpt-oss).
    """
    return seed1_kv_cache_bytes(
        spec.num_layers, spec.num_heads, spec.hidden_size // spec.num_heads, seq_len, dtype_bytes
    )


def seed1_max_concurrency_by_memory(
    total_mem_gb: float, weight_gb: float, framework_gb: float, kv_per_request_gb: float, activation_gb: float
) -> int:
    """Seed 1's memory limit (section 4.2, verbatim):

    ``available = total_mem_gb - weight_gb - framework_gb - activation_gb``;
    ``int(available // kv_per_request_gb)`` (0 when nothing is left).

    The shape is right (what is left after weights and reservations, divided by one request's KV);
    what goes wrong is the KV per request fed to it (``seed1_kv_cache_bytes``: 8x too large for
    GQA models), the length it is charged at (the article takes input + output, the maximum,
    without saying so) and the unit (the article's "GB" are GiB). gpucap:
    ``gpucap.physics.memory.concurrency_by_memory`` over ``memory_breakdown``.
    """
    available = total_mem_gb - weight_gb - framework_gb - activation_gb
    if available <= 0:
        return 0
    return int(available // kv_per_request_gb)


def seed1_forward_flop(model_params_b: float, tokens: float = 1.0) -> float:
    """Seed 1's FLOP for ``tokens`` tokens (section 3.2): ``2 x params`` per token
    ("单 token 计算量大约是2 × 参数量次浮点运算", 70B -> 140 GFLOP per token).

    Incomplete: it omits attention (``4 x heads x head_dim`` per layer per (query, key) pair,
    quadratic in a prompt's length) and counts the embedding lookup as a matmul (gpucap counts the
    lm_head, ``2 x hidden x vocab`` per sampled token, instead). gpucap:
    ``gpucap.physics.step.step_work`` (``linear_flop`` + ``attention_flop``).
    """
    return 2.0 * model_params_b * 1e9 * tokens


def seed1_max_concurrency_by_compute(
    total_tflops: float, model_params_b: float, utilization: float, tokens_per_sec_per_req: float
) -> int:
    """Seed 1's compute limit (section 4.2, verbatim):

    ``total_tokens_per_sec = total_tflops x 1e12 x utilization / (2 x params)``;
    ``int(total_tokens_per_sec // tokens_per_sec_per_req)``
    (its defaults: utilization 35%, "先用百分之三十五这个保守值"; 20 tokens/s per request,
    "如果你要求每个请求每秒至少生成 20 个 token").

    Wrong: decode is HBM-bound, not compute-bound. Every decode step reads all the weights once
    and every sequence's KV cache, so the token rate at a small batch is set by bandwidth, and
    "2 x params at 35% of peak" overstates it several times (DESIGN.md section 7: a median error
    of about 300% on the public measurements). It also gives every FLOP to output tokens: the
    prompt's prefill (3,840 tokens per request in the article's scenario, 15 times the output)
    needs compute too. gpucap: ``gpucap.physics.steptime.step_time`` in ``gpucap.physics.batching.closed_loop``.
    """
    flops_per_token = 2 * model_params_b * 1e9
    effective_flops = total_tflops * 1e12 * utilization
    total_tokens_per_sec = effective_flops / flops_per_token
    return int(total_tokens_per_sec // tokens_per_sec_per_req)


def seed1_allreduce_seconds(
    bandwidth_gbps: float, hidden_size: int, num_layers: int, batch_tokens: float, dtype_bytes: int = 2
) -> float:
    """The time inside seed 1's bandwidth function (section 4.2, verbatim):

    ``bytes = 2 x hidden_size x batch_tokens x dtype_bytes x num_layers`` ("每层 all-reduce 传输量约
    2 * hidden_size * batch_tokens * dtype_bytes"), halved for overlap ("取 0.5 作为重叠系数"),
    divided by ``bandwidth_gbps x 1e9``.

    Simplified: no latency per collective (about 10 us on NVLink, more on PCIe, which dominates
    the small messages of decode: 160 all-reduces per step for an 80-layer model), no ring factor
    ``2 (tp - 1) / tp``, and a "600 GB/s" that is NVLink's two directions added. gpucap:
    ``gpucap.physics.step.step_work`` (``link_bytes_s``, ``link_latency_s``) and ``step_time``.
    """
    bytes_per_layer = 2 * hidden_size * batch_tokens * dtype_bytes
    total_bytes = bytes_per_layer * num_layers
    effective_bytes = total_bytes * 0.5
    return effective_bytes / (bandwidth_gbps * 1e9)


def seed1_max_concurrency_by_bandwidth(
    bandwidth_gbps: float, hidden_size: int, num_layers: int, batch_tokens: float, dtype_bytes: int = 2
) -> int:
    """Seed 1's "concurrency allowed by bandwidth" (section 4.2, verbatim):
    ``max(1, int(1 / time_sec))`` with ``time_sec = seed1_allreduce_seconds(...)``
    ("返回在目标时间内能处理的并发（这里简化处理）").

    Wrong: ``1 / time`` is how many such all-reduce rounds fit in one second, a rate, not a number
    of concurrent requests; it is in the thousands for any NVLink box and says nothing about
    whether requests meet their latency target. The meaningful comparison is the communication
    time of a step against the per-token time budget (TPOT), i.e. the communication share of a
    step, which the article itself proposes (section 3.3: above 50% the split does not pay).
    gpucap: ``gpucap.physics.step.StepTime.comm_share`` and the ``interconnect`` limit of
    ``gpucap.estimate``.
    """
    time_sec = seed1_allreduce_seconds(bandwidth_gbps, hidden_size, num_layers, batch_tokens, dtype_bytes)
    return max(1, int(1 / time_sec)) if time_sec > 0 else 1


def seed1_recommended(mem: int, comp: int, bw: int) -> int:
    """Seed 1's recommended concurrency: the minimum of its three constraints
    ("这三个函数跑出来的最小值，就是当前配置下的推荐并发数").

    Wrong: the constraints are not independent. A step's time is the sum of its compute, memory and
    communication terms, and the prompts' prefill shares the steps with the decodes, so the
    concurrency that meets both latency targets can sit below every single bar. gpucap:
    ``gpucap.estimate.estimate(...).recommended_concurrency`` (the SLO-limited steady state).
    """
    return min(mem, comp, bw)


@dataclass(frozen=True)
class Seed1Scenario:
    """Seed 1's load test (section 5.1) put through its own three functions.

    Llama 3 70B, 8 x A100-80GB, tensor parallel 8, 4,096-token context, 256 output tokens,
    TTFT 2 s, TPOT 100 ms. The article reports "实测 ... 稳定并发在 60 到 70 之间。计算器给出的
    估算值是 72" (measured 60-70, its calculator 72). The inputs below are the article's own
    numbers where it gives them; ``framework_gb`` and ``activation_gb`` follow its rules of thumb.
    """

    kv_heads: int
    total_mem_gb: float
    weight_gb: float
    framework_gb: float
    activation_gb: float
    kv_per_request_gb: float
    by_memory: int
    total_tflops: float
    params_b: float
    utilization: float
    tokens_per_sec_per_req: float
    by_compute: int
    bandwidth_gbps: float
    batch_tokens: float
    by_bandwidth: int

    @property
    def recommended(self) -> int:
        return seed1_recommended(self.by_memory, self.by_compute, self.by_bandwidth)

    @property
    def bottleneck(self) -> str:
        bars = {"memory": self.by_memory, "compute": self.by_compute, "bandwidth": self.by_bandwidth}
        return min(bars, key=lambda k: bars[k])

    @property
    def limits(self) -> dict[str, float | None]:
        return {"memory": self.by_memory, "compute": self.by_compute, "bandwidth": self.by_bandwidth}


def seed1_a100_scenario(kv_heads: int = 64, tokens_per_sec_per_req: float = 20.0) -> Seed1Scenario:
    """Seed 1's 8 x A100 scenario through its three functions, inputs as the article gives them:

    - memory: 8 x 80 GB at 90% usable (its vLLM command's ``--gpu-memory-utilization 0.9``;
      "实际可用显存往往只有标称值的百分之八九十") = 576; weights 70B x 2 bytes = 140; framework
      2 GB per card ("框架开销我通常留 1 到 2 GB") = 16; activations 5% of the weights
      ("一般按权重的百分之几来估") = 7; KV per request ``seed1_kv_cache_bytes(80, kv_heads, 128,
      4096) / 1024**3`` (10 with the article's 64 heads, 1.25 with Llama 3's 8 KV heads);
    - compute: 8 x 312 TFLOPS (A100 bf16 dense), 70B, 35%, ``tokens_per_sec_per_req`` (the
      article's example, 20; its scenario's TPOT of 100 ms would mean 10);
    - bandwidth: 600 GB/s ("如果卡间带宽是 600 GB/s（NVLink 水平）"), hidden 8192, 80 layers, one
      decode step of the 72 requests the article estimates (one token each).

    With 64 heads this gives about 41 by memory, 312 by compute and thousands by bandwidth
    (DESIGN.md section 7): the minimum is 41, not the article's 72.
    """
    total_mem_gb, weight_gb = 8 * 80 * 0.9, 70 * 2.0
    framework_gb, activation_gb = 8 * 2.0, 0.05 * weight_gb
    kv_gb = seed1_kv_cache_bytes(80, kv_heads, 128, 4096) / 1024**3
    total_tflops, params_b, utilization = 8 * 312.0, 70.0, 0.35
    bandwidth_gbps, hidden, layers, batch_tokens = 600.0, 8192, 80, 72.0
    return Seed1Scenario(
        kv_heads=kv_heads,
        total_mem_gb=total_mem_gb,
        weight_gb=weight_gb,
        framework_gb=framework_gb,
        activation_gb=activation_gb,
        kv_per_request_gb=kv_gb,
        by_memory=seed1_max_concurrency_by_memory(total_mem_gb, weight_gb, framework_gb, kv_gb, activation_gb),
        total_tflops=total_tflops,
        params_b=params_b,
        utilization=utilization,
        tokens_per_sec_per_req=tokens_per_sec_per_req,
        by_compute=seed1_max_concurrency_by_compute(total_tflops, params_b, utilization, tokens_per_sec_per_req),
        bandwidth_gbps=bandwidth_gbps,
        batch_tokens=batch_tokens,
        by_bandwidth=seed1_max_concurrency_by_bandwidth(bandwidth_gbps, hidden, layers, batch_tokens),
    )


# ---- seed 2 ---------------------------------------------------------------------------------
def seed2_weight_bytes(params: float, dtype: str) -> float:
    """Seed 2's weight memory (section 一): ``params x bytes per param`` with FP16/BF16 2, INT8 1,
    4-bit 0.5 (7B: 14 / 7 / 3.5 GB, GB = 1e9).

    A lower bound, as the article itself says ("下限"): a 4-bit format also stores scales (and
    zero points), 0.53 bytes per value for group-128 int4 and MXFP4, 0.5625 for NVFP4, and
    quantized checkpoints keep embeddings, lm_head and norms in bf16. gpucap:
    ``gpucap.units.WEIGHT_BYTES_PER_PARAM`` and ``gpucap.physics.memory.weight_bytes_per_gpu``.
    """
    try:
        return params * SEED2_BYTES_PER_PARAM[dtype]
    except KeyError:
        raise ValueError(f"seed 2 gives bytes for {', '.join(SEED2_BYTES_PER_PARAM)} only, not {dtype!r}") from None


def seed2_kv_bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, dtype_bytes: float) -> float:
    """Seed 2's KV bytes per token (section 二): ``2 x layers x KV heads x head_dim x bytes``
    ("每 token KV 字节 = 2 × 32 × 8 × 128 × 2 字节 ≈ 131 KB/token").

    Right (KV heads, not attention heads) for a standard decoder. It leaves out what the article
    mentions only in passing ("TP 是否分片 KV、内存对齐、分页尾块"): sharding over TP (and
    replication when TP exceeds the KV heads), paged-block rounding, MLA latents and sliding
    windows. gpucap: ``gpucap.physics.memory.kv_bytes_per_token`` / ``kv_bytes_per_token_per_gpu`` /
    ``held_tokens_per_layer``.
    """
    return float(2 * num_layers * num_kv_heads * head_dim * dtype_bytes)


def seed2_kv_token_capacity(kv_memory_bytes: float, kv_bytes_per_token: float) -> float:
    """Seed 2's total active tokens (section 二): KV memory / bytes per token
    ("40 GB / 131 KB ≈ 320,000 token").

    Units: 40 GiB / 131,072 B = 327,680 tokens; 40 GB (1e9) / 131,072 B = 305,176; the article's
    "≈ 320,000" matches neither exactly and is nearest the GiB reading. gpucap keeps GB and GiB
    apart (``gpucap.units``) and charges paged blocks (``gpucap.physics.memory.concurrency_by_memory``).
    """
    return kv_memory_bytes / kv_bytes_per_token


def seed2_concurrency(total_tokens: float, tokens_per_request: float) -> float:
    """Seed 2's concurrency (section 二): token capacity / tokens per request
    ("320,000 / 2000 ≈ 160 个并发请求").

    Right, with the article's own caveat: use the real length distribution, not the maximum
    context. 327,680 / 2,000 = 163.8 (40 GiB), 305,176 / 2,000 = 152.6 (40 GB). gpucap:
    ``gpucap.physics.memory.concurrency_by_memory`` (whole requests, paged blocks).
    """
    return total_tokens / tokens_per_request


def seed2_replicas(demand_tokens_per_s: float, replica_tokens_per_s: float, margin: float = 1.0) -> int:
    """Seed 2's replica count (section 四): ``ceil(D / R) x margin``, rounded up
    ("实际副本数 = ceil(D / R) × 安全余量 + 滚动升级/故障/突发余量").

    Right as arithmetic; R must be what one replica sustains within the SLOs (gpucap:
    ``estimate(...).output_tokens_per_s`` at the recommended concurrency), not its saturation
    throughput, and the failure / rolling-upgrade headroom comes on top.
    """
    return math.ceil(math.ceil(demand_tokens_per_s / replica_tokens_per_s) * margin)
