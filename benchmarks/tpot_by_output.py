"""TPOT by output length: the step-level simulation against the queueing model, bin by bin.

    python benchmarks/tpot_by_output.py ["70B H100 tp4 fp8, 16k"] [--utilization 0.9] [--requests 8000]

A request's TPOT is its life over its output tokens, so its spread depends on how many tokens it
has: the prompts a short life meets add a sum that varies more per token. The planner's TPOT
percentiles (``gpucap.queueing.arrivals.tpot_quantile``) are a mixture over output-length bins
(``ServiceCurve.spread_output_len``). This prints, for one case of
``benchmarks/tailgrid.py`` at one load, the simulated P50/P90/P99 TPOT of the requests in each
output-length bin (two runs pooled) beside the model's with the spread length set to the bin's
median, and the same with every prompt a life meets entering as requests finish
(``gated_stalls`` for the whole life, not only for the arrivals that wait): how much of the
model's spread the gated admissions of a full replica would take away.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np
from joblib import Parallel, delayed

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tailgrid  # noqa: E402

from gpucap.physics.coefficients import Coefficients  # noqa: E402
from gpucap.physics.requests import Requests  # noqa: E402
from gpucap.planning.capacity import simulated_run  # noqa: E402
from gpucap.planning.tailcheck import TailCase  # noqa: E402
from gpucap.queueing.arrivals import Parts, arrival_parts, gated_stalls, tpot_quantile  # noqa: E402
from gpucap.queueing.servicecurve import ServiceCurve, service_curve  # noqa: E402

LEVELS = (0.5, 0.9, 0.99)
EDGES = (1, 60, 120, 200, 300, 500, 100_000)  # output-length bins
WARMUP = 0.2  # the simulation's default share of requests left out at the start
SEEDS = (701, 702)


def simulated(case: TailCase, coef: Coefficients, rate: float, n: int, seed: int) -> tuple[np.ndarray, ...]:
    """TPOT and output length of each recorded request of one run (the lengths drawn as
    ``simulated_run`` draws them)."""
    rng = np.random.default_rng(seed)
    case.inp.sample(n, rng)
    outputs = np.round(case.out.sample(n, rng))[int(np.floor(WARMUP * n)) :]
    sim = simulated_run(
        case.hw, coef, inp=case.inp, out=case.out, rate=rate, max_running=case.slots,
        kv_capacity_tokens=case.kv_tokens, burstiness=1.0, seed=seed, num_requests=n,
    )  # fmt: skip
    return sim.tpot_s, outputs


def model(curve: ServiceCurve, parts: Parts, output_len: float | None = None) -> list[float]:
    """The model's TPOT percentiles: over the workload's output-length bins, or at one length."""
    if output_len is not None:
        curve = dataclasses.replace(curve, spread_output_len=np.array([output_len]), output_weights=np.array([1.0]))
    return [float(tpot_quantile(curve, parts, q)[0]) for q in LEVELS]


def ms(values: list[float] | np.ndarray) -> str:
    return " / ".join(f"{v * 1e3:.0f}" for v in values)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("case", nargs="?", default="70B H100 tp4 fp8, 16k", help="a case label of benchmarks/tailgrid.py")
    ap.add_argument("--utilization", type=float, default=0.9, help="share of the analytic service rate")
    ap.add_argument("--requests", type=int, default=8000, help="requests per run (two runs)")
    a = ap.parse_args()
    found = [c for c in tailgrid.cases() if c.label == a.case]
    if not found:
        sys.exit(f"no case {a.case!r}; the cases: {', '.join(c.label for c in tailgrid.cases())}")
    case, coef = found[0], Coefficients.for_engine("vllm")
    curve = service_curve(
        case.hw, coef, Requests(case.inp.mean, case.out.mean, max_running=case.slots),
        input_lengths=case.inp, output_lengths=case.out, kv_slots=case.kv_slots,
    )  # fmt: skip
    rate = a.utilization * curve.service_rate
    runs = Parallel(n_jobs=2)(delayed(simulated)(case, coef, rate, a.requests, s) for s in SEEDS)
    tpot, outputs = (np.concatenate([r[k] for r in runs]) for k in (0, 1))
    ok = np.isfinite(tpot)
    tpot, outputs = tpot[ok], outputs[ok]
    parts = arrival_parts(curve, np.array([rate]), 1.0, curve.service_scv)
    gated = dataclasses.replace(parts, stalls=gated_stalls(parts.stalls, curve.service_scv))
    print(
        f"{case.label} at {a.utilization:.0%} of mu = {curve.service_rate:.3f} requests/s; share that waits "
        f"{float(parts.states.wait_probability[0]):.3f}; {curve.spread_output_len.size} output-length bins"
    )
    print(
        f"TPOT P50 / P90 / P99 ms ({len(tpot)} simulated requests); model: over the output-length bins for all, "
        "at the bin's median output length for each"
    )
    print(f"{'output tokens':>16} {'requests':>8} {'simulated':>17} {'model':>17} {'all stalls gated':>17}")
    levels = list(LEVELS)
    print(
        f"{'all':>16} {len(tpot):>8} {ms(np.quantile(tpot, levels)):>17} "
        f"{ms(model(curve, parts)):>17} {ms(model(curve, gated)):>17}"
    )
    for lo, hi in zip(EDGES[:-1], EDGES[1:], strict=False):
        inside = (outputs >= lo) & (outputs < hi)
        if inside.sum() < 50:
            continue
        median = float(np.median(outputs[inside]))
        print(
            f"{f'{lo}-{hi - 1} ({median:.0f})':>16} {int(inside.sum()):>8} {ms(np.quantile(tpot[inside], levels)):>17} "
            f"{ms(model(curve, parts, median)):>17} {ms(model(curve, gated, median)):>17}"
        )


if __name__ == "__main__":
    main()
