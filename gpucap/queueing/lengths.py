"""Request lengths: fixed, or a distribution given as a histogram or as percentiles.

A capacity plan needs three things from a length distribution: the mean (the steady state is
linear in tokens, so a replica's throughput follows the mean input and output lengths), the
longest request (it must fit the KV cache at all), and a quantile (the prompt that sets a P99
TTFT is a long one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

PERCENTILE_POINTS = 8  # points per interval between given percentiles
EXPONENTIAL_POINTS = 256  # quantile midpoints that stand for an exponential distribution


@dataclass(frozen=True)
class Lengths:
    """Token counts ``values`` with probabilities ``weights`` (summing to 1)."""

    values: tuple[float, ...]
    weights: tuple[float, ...]
    label: str = ""
    top: float | None = None  # the longest request when it is not one of the values (a bin's edge)
    points: tuple[tuple[float, float], ...] = ()  # given (fraction, length) percentiles, if any

    def __post_init__(self) -> None:
        v, w = np.asarray(self.values, dtype=float), np.asarray(self.weights, dtype=float)
        if v.size == 0 or v.size != w.size:
            raise ValueError(f"lengths {self.label!r}: need as many weights as values, got {v.size} and {w.size}")
        if not (np.all(np.isfinite(v)) and np.all(v >= 1)):
            raise ValueError(f"lengths {self.label!r}: token counts must be finite and >= 1, got {list(v)}")
        if np.any(w < 0) or not np.isclose(w.sum(), 1.0):
            raise ValueError(f"lengths {self.label!r}: weights must be >= 0 and sum to 1, got sum {w.sum():g}")

    @classmethod
    def fixed(cls, tokens: float, label: str = "") -> Lengths:
        return cls((float(tokens),), (1.0,), label or f"{tokens:g}")

    @classmethod
    def uniform(cls, low: float, high: float, label: str = "") -> Lengths:
        """Every whole token count in ``[low, high]`` equally likely (a closed integer range, as
        ``numpy.random.Generator.integers(low, high + 1)`` draws it)."""
        lo, hi = int(np.floor(low)), int(np.ceil(high))
        if lo < 1 or hi < lo:
            raise ValueError(f"lengths {label!r}: a uniform range needs 1 <= low <= high, got [{low:g}, {high:g}]")
        values = np.arange(lo, hi + 1, dtype=float)
        return cls(tuple(values), tuple(np.full(values.size, 1.0 / values.size)), label or f"U[{lo}, {hi}]")

    @classmethod
    def range_ratio(cls, tokens: float, ratio: float, label: str = "") -> Lengths:
        """``vllm bench serve --random-range-ratio r`` around ``tokens`` (L): whole counts uniform on
        ``[floor(L (1 - r)), ceil(L (1 + r))]``, at least 1 (``vllm/benchmarks/datasets``,
        ``get_sampling_params``); r = 0 is the fixed length L."""
        if not (np.isfinite(ratio) and 0 <= ratio < 1):
            raise ValueError(f"range ratio must be in [0, 1) (vllm bench serve --random-range-ratio), got {ratio!r}")
        if ratio == 0:
            return cls.fixed(float(tokens), label)
        lo = max(int(np.floor(tokens * (1 - ratio))), 1)
        return cls.uniform(lo, max(int(np.ceil(tokens * (1 + ratio))), lo), label or f"{tokens:g} +/- {ratio:.0%}")

    @classmethod
    def exponential(cls, mean: float, label: str = "") -> Lengths:
        """A long-tailed, dataset-like length with mean ``mean`` (an assumption for ShareGPT-style
        runs: exponential, so the median is ``mean x ln 2`` and the mean/median ratio 1.44).
        Stands for ``Exp(mean)`` by ``EXPONENTIAL_POINTS`` equally likely quantile midpoints,
        ``-mean x ln(1 - (k + 1/2) / n)``, shifted so that their mean is exactly ``mean``; at
        least 1 token."""
        if not (np.isfinite(mean) and mean >= 1):
            raise ValueError(f"lengths {label!r}: an exponential length needs a mean >= 1 token, got {mean!r}")
        u = (np.arange(EXPONENTIAL_POINTS) + 0.5) / EXPONENTIAL_POINTS
        x = np.maximum(-mean * np.log1p(-u), 1.0)
        x = np.maximum(x * mean / x.mean(), 1.0)
        return cls(tuple(x), tuple(np.full(x.size, 1.0 / x.size)), label or f"Exp(mean {mean:g})")

    @classmethod
    def histogram(cls, edges: Sequence[float], counts: Sequence[float], label: str = "histogram") -> Lengths:
        """Bins ``[edges[k], edges[k+1])`` holding ``counts[k]`` requests, uniform inside a bin:
        each bin is represented by its midpoint (exact for the mean)."""
        e, c = np.asarray(edges, dtype=float), np.asarray(counts, dtype=float)
        if e.size != c.size + 1 or np.any(np.diff(e) <= 0):
            raise ValueError(
                f"lengths {label!r}: a histogram needs increasing edges, one more than counts "
                f"(got {e.size} edges, {c.size} counts)"
            )
        if np.any(c < 0) or c.sum() <= 0:
            raise ValueError(f"lengths {label!r}: counts must be >= 0 with a positive total")
        mid = np.maximum(0.5 * (e[:-1] + e[1:]), 1.0)
        top = float(e[np.flatnonzero(c > 0)[-1] + 1])
        return cls(tuple(mid), tuple(c / c.sum()), label, top=top)

    @classmethod
    def percentiles(cls, points: Mapping[float, float], label: str = "percentiles") -> Lengths:
        """From percentiles ``{50: 800, 90: 2000, 99: 6000}``. The CDF is taken as linear between
        the given points; the mass below the lowest percentile sits at its value and the mass above
        the highest at its value (so the highest percentile given is also the longest request).
        Give a low percentile (p1 or p5) and a high one (p99) to bound both ends."""
        q = np.array(sorted(points), dtype=float)
        x = np.array([points[k] for k in sorted(points)], dtype=float)
        if q.size < 2 or q[0] <= 0 or q[-1] >= 100:
            raise ValueError(
                f"lengths {label!r}: give at least two percentiles strictly between 0 and 100, got {list(q)}"
            )
        if np.any(np.diff(x) < 0):
            raise ValueError(
                f"lengths {label!r}: percentile values must not decrease, got {dict(zip(q, x, strict=True))}"
            )
        values, weights = [x[0]], [q[0] / 100]
        for k in range(q.size - 1):
            frac = (np.arange(PERCENTILE_POINTS) + 0.5) / PERCENTILE_POINTS
            values += list(x[k] + frac * (x[k + 1] - x[k]))
            weights += [(q[k + 1] - q[k]) / 100 / PERCENTILE_POINTS] * PERCENTILE_POINTS
        values.append(x[-1])
        weights.append(1 - q[-1] / 100)
        return cls(tuple(values), tuple(weights), label, points=tuple(zip(q / 100, x, strict=True)))

    @classmethod
    def parse(cls, text: str, label: str) -> Lengths:
        """``"2000"`` (fixed) or ``"p50=800,p90=2000,p99=6000"`` (percentiles), as the CLI takes them."""
        text = text.strip()
        try:
            if "=" not in text:
                return cls.fixed(float(text), label)
            points = {}
            for part in text.split(","):
                key, _, value = part.partition("=")
                q = float(key.strip().lower().lstrip("p"))
                if q in points:
                    raise ValueError(f"percentile p{q:g} given twice")
                points[q] = float(value)
            return cls.percentiles(points, label)
        except ValueError as err:
            raise ValueError(
                f"{label}: cannot read {text!r} ({err}); give a token count like 2000 or percentiles like p50=800,p99=6000"
            ) from None

    @property
    def mean(self) -> float:
        return float(np.dot(self.values, self.weights))

    def moment(self, k: int) -> float:
        """``E[L^k]`` over the distribution's lengths."""
        return float(np.dot(np.asarray(self.values, dtype=float) ** k, self.weights))

    @property
    def longest(self) -> float:
        """The longest request: a histogram's top edge, else the largest value."""
        if self.top is not None:
            return self.top
        return float(max(v for v, w in zip(self.values, self.weights, strict=True) if w > 0))

    def quantile(self, q: float) -> float:
        """Smallest length with at least fraction ``q`` of requests at or below it; from given
        percentiles, linear between them (the CDF they define)."""
        if self.points:
            f, x = np.array(self.points).T
            return float(np.interp(q, f, x))
        order = np.argsort(self.values)
        v, cdf = np.asarray(self.values)[order], np.cumsum(np.asarray(self.weights)[order])
        k = min(int(np.searchsorted(cdf, q - 1e-12)), v.size - 1)
        return float(v[k])

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` lengths drawn with the distribution's probabilities (whole tokens)."""
        return np.round(rng.choice(np.asarray(self.values), size=n, p=np.asarray(self.weights)))

    def draw(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` whole-token lengths in random order whose empirical distribution follows this one
        as closely as ``n`` draws can: the inverse CDF at the stratified points ``(k + 1/2) / n``,
        shuffled. Less noisy than ``sample`` (the mean is right to a token), for simulations that
        stand for one benchmark run."""
        order = np.argsort(self.values)
        v = np.asarray(self.values, dtype=float)[order]
        cdf = np.cumsum(np.asarray(self.weights, dtype=float)[order])
        idx = np.minimum(np.searchsorted(cdf, (np.arange(n) + 0.5) / n), v.size - 1)
        return np.asarray(rng.permutation(np.maximum(np.round(v[idx]), 1.0)), dtype=float)

    @property
    def is_fixed(self) -> bool:
        return len(set(self.values)) == 1


def as_lengths(value: float | Lengths, label: str) -> Lengths:
    return value if isinstance(value, Lengths) else Lengths.fixed(float(value), label)
