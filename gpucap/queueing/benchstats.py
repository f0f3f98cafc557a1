"""Statistics of a load-test run computed the way ``vllm bench serve`` computes them
(``vllm/benchmarks/serve.py``, ``calculate_metrics``):

- TTFT: first streamed token time minus the time the request was sent, per request;
- TPOT: ``(latency - TTFT) / (output tokens - 1)`` per request with more than one output token;
- ITL: every gap between consecutive streamed chunks, of all requests pooled;
- E2E: latency from send to last token, per request;
- mean (``np.mean``), median (``np.median``) and percentiles (``np.percentile``, linear
  interpolation) of each; output throughput = output tokens / run duration, the duration
  running from the start of the run to the last request's end.

ITL is pooled over chunks, not requests, so a run's mean ITL weights long requests more than its
mean TPOT does; the simulation hands ITL over as (value, count) pairs, and ``weighted_stats``
reproduces ``np.percentile`` on the expanded sample without building it.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpucap.types import QUANTILES, STATISTICS

Array = npt.NDArray[np.float64]

PERCENTILES = {s: 100 * q for s, q in QUANTILES.items()}
METRIC_NAMES = ("ttft", "tpot", "itl", "e2el")


def sample_stats(values: Array, percentiles: dict[str, float]) -> dict[str, float]:
    """The mean and the named percentiles (in percent, ``np.percentile``'s linear interpolation)
    of a sample, NaN dropped; all NaN for an empty sample."""
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    if v.size == 0:
        return {s: float("nan") for s in ("mean", *percentiles)}
    out = {"mean": float(v.mean())}
    out.update({s: float(np.percentile(v, q)) for s, q in percentiles.items()})
    return out


def stats(values: Array) -> dict[str, float]:
    """Mean, median, p90, p95 and p99 of a sample, as ``vllm bench serve`` reports them."""
    return sample_stats(values, PERCENTILES)


def weighted_stats(values: Array, counts: Array) -> dict[str, float]:
    """``stats`` of the sample in which ``values[k]`` occurs ``counts[k]`` times: the mean, and
    ``np.percentile``'s linear interpolation between order statistics at ``q (n - 1)``."""
    v = np.asarray(values, dtype=float)
    c = np.asarray(counts, dtype=float)
    keep = (c > 0) & ~np.isnan(v)
    v, c = v[keep], c[keep]
    if v.size == 0:
        return {s: float("nan") for s in STATISTICS}
    order = np.argsort(v, kind="stable")
    v, c = v[order], c[order]
    n = c.sum()
    ends = np.cumsum(c)  # order statistic k (0-based) has value v[first index with ends > k]
    out = {"mean": float(np.dot(v, c) / n)}
    for name, q in PERCENTILES.items():
        pos = q / 100.0 * (n - 1)
        lo, hi = np.floor(pos), np.ceil(pos)
        v_lo = v[min(int(np.searchsorted(ends, lo, side="right")), v.size - 1)]
        v_hi = v[min(int(np.searchsorted(ends, hi, side="right")), v.size - 1)]
        out[name] = float(v_lo + (pos - lo) * (v_hi - v_lo))
    return out
