"""What one replica carries within the SLOs, and how many replicas a load needs (the planner's
per-option arithmetic; ``gpucap.planning.search`` searches the options).

Rate and output-token targets use the queueing model (``gpucap.queueing.analytic``) at the statistic the
SLO names; concurrency targets use the closed loop (means). ``simulated`` checks a plan with the
step-level simulation (``gpucap.queueing.simulate``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpucap.config import SLO, Hardware
from gpucap.options import option
from gpucap.physics.batching import closed_loop
from gpucap.physics.coefficients import Coefficients
from gpucap.physics.memory import charged_tokens_per_layer
from gpucap.physics.requests import Requests
from gpucap.queueing.analytic import max_request_rate, open_loop_latency
from gpucap.queueing.lengths import Lengths
from gpucap.queueing.servicecurve import ServiceCurve, service_curve
from gpucap.queueing.simulate import Simulation, simulate
from gpucap.types import QUANTILES

SIMULATED_REQUESTS = 2000  # per check; the first 20% are warm-up


MAX_BURST_MARGIN = 10.0  # 1,000% above the target: beyond it the "margin" is the plan


@dataclass(frozen=True)
class Headroom:
    """Spare replicas for failures (N+k) and rolling upgrades, and a margin for bursts."""

    failure_spares: int = option(1, kind="count", help="N+k replicas for failures (default 1)")
    upgrade_spares: int = option(0, kind="count", help="replicas out during a rolling upgrade (default 0)")
    burst_margin: float = option(0.2, kind="non_negative_float", help="capacity above the target, 0.2 = 20% (default)")

    def __post_init__(self) -> None:
        for name in ("failure_spares", "upgrade_spares"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 0:
                raise ValueError(f"{name} must be a whole number >= 0, got {v!r}")
        if not (math.isfinite(self.burst_margin) and 0 <= self.burst_margin <= MAX_BURST_MARGIN):
            raise ValueError(
                f"burst_margin must be in [0, {MAX_BURST_MARGIN:g}] (0.2 = 20% above the target), got {self.burst_margin!r}"
            )

    @property
    def spares(self) -> int:
        return self.failure_spares + self.upgrade_spares


def replicas_needed(load: float, capacity_per_replica: float, headroom: Headroom) -> tuple[int, int]:
    """``(serving, total)``: ``serving = ceil(load x (1 + burst) / capacity)`` replicas and
    ``total = serving + spares`` (seed 2). A load a hair above a whole multiple of the capacity
    (rounding noise below 1e-9 relative) does not add a replica."""
    if not capacity_per_replica > 0:
        raise ValueError(f"capacity_per_replica must be positive, got {capacity_per_replica!r}")
    need = load * (1.0 + headroom.burst_margin) / capacity_per_replica
    serving = max(1, math.ceil(need - 1e-9 * need))
    return serving, serving + headroom.spares


@dataclass(frozen=True)
class Load:
    """One replica's share of the target, and how fast it is served."""

    capacity: float  # requests/s, or requests in flight for a concurrency target
    ttft_s: float
    tpot_s: float
    utilization: float
    output_tps: float  # of the whole fleet at target
    comm_share: float


def ttft_extra_s(hw: Hardware, coef: Coefficients, inp: Lengths, out: Lengths, stat: str) -> float:
    """Extra prefill time of the prompt at the statistic's quantile over the mean prompt, alone
    on the replica: ``TTFT(I_q) - TTFT(I_mean)`` at concurrency 1: an option whose ``stat`` prompt
    alone misses the TTFT SLO is rejected before the queueing model (which carries the lengths'
    spread itself) is asked."""
    if inp.is_fixed or stat == "mean":
        return 0.0
    q = QUANTILES[stat]
    i_q = inp.quantile(q)
    pts = closed_loop(hw, coef, Requests(np.array([i_q, inp.mean]), out.mean), concurrency=1.0)
    return float(max(pts.ttft_s[0] - pts.ttft_s[1], 0.0))


def rate_load(
    hw: Hardware,
    coef: Coefficients,
    *,
    inp: Lengths,
    out: Lengths,
    rate: float,
    slo: SLO,
    burstiness: float,
    headroom: Headroom,
    curve: ServiceCurve,
) -> Load | str:
    """Open loop (requests/s): the replica's rate within ``slo`` at its statistic (the queueing
    model on ``curve``, ``replica_curve``'s, with the KV cache's slots counted), the replicas
    ``rate`` needs with ``headroom``, and the figures at the rate each then carries; a string
    saying why where no rate meets the SLOs."""
    stat, ttft_slo_s, tpot_slo_s = slo.statistic, slo.ttft_s, slo.tpot_s
    extra = ttft_extra_s(hw, coef, inp, out, stat)
    if extra >= ttft_slo_s:
        q = QUANTILES[stat]
        return f"misses TTFT: the {stat} prompt ({inp.quantile(q):.0f} tokens) alone takes {extra:.2f} s more than the mean one"
    # one output token has no TPOT: only the TTFT SLO applies
    tpot_slo = tpot_slo_s if out.mean > 1 else None
    # the queueing model carries the lengths' spread (each request's own prompt, the queue for the
    # token budget, the stalls): ``extra`` above only rules out a prompt that alone misses the SLO
    mu = max_request_rate(curve, ttft_slo_s=ttft_slo_s, tpot_slo_s=tpot_slo, stat=stat, burstiness=burstiness)
    if mu <= 0:
        trickle = open_loop_latency(curve, request_rate=np.array([1e-6]), stats=(stat,), burstiness=burstiness)
        ttft, tpot = float(trickle.ttft_s[stat][0]), float(trickle.tpot_s[stat][0])
        if ttft > ttft_slo_s:
            return f"misses TTFT: {stat} TTFT {ttft:.3g} s > {ttft_slo_s:g} s even with one request at a time"
        return f"misses TPOT: {stat} TPOT {tpot * 1e3:.3g} ms > {tpot_slo_s * 1e3:g} ms even with one request at a time"
    serving, _ = replicas_needed(rate, mu, headroom)
    lat = open_loop_latency(
        curve, request_rate=np.array([rate / serving]), stats=tuple({stat, "mean"}), burstiness=burstiness
    )
    in_system = np.clip(mean_in_system(rate / serving, lat), 1.0, curve.slots)  # the link share beyond R is R's
    return Load(
        capacity=mu,
        ttft_s=float(lat.ttft_s[stat][0]),
        tpot_s=float(lat.tpot_s[stat][0]) if out.mean > 1 else math.nan,
        utilization=float(lat.utilization[0]),
        output_tps=rate * out.mean,
        comm_share=float(np.interp(in_system, np.arange(1, curve.slots + 1), curve.comm_share)),
    )


def replica_curve(
    hw: Hardware, coef: Coefficients, *, inp: Lengths, out: Lengths, cap: float, kv_slots: float | None = None
) -> ServiceCurve:
    """One replica's ``service_curve`` at the workload's mean lengths and their spread, up to
    ``cap`` batch slots, with ``kv_slots`` requests of mean length in its KV cache (None: not
    counted); its last point is the full batch (``ServiceCurve.comm_share[-1]``: the link's
    share of a decode step with every slot busy)."""
    served = Requests(inp.mean, out.mean, max_running=cap)
    return service_curve(hw, coef, served, input_lengths=inp, output_lengths=out, kv_slots=kv_slots)


def mean_in_system(rate: float, lat: Any) -> float:
    """Little's law: requests in a replica = arrival rate x mean time in it."""
    return float(rate * lat.e2e_s["mean"][0])


def concurrency_load(
    hw: Hardware,
    coef: Coefficients,
    *,
    inp: Lengths,
    out: Lengths,
    cap: float,
    concurrency: float,
    slo: SLO,
    headroom: Headroom,
) -> Load | str:
    """Closed loop (requests kept in flight): the largest concurrency per replica whose mean
    TTFT and TPOT meet the SLOs (the closed loop gives means: the SLO's statistic is not used),
    on a grid up to the batch slots."""
    ttft_slo_s, tpot_slo_s = slo.ttft_s, slo.tpot_s
    grid = np.unique(np.round(np.geomspace(1, max(cap, 1.0), 400)))
    pts = closed_loop(hw, coef, Requests(inp.mean, out.mean, max_running=cap), concurrency=grid)
    ok = (pts.ttft_s <= ttft_slo_s) & (pts.tpot_s <= tpot_slo_s)
    if not ok[0]:
        if pts.ttft_s[0] > ttft_slo_s:
            return f"misses TTFT: mean TTFT {pts.ttft_s[0]:.3g} s > {ttft_slo_s:g} s even with one request in flight"
        return f"misses TPOT: mean TPOT {pts.tpot_s[0] * 1e3:.3g} ms > {tpot_slo_s * 1e3:g} ms even with one request in flight"
    bad = np.flatnonzero(~ok)
    c_max = float(grid[-1] if bad.size == 0 else grid[bad[0] - 1])
    serving, _ = replicas_needed(concurrency, c_max, headroom)
    at = closed_loop(hw, coef, Requests(inp.mean, out.mean, max_running=cap), concurrency=concurrency / serving)
    top = closed_loop(hw, coef, Requests(inp.mean, out.mean, max_running=cap), concurrency=cap)
    return Load(
        capacity=c_max,
        ttft_s=float(at.ttft_s),
        tpot_s=float(at.tpot_s),
        utilization=float(at.requests_per_s / top.requests_per_s),
        output_tps=float(at.output_tokens_per_s) * serving,
        comm_share=float(at.decode_step.comm_share),
    )


def simulated_run(
    hw: Hardware,
    coef: Coefficients,
    *,
    inp: Lengths,
    out: Lengths,
    rate: float,
    max_running: float,
    kv_capacity_tokens: float,
    burstiness: float,
    seed: int = 0,
    num_requests: int = SIMULATED_REQUESTS,
) -> Simulation:
    """One replica at ``rate`` requests/s by the step-level simulation (``gpucap.queueing.simulate``),
    ``num_requests`` recorded with lengths drawn from the distributions: the check of the queueing
    model's answer, which schedules whole prompt chunks as an engine does."""
    rng = np.random.default_rng(seed)
    held = float(charged_tokens_per_layer(hw.spec, hw.layout, hw.kv_dtype, inp.mean + out.mean, hw.engine.engine))
    # a sliding window holds fewer tokens than a request has: the simulation charges whole
    # requests, so its capacity is scaled by the tokens held per token of context
    kv_capacity_tokens *= (inp.mean + out.mean) / max(held, 1.0)
    return simulate(
        hw,
        coef,
        request_rate=rate,
        num_requests=num_requests,
        input_len=inp.sample(num_requests, rng),
        output_len=out.sample(num_requests, rng),
        max_running=max_running,
        kv_capacity_tokens=kv_capacity_tokens,
        burstiness=burstiness,
        seed=rng,
    )
