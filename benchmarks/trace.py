"""Sizing from a trace: the time to size a one-hour trace of 100,000 requests, and the replicas
found by replaying it against the analytic plan's.

    python benchmarks/trace.py [--requests 100000] [--replay-replicas N]

The trace is synthetic and written to benchmarks/out/: Poisson arrivals over one hour, prompts
and answers drawn from long-tailed (exponential) lengths with means 1,000 and 250 tokens, so the
analytic plan and the replay see the same traffic. The option is Llama-3.1-8B on H100 in fp8 at
vLLM's defaults, p99 TTFT <= 2 s and p99 TPOT <= 50 ms.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

OUT = Path(__file__).resolve().parent / "out"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--replay-replicas", type=int, default=None)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    n = args.requests
    arrival = np.sort(rng.uniform(0.0, 3600.0, n))
    inp = np.maximum(1, np.round(rng.exponential(1000.0, n))).astype(int)
    out = np.maximum(1, np.round(rng.exponential(250.0, n))).astype(int)
    OUT.mkdir(exist_ok=True)
    path = OUT / f"trace-{n}.csv"
    pd.DataFrame({"arrival_s": arrival, "input_tokens": inp, "output_tokens": out}).to_csv(path, index=False)
    cmd = [sys.executable, "-m", "gpucap", "plan", "--model", "meta-llama/Llama-3.1-8B", "--trace", str(path),
           "--gpus", "H100-SXM-80GB", "--weight-dtypes", "fp8", "--kv-dtypes", "auto", "--ttft-slo", "2",
           "--tpot-slo", "0.05"]  # fmt: skip
    if args.replay_replicas:
        cmd += ["--replay-replicas", str(args.replay_replicas)]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    print(done.stdout + done.stderr)
    print(f"wall time, reading and planning included: {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
