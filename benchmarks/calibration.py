"""Calibration on the published measurements: error before and after fitting, and for models the
fit did not see (leave-one-model-out), per engine.

    python benchmarks/calibration.py [CASES.csv] [--free u_compute,u_hbm,overlap,t_overhead_s]

Each engine gets its own coefficients (a load test calibrates one engine on one kind of GPU).
Prints, per engine, the fitted coefficients and the median absolute throughput/TTFT/TPOT error
by model size: defaults, one fit on all that engine's rows (in sample), and held out.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd

from gpucap.calibration.analysis import leave_one_model_out, lomo_summary
from gpucap.calibration.calibrate import DEFAULT_FREE, calibrate
from gpucap.calibration.corrections import read_public
from gpucap.calibration.validate import ENGINE_ALIASES

COLS = ["median_abs_err_default", "median_abs_err_in_sample", "median_abs_err_held_out"]
DEFAULT_CASES = Path(__file__).resolve().parents[2] / "shared" / "data" / "measured-public.csv"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="?", default=str(DEFAULT_CASES))
    ap.add_argument("--free", default=",".join(DEFAULT_FREE))
    args = ap.parse_args()
    free = tuple(n.strip() for n in args.free.split(",") if n.strip())
    cases = read_public(args.cases, DEFAULT_CASES)  # with the project's sourced corrections
    engine = cases["engine"].astype(str).str.lower().map(lambda e: ENGINE_ALIASES.get(e, e))
    pd.set_option("display.width", 200)
    fmt = "{:.1%}".format
    for name in ("trtllm", "vllm", "sglang"):
        sub = cases[engine == name]
        t0 = time.perf_counter()
        fit = calibrate(sub, free=free)
        print(f"\n==== {name}: {len(sub)} rows, one fit in {time.perf_counter() - t0:.1f} s ====")
        print(fit.report())
        t0 = time.perf_counter()
        lomo = leave_one_model_out(sub, free=free)
        print(
            f"\nleave-one-model-out ({lomo['model'].nunique()} models, {time.perf_counter() - t0:.0f} s): median abs error"
        )
        print(lomo_summary(lomo).to_string(index=False, formatters={c: fmt for c in COLS}))
        print("\nall sizes:")
        print(lomo_summary(lomo, by=("metric",)).to_string(index=False, formatters={c: fmt for c in COLS}))


if __name__ == "__main__":
    main()
