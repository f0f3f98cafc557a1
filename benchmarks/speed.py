"""Speed of the estimator: steady states per second, vectorized vs a Python loop.

    python benchmarks/speed.py [--n 100000]

One closed-loop steady state (the fixed point of TTFT, TPOT and throughput at a concurrency) is
what a sweep, the constraint view and the planner evaluate many times. Times are measured in
this run, on this machine, one core.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from gpucap.batching import closed_loop
from gpucap.engine import Coefficients
from gpucap.estimate import estimate, hardware


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000, help="configurations in the vectorized sweep")
    ap.add_argument("--loop", type=int, default=300, help="configurations in the plain loop")
    args = ap.parse_args()

    hw = hardware("meta-llama/Llama-3.3-70B-Instruct", "H100-SXM-80GB", tp=4, weight_dtype="fp8")
    coef = Coefficients.for_engine("vllm")
    rng = np.random.default_rng(0)
    c = rng.uniform(1, 512, args.n)
    i = rng.uniform(100, 8000, args.n)
    o = rng.uniform(50, 2000, args.n)

    t0 = time.perf_counter()
    closed_loop(hw, coef, concurrency=c, input_len=i, output_len=o, max_running=1024.0)
    vec_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    for k in range(args.loop):
        closed_loop(hw, coef, concurrency=c[k], input_len=i[k], output_len=o[k], max_running=1024.0)
    loop_s = time.perf_counter() - t0

    vec_rate, loop_rate = args.n / vec_s, args.loop / loop_s
    print(f"closed-loop steady states, vectorized: {args.n:,} in {vec_s:.2f} s = {vec_rate:,.0f} per second")
    print(f"closed-loop steady states, Python loop: {args.loop:,} in {loop_s:.2f} s = {loop_rate:,.0f} per second")
    print(f"vectorized / loop: {vec_rate / loop_rate:,.0f}x")

    t0 = time.perf_counter()
    reps = 5
    for _ in range(reps):
        estimate("meta-llama/Llama-3.3-70B-Instruct", "A100-SXM-80GB", 8, tp=8, input_len=3840, output_len=256)
    print(
        f"one full estimate (memory, four constraint bars, SLO search, saturation): {(time.perf_counter() - t0) / reps * 1e3:.0f} ms"
    )


if __name__ == "__main__":
    main()
