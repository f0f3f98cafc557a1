"""gpucap's own speed, measured in this run on this machine (one process, one core):

    python benchmarks/speed.py [--n 1000000] [--skip-widget]

1. estimator configurations per second: closed-loop steady states (TTFT, TPOT and throughput of
   one replica at a concurrency, input and output length), vectorized vs a plain Python loop over
   the same configurations; a dense and a mixture-of-experts model;
2. planner search time for a realistic candidate set;
3. widget update time (value change to new figure), from ``benchmarks/widget_speed.py``;
4. calibration fit time for 100 runs (four hardware set-ups x 25 concurrencies, synthetic
   measurements from known coefficients with 5% noise);
5. one full estimate.

Targets (issue "benchmarks"): >= 1,000,000 configurations/s vectorized and >= 100x the loop;
widget update < 100 ms; fit < 2 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpucap.calibration.calibrate import calibrate
from gpucap.calibration.validate import synthetic_cases
from gpucap.config import hardware
from gpucap.estimate import estimate
from gpucap.physics.batching import closed_loop
from gpucap.physics.coefficients import Coefficients
from gpucap.physics.requests import Requests
from gpucap.planning.search import plan

TRUTH = Coefficients(u_compute=0.62, u_hbm=0.71, overlap=0.3, t_overhead_s=3e-3, t_seq_s=10e-6, t_request_s=0.01)


def best_of(fn, repeats: int = 3) -> float:
    """Fastest of ``repeats`` runs, seconds (the least disturbed by other work on the machine)."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def configurations_per_second(model: str, tp: int, n: int, loop: int) -> tuple[float, float]:
    hw = hardware(model, "H100-SXM-80GB", tp=tp, weight_dtype="fp8")
    coef = Coefficients.for_engine("vllm")
    rng = np.random.default_rng(0)
    c, i, o = rng.uniform(1, 512, n), rng.uniform(100, 8000, n), rng.uniform(50, 2000, n)
    vec_s = best_of(lambda: closed_loop(hw, coef, Requests(i, o, max_running=1024.0), concurrency=c))

    def plain() -> None:
        for k in range(loop):
            closed_loop(hw, coef, Requests(i[k], o[k], max_running=1024.0), concurrency=c[k])

    loop_s = best_of(plain, 1)
    return n / vec_s, loop / loop_s


def synthetic_runs() -> pd.DataFrame:
    setups = (
        ("meta-llama/Llama-3.1-8B", "H100-SXM-80GB", 1),
        ("Qwen/Qwen3-32B", "H100-SXM-80GB", 2),
        ("meta-llama/Llama-3.3-70B-Instruct", "A100-SXM-80GB", 4),
        ("Qwen/Qwen3-30B-A3B", "H200-SXM-141GB", 1),
    )
    return synthetic_cases(setups, np.geomspace(1, 512, 25), ((2000, 300),), TRUTH, noise=0.05)


def widget_times() -> list[tuple[str, float]] | str:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    try:
        from widget_speed import measure  # type: ignore[import-not-found]
    except ImportError as err:
        return f"not measured: {err}"
    return measure()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000, help="configurations in the vectorized sweep")
    ap.add_argument("--loop", type=int, default=2000, help="configurations in the plain loop")
    ap.add_argument("--skip-widget", action="store_true", help="do not build the widget (no ipywidgets needed)")
    args = ap.parse_args()

    print("1. estimator configurations per second (closed-loop steady states, one core)")
    for label, model, tp in (
        ("dense, Llama-3.3-70B tp=4", "meta-llama/Llama-3.3-70B-Instruct", 4),
        ("MoE, Qwen3-30B-A3B tp=1", "Qwen/Qwen3-30B-A3B", 1),
    ):
        vec, loop = configurations_per_second(model, tp, args.n, args.loop)
        print(f"   {label}: vectorized {vec:,.0f}/s, Python loop {loop:,.0f}/s, ratio {vec / loop:,.0f}x")

    print("2. planner search (Llama-3.3-70B, 20 req/s, 2000/300 tokens, P99 SLOs; 3 GPUs x 1/2/4/8 x bf16/fp8 x 2 KV)")
    found = []
    question: dict[str, Any] = dict(
        input_len=2000,
        output_len=300,
        target_request_rate=20.0,
        gpus=["H100-SXM-80GB", "H200-SXM-141GB", "L40S-48GB"],
        weight_dtypes=["bf16", "fp8"],
    )

    def search() -> None:
        found.append(plan("meta-llama/Llama-3.3-70B-Instruct", **question))

    s = best_of(search, 3)
    p = found[-1]
    print(
        f"   {p.searched} options ({len(p.plans)} plans, {len(p.rejected)} rejected) in {s:.2f} s on one core (best of 3)"
    )
    print(f"   search rate {p.searched / s:.0f} options/s (target >= 120)")
    first = plan("meta-llama/Llama-3.3-70B-Instruct", check=True, **question)
    print(f"   simulation check, first in this process (its process pool starts): {first.check_s:.2f} s")
    checked = plan("meta-llama/Llama-3.3-70B-Instruct", check=True, **question)
    print(
        f"   simulation check, pool started: {checked.simulated} plans simulated in {checked.check_s:.2f} s "
        f"({os.cpu_count()} cores), recommended plan {int(checked.recommended['plan'])}"
        if checked.recommended is not None
        else f"   simulation check: {checked.simulated} plans in {checked.check_s:.2f} s, none recommended"
    )

    print("3. widget update (value change to new figure)")
    if args.skip_widget:
        print("   skipped")
    else:
        times = widget_times()
        if isinstance(times, str):
            print(f"   {times}")
        else:
            for name, secs in times:
                print(f"   {name:<24} {secs * 1e3:7.0f} ms")
            print(f"   median over inputs {statistics.median(t for _, t in times) * 1e3:.0f} ms")

    print("4. calibration fit, 100 runs (4 set-ups x 25 concurrencies, 4 free coefficients)")
    cases = synthetic_runs()
    fits = []
    s = best_of(lambda: fits.append(calibrate(cases)), 2)
    print(f"   {fits[-1].n_runs} runs, {fits[-1].n_residuals} residuals: {s:.2f} s")

    t = best_of(
        lambda: estimate("meta-llama/Llama-3.3-70B-Instruct", "A100-SXM-80GB", 8, tp=8, input_len=3840, output_len=256),
        5,
    )
    print(f"5. one full estimate (memory, four constraint bars, SLO search, saturation): {t * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
