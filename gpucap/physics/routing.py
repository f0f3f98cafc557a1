"""How unevenly a mixture-of-experts layer's tokens land on the GPUs of an expert-parallel group.

Under expert parallelism (ep > 1) each GPU holds ``E / ep`` experts and computes the tokens the
router sends them; the layer lasts as long as the busiest GPU. With ``f`` = max / mean tokens per
GPU, the step's expert compute and its all-to-all messages are those of ``f`` times the mean GPU.

``f`` by ep size, without an expert-parallel load balancer (EPLB, off by default in vLLM,
SGLang and TensorRT-LLM), from published measurements of real routing:
- ep 4: 1.35, Qwen3.6-35B-A3B served by vLLM 0.20.1 on B300, tp4 ep4 ("busiest-rank overload
  max/mean ~ 1.35x ... varies only +-1.8% step-to-step"; ai-dynamo/aiconfigurator
  ``collector/layerwise/fpm_ground_truth/EXPERT_ROUTING_CAPTURE.md`` @ 01e16496);
- ep 8 to 64: 1.49, 1.63, 1.82, 2.10, read off LMSYS's "Effects of Scale and EPLB to
  Balancedness" (DeepSeek-V3 routing, balancedness = mean / max; "Deploying DeepSeek with PD
  Disaggregation and Large-scale Expert Parallelism on 96 H100 GPUs", May 2025).
Between and beyond them, linear in log2(ep); ep 1 is 1 by definition. The values come from
routing statistics, not from any throughput measurement gpucap is checked against. With an
expert-parallel load balancer (``EngineConfig.eplb``: vLLM/SGLang ``--enable-eplb``, TensorRT-LLM's
online EPLB), LMSYS's curve with EPLB: 1.06 at ep 8, 1.11 at 16, 1.25 at 32, 1.24 at 72.

Which experts a step reads (``experts_touched``) assumes each token picks its k experts
uniformly unless ``ModelSpec.routing_skew`` s > 0: expert i (by popularity) is then picked with
probability ``p_i ~ i^-s`` (a Zipf law). DeepSeek-V3's per-layer popularity (the top 10% of its
256 experts take a median 27-33% of a layer's tokens, read off LMSYS's expert-load heatmap) is
s ~ 0.52; the uniform default reads ~10% more experts than that at 50 tokens a step.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

# (ep, max / mean tokens per GPU) without and with EPLB (module docstring)
EP_IMBALANCE_POINTS = ((1, 1.0), (4, 1.35), (8, 1.49), (16, 1.63), (32, 1.82), (64, 2.10))
EP_IMBALANCE_EPLB_POINTS = ((1, 1.0), (8, 1.06), (16, 1.11), (32, 1.25), (72, 1.24))
DEEPSEEK_V3_ROUTING_SKEW = 0.52  # Zipf exponent of DeepSeek-V3's expert popularity (module docstring)


def ep_imbalance(ep: int, eplb: bool = False) -> float:
    """Max / mean tokens per GPU of an ep-way expert-parallel MoE layer (1 for ep 1)."""
    if ep <= 1:
        return 1.0
    points = EP_IMBALANCE_EPLB_POINTS if eplb else EP_IMBALANCE_POINTS
    x = np.log2([p[0] for p in points])
    y = [p[1] for p in points]
    lx = float(np.log2(ep))
    if lx > x[-1]:  # beyond the last point: the last slope
        return float(y[-1] + (y[-1] - y[-2]) / (x[-1] - x[-2]) * (lx - x[-1]))
    return float(np.interp(lx, x, y))


def expert_popularity(num_experts: int, skew: float) -> npt.NDArray[np.float64]:
    """Share of picks each expert gets, most popular first: ``p_i = i^-s / sum_j j^-s``."""
    p = np.arange(1, num_experts + 1, dtype=float) ** (-skew)
    return p / p.sum()


def experts_touched(
    num_experts: int, experts_per_token: int, tokens: npt.ArrayLike, skew: float = 0.0
) -> npt.NDArray[np.float64]:
    """Expected fraction of a MoE layer's routed experts that a step of T tokens reads.

    Uniform routing (``skew`` 0): ``1 - (1 - k / E)^T``, each token picking k of E experts
    independently and uniformly. With skew s: ``mean_i 1 - (1 - min(k p_i, 1))^T`` over the
    Zipf popularities ``p_i`` (``expert_popularity``): popular experts are read by nearly every
    step, rare ones seldom, so fewer distinct experts are read at small T.
    """
    t = np.maximum(np.asarray(tokens, dtype=float), 1.0)
    # q^T as exp(T ln q): the same number (within 1e-15), about twice as fast as a power of an array
    if skew <= 0:
        return np.asarray(-np.expm1(t * np.log1p(-experts_per_token / num_experts)), dtype=float)
    miss = 1.0 - np.minimum(experts_per_token * expert_popularity(num_experts, skew), 1.0)
    with np.errstate(divide="ignore"):  # an expert every token picks: ln 0 = -inf, q^T = 0
        log_miss = np.log(miss)
    return np.asarray(1.0 - np.mean(np.exp(t[..., None] * log_miss), axis=-1), dtype=float)
