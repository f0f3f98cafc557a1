"""The long jobs on one core and on every core (``gpucap.parallel``): wall times, and whether the
answers are the same.

    python benchmarks/parallel.py [--jobs 2] [--errors] [--dask]

1. the public set validated by simulation (every row's benchmark run, as ``gpucap validate``);
2. one open-loop run of 3,000 requests (Poisson at 5/s, ten minutes, dataset-like lengths);
3. with ``--errors``: ``gpucap errors`` leaving one source out and one model out (closed forms;
   long: one fit per engine per group left out);
4. with ``--dask``: (1) again on a ``LocalCluster`` of ``--jobs`` single-threaded workers.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import pandas as pd

from gpucap.calibration.corrections import apply_corrections, read_corrections
from gpucap.calibration.validate import read_cases, validate

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT.parent / "shared" / "data" / "measured-public.csv"


def _timed(label: str, fn):  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    out = fn()
    print(f"   {label}: {time.perf_counter() - started:.1f} s", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--errors", action="store_true", help="also time gpucap errors with loso and lomo (long)")
    ap.add_argument("--dask", action="store_true", help="also validate on a LocalCluster")
    args = ap.parse_args()
    cases = read_cases(CASES)
    cases = apply_corrections(cases, read_corrections(ROOT / "data" / "measured-corrections.csv"), where="corrections")

    print(f"1. the public set validated by simulation ({len(cases)} rows)")
    serial = _timed("serially", lambda: validate(cases, n_jobs=1))
    spread = _timed(f"{args.jobs} processes", lambda: validate(cases, n_jobs=args.jobs))
    print(f"   same table: {serial.equals(spread)}")
    if args.dask:
        from distributed import Client, LocalCluster

        with LocalCluster(n_workers=args.jobs, threads_per_worker=1, dashboard_address=":0") as cluster:
            with Client(cluster) as client:
                on_dask = _timed(f"LocalCluster of {args.jobs}", lambda: validate(cases, dask=client))
        print(f"   same table: {serial.equals(on_dask)}")

    print("2. one open-loop run of 3,000 requests (Llama-3.1-8B on H100, 5/s, 1,000 / 200 tokens, dataset lengths)")
    from gpucap.config import hardware
    from gpucap.physics.coefficients import Coefficients
    from gpucap.queueing.lengths import Lengths
    from gpucap.queueing.loads import Load
    from gpucap.queueing.simulate import run_benchmark

    hw = hardware("meta-llama/Llama-3.1-8B-Instruct", "H100-SXM-80GB")
    load = Load("open-loop", 3000, request_rate=5.0)
    inp, out = Lengths.exponential(1000.0), Lengths.exponential(200.0)
    coef = Coefficients.for_engine("vllm")
    _timed("simulated", lambda: run_benchmark(hw, coef, load, input_len=inp, output_len=out))

    if args.errors:
        from gpucap.calibration.analysis import error_tables

        print("3. error tables, leave one source out and leave one model out (closed forms)")
        kw = dict(by=("source_id", "load_mode"), variants=("loso", "lomo"), method="closed-form")
        table = _timed(f"{args.jobs} processes", lambda: error_tables(cases, n_jobs=args.jobs, **kw))
        pd.set_option("display.width", 200)
        print(table.groupby("variant")["n"].sum().to_string())


if __name__ == "__main__":
    main()
