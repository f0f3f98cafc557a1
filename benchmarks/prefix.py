"""Prefix caching: a shared system prompt, analytic against the step-level simulation.

    python benchmarks/prefix.py [--requests 1500]

Llama-3.1-8B on one H100 (vLLM defaults), 2,000-token prompts of which a 1,000-token system
prompt is shared by every request, 200-token answers, Poisson arrivals at 30%, 60% and 85% of
the service rate without the cache. For each rate, mean TTFT and TPOT with and without the
cache: gpucap's open-loop model (``gpucap.physics.batching.open_loop`` with ``cached_tokens``) and the
simulation (``gpucap.queueing.simulate.simulate`` with ``cached_tokens`` and ``shared_tokens``). Also the
service rate (output tokens/s with every slot busy) and the requests memory holds, both ways.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from gpucap.config import hardware
from gpucap.physics.batching import closed_loop, open_loop
from gpucap.physics.coefficients import Coefficients
from gpucap.physics.memory import batch_slots, memory_limit
from gpucap.physics.requests import Requests
from gpucap.queueing.simulate import kv_capacity_tokens, simulate

MODEL, GPU = "meta-llama/Llama-3.1-8B", "H100-SXM-80GB"
INPUT, OUTPUT, SYSTEM = 2000, 200, 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1500)
    args = ap.parse_args()
    hw = hardware(MODEL, GPU)
    coef = Coefficients.for_engine("vllm")
    plain_mem = memory_limit(hw, INPUT + OUTPUT)[1]
    shared_mem = memory_limit(hw, INPUT + OUTPUT, shared_tokens=SYSTEM)[1]
    cap = batch_slots(hw, plain_mem)
    cache = {"without": 0.0, "with": float(SYSTEM)}
    service = {
        k: float(closed_loop(hw, coef, Requests(INPUT, OUTPUT, cached_tokens=h), concurrency=cap).output_tokens_per_s)
        for k, h in cache.items()
    }
    print(f"{MODEL} on {GPU}: {INPUT} in ({SYSTEM} shared system prompt) / {OUTPUT} out")
    print(f"memory holds {plain_mem:.0f} requests without the cache, {shared_mem:.0f} with (one copy of the prompt)")
    print(f"service rate: {service['without']:,.0f} output tokens/s without, {service['with']:,.0f} with the cache")
    base_rate = service["without"] / OUTPUT
    kv = kv_capacity_tokens(hw, INPUT + OUTPUT)
    print("\n| load | cache | TTFT ms analytic / simulated | TPOT ms analytic / simulated |")
    print("|---|---|---|---|")
    t0 = time.perf_counter()
    for load in (0.3, 0.6, 0.85):
        rate = load * base_rate
        for name, h in cache.items():
            a = open_loop(hw, coef, Requests(INPUT, OUTPUT, max_running=cap, cached_tokens=h), request_rate=rate)
            sim = simulate(
                hw,
                coef,
                request_rate=rate,
                num_requests=args.requests,
                input_len=INPUT,
                output_len=OUTPUT,
                max_running=cap,
                kv_capacity_tokens=kv,
                cached_tokens=h,
                shared_tokens=h,
            )
            print(
                f"| {load:.0%} | {name} | {float(a.ttft_s) * 1e3:.0f} / {np.nanmean(sim.ttft_s) * 1e3:.0f} "
                f"| {float(a.tpot_s) * 1e3:.1f} / {np.nanmean(sim.tpot_s) * 1e3:.1f} |"
            )
    print(f"\n({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
