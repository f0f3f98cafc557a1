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
routing statistics, not from any throughput measurement gpucap is checked against.
"""

from __future__ import annotations

import numpy as np

# (ep, max / mean tokens per GPU) without EPLB (module docstring)
EP_IMBALANCE_POINTS = ((1, 1.0), (4, 1.35), (8, 1.49), (16, 1.63), (32, 1.82), (64, 2.10))


def ep_imbalance(ep: int) -> float:
    """Max / mean tokens per GPU of an ep-way expert-parallel MoE layer (1 for ep 1)."""
    if ep <= 1:
        return 1.0
    x = np.log2([p[0] for p in EP_IMBALANCE_POINTS])
    y = [p[1] for p in EP_IMBALANCE_POINTS]
    lx = float(np.log2(ep))
    if lx > x[-1]:  # beyond the last point: the last slope
        return float(y[-1] + (y[-1] - y[-2]) / (x[-1] - x[-2]) * (lx - x[-1]))
    return float(np.interp(lx, x, y))
