"""Sizing from a trace: the time and peak memory to size a synthetic trace with
``gpucap plan --trace``, and the replicas found by replaying it against the analytic plan's.

    python benchmarks/trace.py [--requests 100000] [--days 0] [--jobs N] [--dask] [--replay-replicas N]

The trace is synthetic and written to benchmarks/out/ an hour at a time (the generator's memory
is one hour's requests):

- ``--days 0`` (default): Poisson arrivals over one hour;
- ``--days D``: D days of traffic with a daily cycle, the hourly rate following
  ``1 + 0.5 sin(2 pi (h - 9) / 24)`` (peak mid-afternoon, trough before dawn, 3:1), Poisson
  within each hour (``--requests 10000000 --days 30``: a synthetic month).

Prompts and answers are drawn from long-tailed (exponential) lengths with means 1,000 and 250
tokens, so the analytic plan and the replay see the same traffic. The option is Llama-3.1-8B on
H100 in fp8 at vLLM's defaults, p99 TTFT <= 2 s and p99 TPOT <= 50 ms. ``--dask`` sizes on a
``LocalCluster`` of ``--jobs`` single-threaded workers (a scheduler started here, its address
passed with ``--dask``). The peak memory printed is the largest resident set of one process: the
command, a worker it started, or a Dask worker.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent / "out"
HOUR_S = 3600.0


def hourly_weights(days: int) -> np.ndarray:
    """Each hour's share of the requests: a daily cycle 1 + 0.5 sin(2 pi (h - 9) / 24)."""
    hours = np.arange(24 * days)
    w = 1.0 + 0.5 * np.sin(2 * np.pi * ((hours % 24) - 9) / 24)
    return w / w.sum()


def write_trace(path: Path, requests: int, days: int, seed: int = 0) -> None:
    """``requests`` requests over ``days`` days (one hour when 0) as CSV, an hour at a time."""
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(requests, hourly_weights(days)) if days else np.array([requests])
    with path.open("w") as f:
        f.write("arrival_s,input_tokens,output_tokens\n")
        for h, n in enumerate(counts):
            t = h * HOUR_S + np.sort(rng.uniform(0.0, HOUR_S, n))
            inp = np.maximum(1, np.round(rng.exponential(1000.0, n))).astype(int)
            out = np.maximum(1, np.round(rng.exponential(250.0, n))).astype(int)
            f.write("".join(f"{a:.4f},{i},{o}\n" for a, i, o in zip(t, inp, out, strict=True)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--days", type=int, default=0, help="days of traffic with a daily cycle (0: one hour)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--dask", action="store_true", help="size on a LocalCluster of --jobs workers")
    ap.add_argument("--replay-replicas", type=int, default=None)
    args = ap.parse_args()
    OUT.mkdir(exist_ok=True)
    path = OUT / f"trace-{args.requests}-{args.days}d.csv"
    if not path.exists():
        t0 = time.perf_counter()
        write_trace(path, args.requests, args.days)
        print(f"wrote {path} ({path.stat().st_size / 1e6:,.0f} MB) in {time.perf_counter() - t0:.0f} s")
    cmd = [sys.executable, "-m", "gpucap", "plan", "--model", "meta-llama/Llama-3.1-8B", "--trace", str(path),
           "--gpus", "H100-SXM-80GB", "--weight-dtypes", "fp8", "--kv-dtypes", "auto", "--ttft-slo", "2",
           "--tpot-slo", "0.05", "--jobs", str(args.jobs), "--quiet"]  # fmt: skip
    if args.replay_replicas:
        cmd += ["--replay-replicas", str(args.replay_replicas)]
    cluster = None
    if args.dask:
        from distributed import LocalCluster

        cluster = LocalCluster(n_workers=args.jobs, threads_per_worker=1, dashboard_address=":0")
        cmd += ["--dask", cluster.scheduler_address]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    print(done.stdout + done.stderr)
    if cluster is not None:
        cluster.close()  # its workers are reaped here: their peak joins the children's below
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KiB -> MiB, Linux
    where = f"a LocalCluster of {args.jobs}" if args.dask else f"{args.jobs} process(es)"
    print(f"wall time, reading and planning included: {wall:.0f} s on {where}")
    print(f"peak memory of one process (the command, a worker): {peak:,.0f} MiB")


if __name__ == "__main__":
    main()
