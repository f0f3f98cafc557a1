"""The load a benchmark puts on a server, as ``vllm bench serve`` (and SGLang's ``bench_serving``)
make it: which requests are sent when. Three modes:

- ``closed-loop``: ``--max-concurrency C --request-rate inf``: C requests in flight; each one
  that finishes is replaced at once by the next of the ``num_prompts``.
- ``all-at-once``: ``--request-rate inf`` without a cap: all ``num_prompts`` sent at t = 0 (the
  "maximum throughput" runs), then the server drains them.
- ``open-loop``: ``--request-rate R``: ``num_prompts`` sent at random times, ``arrivals`` being
  ``poisson`` (exponential gaps), ``gamma`` (gaps with shape ``burstiness`` and mean 1 / R,
  ``--burstiness``) or ``constant`` (gaps of exactly 1 / R).

Request lengths are ``gpucap.queueing.lengths.Lengths``: fixed, ``Lengths.range_ratio`` for
``--random-range-ratio``, or a dataset-like distribution (``Lengths.exponential``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpucap.options import option

LOAD_MODES = ("closed-loop", "all-at-once", "open-loop")
ARRIVALS = ("poisson", "gamma", "constant")


@dataclass(frozen=True)
class Load:
    """One benchmark run's load (see the module docstring)."""

    mode: str = option(help=f"load mode: {', '.join(LOAD_MODES)}")
    num_prompts: int = option(kind="positive_int", help="requests the run sends")
    concurrency: int | None = option(None, kind="positive_int", help="closed-loop: requests in flight")
    request_rate: float | None = option(None, kind="float", help="open-loop: requests/s")
    arrivals: str = option("poisson", help=f"open-loop: {', '.join(ARRIVALS)}")
    burstiness: float = option(1.0, kind="positive_float", help="gamma arrivals' shape (1 = Poisson)")

    def __post_init__(self) -> None:
        if self.mode not in LOAD_MODES:
            raise ValueError(f"unknown load mode {self.mode!r}; use one of {', '.join(LOAD_MODES)}")
        if self.arrivals not in ARRIVALS:
            raise ValueError(f"unknown arrivals {self.arrivals!r}; use one of {', '.join(ARRIVALS)}")
        n = self.num_prompts
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"num_prompts must be a whole number >= 1, got {n!r}")
        if self.mode == "closed-loop":
            c = self.concurrency
            if c is None or isinstance(c, bool) or not isinstance(c, (int, np.integer)) or c < 1:
                raise ValueError(f"a closed-loop load needs a whole concurrency >= 1, got {c!r}")
            if c > n:
                raise ValueError(
                    f"concurrency {c} is above num_prompts {n}: the run never has {c} requests in flight; "
                    f"send at least {c} prompts or lower the concurrency"
                )
        if self.mode == "open-loop":
            r = self.request_rate
            if r is None or not (np.isfinite(r) and r > 0):
                raise ValueError(
                    f"an open-loop load needs a request rate > 0 requests/s, got {r!r} "
                    "(for all requests at once use mode 'all-at-once')"
                )
            if not (np.isfinite(self.burstiness) and self.burstiness > 0):
                raise ValueError(f"burstiness must be a positive number (1 = Poisson), got {self.burstiness!r}")
            if self.arrivals == "poisson" and self.burstiness != 1.0:
                raise ValueError(f"poisson arrivals have burstiness 1, got {self.burstiness!r}; use arrivals='gamma'")

    @classmethod
    def closed_loop(cls, concurrency: int, num_prompts: int | None = None) -> Load:
        """``--max-concurrency C`` with ``num_prompts`` (default 8 C) prompts."""
        c = int(concurrency)
        return cls("closed-loop", int(num_prompts) if num_prompts is not None else 8 * c, concurrency=c)

    @classmethod
    def all_at_once(cls, num_prompts: int) -> Load:
        return cls("all-at-once", int(num_prompts))

    @classmethod
    def open_loop(cls, request_rate: float, num_prompts: int, *, burstiness: float = 1.0) -> Load:
        """Poisson arrivals at ``burstiness`` 1, gamma otherwise, constant gaps at ``inf``."""
        if burstiness == np.inf:
            return cls("open-loop", int(num_prompts), request_rate=request_rate, arrivals="constant")
        kind = "poisson" if burstiness == 1.0 else "gamma"
        return cls("open-loop", int(num_prompts), request_rate=request_rate, arrivals=kind, burstiness=burstiness)

    def describe(self) -> str:
        if self.mode == "closed-loop":
            return f"{self.concurrency} in flight, {self.num_prompts} prompts"
        if self.mode == "all-at-once":
            return f"{self.num_prompts} prompts at once"
        kind = self.arrivals if self.arrivals != "gamma" else f"gamma (burstiness {self.burstiness:g})"
        return f"{self.request_rate:g} requests/s, {kind}, {self.num_prompts} prompts"


def gamma_gaps(rng: np.random.Generator, count: int, request_rate: float, burstiness: float) -> np.ndarray:
    """Gaps with shape k = burstiness and scale 1 / (k lambda): mean 1 / lambda, squared
    coefficient of variation 1 / k (k = 1: exponential gaps, a Poisson process)."""
    return np.asarray(rng.gamma(shape=burstiness, scale=1.0 / (burstiness * request_rate), size=count), dtype=float)


def open_loop_sends(load: Load, rng: np.random.Generator) -> np.ndarray:
    """Send times of an open-loop run as ``vllm bench serve`` draws them (``get_request``): the
    cumulated gaps from the start of the run, rescaled so that the last request is sent at exactly
    ``num_prompts / rate`` (vLLM's normalization, which keeps the run's mean rate exact)."""
    assert load.request_rate is not None
    n, rate = load.num_prompts, float(load.request_rate)
    if load.arrivals == "constant":
        gaps = np.full(n, 1.0 / rate)
    else:
        gaps = gamma_gaps(rng, n, rate, load.burstiness if load.arrivals == "gamma" else 1.0)
    delays = np.cumsum(gaps)
    return np.asarray(delays * (n / rate) / delays[-1], dtype=float)
