"""The planner's tail latency against the engine loop: P90 / P99 TTFT and TPOT of one replica
under open-loop arrivals, as the planner computes them (the queueing model of
``gpucap.queueing.analytic`` with the lengths' distributions) and
as the step-level simulation (``gpucap.queueing.simulate``) runs them.

The test of agreement (``judge``): where the simulated figure is below ``CEILING`` x its SLO, the
analytic one is within ``TOLERANCE`` of it; and at the SLO's edge (simulated between half and
twice the SLO, where a plan passes or fails) the analytic one is never below it by more than
``TOLERANCE`` (an optimistic model there passes plans that fail).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpucap.config import Hardware
from gpucap.physics.coefficients import Coefficients
from gpucap.physics.memory import batch_slots, memory_limit
from gpucap.physics.requests import Requests
from gpucap.planning.capacity import simulated_run
from gpucap.queueing.analytic import open_loop_latency, summarize
from gpucap.queueing.lengths import Lengths
from gpucap.queueing.servicecurve import service_curve
from gpucap.types import QUANTILES

TOLERANCE = 0.25
CEILING = 10.0  # simulated figures above this many SLOs are not judged: the replica is overloaded
EDGE = (0.5, 2.0)  # simulated / SLO where a plan's verdict turns
METRICS = {"ttft": "ttft_s", "tpot": "tpot_s"}
BOOTSTRAP = 200  # resamples of the runs for the simulated figure's interval (``run_interval``)


@dataclass(frozen=True)
class TailCase:
    """One replica and its workload."""

    label: str
    hw: Hardware
    inp: Lengths
    out: Lengths

    @property
    def slots(self) -> float:
        """Batch slots as the planner takes them: ``max_num_seqs`` or what the KV cache holds at the
        mean request length."""
        _, held = memory_limit(self.hw, self.inp.mean + self.out.mean)
        return float(batch_slots(self.hw, held))

    @property
    def kv_slots(self) -> float:
        """Requests of mean length the KV cache holds (``memory_limit``)."""
        _, held = memory_limit(self.hw, self.inp.mean + self.out.mean)
        return float(held)

    @property
    def kv_tokens(self) -> float:
        mem, _ = memory_limit(self.hw, self.inp.mean + self.out.mean)
        return float(mem.kv_tokens_per_gpu * self.hw.layout.attn_dp)


def analytic_tail(
    case: TailCase, coef: Coefficients, rates: Sequence[float], stats: Sequence[str], burstiness: float = 1.0
) -> pd.DataFrame:
    """The planner's figures at each rate: ``{stat}`` TTFT and TPOT, and the service rate in
    ``attrs``."""
    cap = case.slots
    inp, out = case.inp, case.out
    curve = service_curve(
        case.hw,
        coef,
        Requests(inp.mean, out.mean, max_running=cap),
        input_lengths=inp,
        output_lengths=out,
        kv_slots=case.kv_slots,
    )
    lat = open_loop_latency(
        curve, request_rate=np.asarray(rates, dtype=float), burstiness=burstiness, stats=tuple(stats)
    )
    cols: dict[str, np.ndarray] = {"request_rate": np.asarray(rates, dtype=float)}
    for s in stats:
        cols[f"ttft_{s}_s"] = lat.ttft_s[s]
        cols[f"tpot_{s}_s"] = lat.tpot_s[s]
    frame = pd.DataFrame(cols)
    frame.attrs["service_rate"] = curve.service_rate
    return frame


def compare_tails(
    case: TailCase,
    coef: Coefficients,
    utilizations: Sequence[float],
    *,
    stats: Sequence[str] = ("p90", "p99"),
    num_requests: int = 4000,
    seed: int = 0,
    burstiness: float = 1.0,
    runs: int = 1,
) -> pd.DataFrame:
    """Analytic against simulated at each utilization of the analytic service rate: one row per
    utilization, statistic and metric, with ``ratio`` = analytic / simulated. ``runs``: simulated
    runs per utilization (seeds ``seed + k + 1000 j``), their requests pooled before the
    percentiles are taken: near saturation one run's P99 turns on the few long excursions it
    happens to see, and the pooled runs are one run that many times as long."""
    for s in stats:
        if s not in QUANTILES:
            raise ValueError(f"stats must be percentiles among {', '.join(QUANTILES)}, got {s!r}")
    mu = analytic_tail(case, coef, [1e-6], ("p99",), burstiness).attrs["service_rate"]
    rates = [u * mu for u in utilizations]
    ana = analytic_tail(case, coef, rates, stats, burstiness)
    rows = []
    if not (isinstance(runs, int) and runs >= 1):
        raise ValueError(f"runs must be a whole number >= 1, got {runs!r}")
    for k, (u, rate) in enumerate(zip(utilizations, rates, strict=True)):
        sims = [
            simulated_run(
                case.hw,
                coef,
                inp=case.inp,
                out=case.out,
                rate=rate,
                max_running=case.slots,
                kv_capacity_tokens=case.kv_tokens,
                burstiness=burstiness,
                seed=seed + k + 1000 * j,
                num_requests=num_requests,
            )  # fmt: skip
            for j in range(runs)
        ]
        pooled = {key: summarize(np.concatenate([getattr(sim, key) for sim in sims])) for key in METRICS.values()}
        for s in stats:
            for metric, key in METRICS.items():
                a, b = float(ana[f"{metric}_{s}_s"].iloc[k]), float(pooled[key][s])
                lo, hi = run_interval([getattr(sim, key) for sim in sims], 100.0 * QUANTILES[s], seed=seed + k)
                rows.append(
                    {
                        "case": case.label,
                        "utilization": u,
                        "request_rate": rate,
                        "stat": s,
                        "metric": metric,
                        "analytic_s": a,
                        "simulated_s": b,
                        "ratio": a / b if b > 0 else np.nan,
                        "simulated_lo_s": lo,
                        "simulated_hi_s": hi,
                    }
                )
    return pd.DataFrame(rows)


def run_interval(runs: Sequence[np.ndarray], percent: float, *, seed: int = 0) -> tuple[float, float]:
    """How far the pooled percentile of ``runs`` moves with the runs drawn: its 5th and 95th
    percentiles over ``BOOTSTRAP`` resamples of the runs with replacement (Efron and Tibshirani, An
    Introduction to the Bootstrap, 1993, ch. 13: the percentile interval; the runs, not the requests,
    are the independent draws, for requests queue behind each other). NaN with one run."""
    if len(runs) < 2:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(runs), size=(BOOTSTRAP, len(runs)))
    values = [np.nanpercentile(np.concatenate([runs[j] for j in pick]), percent) for pick in picks]
    lo, hi = np.percentile(values, [5.0, 95.0])
    return float(lo), float(hi)


def judge(frame: pd.DataFrame, *, ttft_slo_s: float, tpot_slo_s: float) -> pd.DataFrame:
    """``compare_tails``'s rows with the test of the module docstring: ``slo_s``, ``judged`` (simulated
    below ``CEILING`` SLOs), ``within`` (ratio within ``TOLERANCE`` of 1), ``edge`` (simulated
    within ``EDGE`` of the SLO) and ``optimistic`` (ratio below ``1 - TOLERANCE`` there); ``ok``
    where a judged row is within and no edge row optimistic. Where the rows carry the simulated
    figure's interval over runs (``run_interval``), ``within_interval``: the analytic figure within
    ``TOLERANCE`` of some value in it (a row that fails only there fails by the runs drawn, not
    for certain); it does not change ``ok``."""
    out = frame.copy()
    out["slo_s"] = np.where(out["metric"] == "ttft", ttft_slo_s, tpot_slo_s)
    load = out["simulated_s"] / out["slo_s"]
    out["judged"] = load < CEILING
    out["within"] = (out["ratio"] - 1.0).abs() <= TOLERANCE
    out["edge"] = (load >= EDGE[0]) & (load <= EDGE[1])
    out["optimistic"] = out["edge"] & (out["ratio"] < 1.0 - TOLERANCE)
    out["ok"] = (~out["judged"] | out["within"]) & ~out["optimistic"]
    if "simulated_lo_s" in out:
        a = out["analytic_s"]
        out["within_interval"] = (a >= (1.0 - TOLERANCE) * out["simulated_lo_s"]) & (
            a <= (1.0 + TOLERANCE) * out["simulated_hi_s"]
        )
    return out
