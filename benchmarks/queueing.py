"""Open-loop tail latency: the analytic model (gpucap.queueing.analytic) against the step-level simulation
(gpucap.queueing.simulate), and the speed of both.

    python benchmarks/queueing.py [--requests 3000] [--quick]

For each case (model, GPU, engine, lengths, batch slots) and for Poisson and burstiness-0.5
arrivals, prints mean / P50 / P95 / P99 of TTFT, TPOT and e2e over a range of utilizations as
``analytic / simulated (simulated / analytic - 1)``, the closed-loop TPOT at the simulated mean
batch (to tell the queueing layer's error from the closed-loop steady state's), then lists where
the two disagree by more than 20%, and checks the planner's answer: the rate
``max_request_rate`` gives for P99 TTFT <= 2 s and P99 TPOT <= 0.1 s, simulated. Times are
measured in this run, on this machine, one core; simulated figures move by 5-25% from seed to seed
near saturation.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import numpy as np

from gpucap.config import EngineConfig, Hardware, hardware
from gpucap.physics.batching import closed_loop
from gpucap.physics.coefficients import Coefficients
from gpucap.physics.memory import memory_limit
from gpucap.physics.requests import Requests
from gpucap.queueing.analytic import max_request_rate, open_loop_latency
from gpucap.queueing.servicecurve import service_curve
from gpucap.queueing.simulate import Simulation, simulate
from gpucap.types import STATISTICS

UTILIZATIONS = (0.3, 0.6, 0.8, 0.9, 0.95)
BURSTINESS = (1.0, 0.5)
DISAGREE = 0.2
TTFT_SLO_S, TPOT_SLO_S = 2.0, 0.1
NAMES = {"ttft_s": "TTFT", "tpot_s": "TPOT", "e2e_s": "e2e"}


@dataclass(frozen=True)
class Case:
    label: str
    hw: Hardware
    input_len: float
    output_len: float

    @property
    def slots(self) -> float:
        """Batch slots: the engine's max_num_seqs or what the KV cache holds at input + output."""
        return min(
            float(self.hw.engine.max_num_seqs or np.inf), memory_limit(self.hw, self.input_len + self.output_len)[1]
        )

    @property
    def kv_tokens(self) -> float:
        """KV cache of the replica in tokens (requests it holds at input + output, times that)."""
        return memory_limit(self.hw, self.input_len + self.output_len)[1] * (self.input_len + self.output_len)


def cases() -> list[Case]:
    return [
        Case(
            "Llama-3.1-8B, 1x H100, vLLM, chat 200 in / 1000 out",
            hardware("meta-llama/Llama-3.1-8B", "H100-SXM-80GB"),
            200,
            1000,
        ),
        Case(
            "Llama-3.1-8B, 1x H100, vLLM, prompt-heavy 2000 in / 200 out",
            hardware("meta-llama/Llama-3.1-8B", "H100-SXM-80GB"),
            2000,
            200,
        ),
        Case(
            "Llama-3.3-70B fp8, 2x H100 TP2, vLLM max_num_seqs 64, 500 in / 500 out",
            hardware(
                "meta-llama/Llama-3.3-70B-Instruct",
                "H100-SXM-80GB",
                tp=2,
                weight_dtype="fp8",
                engine=EngineConfig(engine="vllm", max_num_seqs=64),
            ),
            500,
            500,
        ),
    ]


def fmt_s(x: float) -> str:
    if not np.isfinite(x):
        return "inf"
    return f"{x * 1e3:.1f}ms" if x < 1 else f"{x:.2f}s"


def cell(analytic: float, simulated: float) -> str:
    dev = simulated / analytic - 1 if np.isfinite(analytic) and analytic > 0 else np.nan
    return f"{fmt_s(analytic)} / {fmt_s(simulated)} ({dev:+.0%})"


def compare(
    case: Case, coef: Coefficients, burstiness: float, requests: int, utilizations: tuple[float, ...]
) -> list[str]:
    """Print the table of one case and arrival pattern; return the disagreements."""
    slots = case.slots
    kw = dict(input_len=case.input_len, output_len=case.output_len, max_running=slots)
    curve = service_curve(case.hw, coef, Requests(**kw))
    mu = curve.service_rate
    print(f"\n{case.label}, burstiness {burstiness:g}: {slots:.0f} slots, service rate {mu:.2f} requests/s")
    print(f"{'util':>5} {'':5} " + " ".join(f"{s + ' analytic / sim':>30}" for s in STATISTICS))
    lat = open_loop_latency(curve, request_rate=np.array(utilizations) * mu, burstiness=burstiness)
    disagree = []
    for k, u in enumerate(utilizations):
        t0 = time.perf_counter()
        sim = simulate(
            case.hw,
            coef,
            request_rate=u * mu,
            num_requests=requests,
            kv_capacity_tokens=case.kv_tokens,
            burstiness=burstiness,
            seed=k,
            **kw,
        )
        sim_s = time.perf_counter() - t0
        for name, label in NAMES.items():
            row = []
            for s in STATISTICS:
                a, b = float(getattr(lat, name)[s][k]), sim.summary[name][s]
                row.append(f"{cell(a, b):>30}")
                if abs(b / a - 1) > DISAGREE:
                    disagree.append(
                        f"{case.label}, b={burstiness:g}, u={u}: {label} {s} analytic {fmt_s(a)}, sim {fmt_s(b)} ({b / a - 1:+.0%})"
                    )
            print(f"{u:>5} {label:5} " + " ".join(row))
        at_batch = closed_loop(case.hw, coef, Requests(**kw), concurrency=max(sim.mean_running, 1.0))
        print(
            f"{'':>5} sim: {sim.steps} steps in {sim_s:.1f} s, mean batch {sim.mean_running:.1f}, "
            f"P(wait) analytic {float(lat.wait_probability[k]):.3f}; closed-loop TPOT at the simulated batch "
            f"{fmt_s(float(at_batch.tpot_s))} vs simulated mean {fmt_s(sim.summary['tpot_s']['mean'])}"
        )
    return disagree


def planner_check(case: Case, coef: Coefficients, burstiness: float, requests: int) -> None:
    """The rate max_request_rate gives for the SLOs, and the simulated P99s at it."""
    kw = dict(input_len=case.input_len, output_len=case.output_len, max_running=case.slots)
    curve = service_curve(case.hw, coef, Requests(**kw))
    rate = max_request_rate(curve, ttft_slo_s=TTFT_SLO_S, tpot_slo_s=TPOT_SLO_S, burstiness=burstiness)
    mu = curve.service_rate
    out = [f"{case.label}, b={burstiness:g}: max rate {rate:.2f}/s ({rate / mu:.1%} of {mu:.2f}/s)"]
    for f in (0.9, 1.0):
        sim: Simulation = simulate(
            case.hw,
            coef,
            request_rate=f * rate,
            num_requests=requests,
            kv_capacity_tokens=case.kv_tokens,
            burstiness=burstiness,
            seed=7,
            **kw,
        )
        p99_ttft, p99_tpot = sim.summary["ttft_s"]["p99"], sim.summary["tpot_s"]["p99"]
        ok = p99_ttft <= TTFT_SLO_S and p99_tpot <= TPOT_SLO_S
        out.append(
            f"at {f:.0%}: sim P99 TTFT {fmt_s(p99_ttft)}, P99 TPOT {fmt_s(p99_tpot)} ({'meets' if ok else 'misses'})"
        )
    print("  " + "; ".join(out))


def speed(all_cases: list[Case], coef: Coefficients) -> None:
    reps = 20
    for case in all_cases:
        kw = dict(input_len=case.input_len, output_len=case.output_len, max_running=case.slots)
        mu = service_curve(case.hw, coef, Requests(**kw)).service_rate
        t0 = time.perf_counter()
        for _ in range(reps):
            open_loop_latency(service_curve(case.hw, coef, Requests(**kw)), request_rate=0.9 * mu)
        one = (time.perf_counter() - t0) / reps
        t0 = time.perf_counter()
        for _ in range(reps):
            open_loop_latency(
                service_curve(case.hw, coef, Requests(**kw)), request_rate=np.linspace(0.02, 0.98, 40) * mu
            )
        forty = (time.perf_counter() - t0) / reps
        t0 = time.perf_counter()
        for _ in range(reps):
            max_request_rate(service_curve(case.hw, coef, Requests(**kw)), ttft_slo_s=TTFT_SLO_S, tpot_slo_s=TPOT_SLO_S)
        search = (time.perf_counter() - t0) / reps
        print(
            f"  {case.label} ({case.slots:.0f} slots): open_loop_latency {one * 1e3:.1f} ms for one rate, "
            f"{forty * 1e3:.1f} ms for 40; max_request_rate {search * 1e3:.1f} ms"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=3000, help="recorded requests per simulated run")
    ap.add_argument("--quick", action="store_true", help="one case, Poisson, three utilizations")
    args = ap.parse_args()
    coef = Coefficients.for_engine("vllm")
    all_cases = cases()
    run_cases = all_cases[:1] if args.quick else all_cases
    burst = BURSTINESS[:1] if args.quick else BURSTINESS
    utils = (0.3, 0.6, 0.85) if args.quick else UTILIZATIONS

    print("Speed (per call):")
    speed(all_cases, coef)

    disagree: list[str] = []
    t0 = time.perf_counter()
    for case in run_cases:
        for b in burst:
            disagree += compare(case, coef, b, args.requests, utils)
    print(f"\n(simulations: {time.perf_counter() - t0:.0f} s)")
    print(f"\nWhere analytic and simulated differ by more than {DISAGREE:.0%}:")
    for line in disagree or ["  nowhere"]:
        print("  " + line)

    print(
        f"\nPlanner check: max_request_rate for P99 TTFT <= {TTFT_SLO_S:g} s and P99 TPOT <= {TPOT_SLO_S:g} s, simulated:"
    )
    for case in run_cases:
        for b in burst:
            planner_check(case, coef, b, 2 * args.requests)


if __name__ == "__main__":
    main()
