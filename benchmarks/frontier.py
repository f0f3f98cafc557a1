"""The throughput-interactivity frontier against measured fixed-concurrency sweeps.

    python benchmarks/frontier.py [CASES.csv]

For every sweep of ``load_mode == fixed-concurrency`` rows in the published measurements (one
testbed, model, GPU, split, engine and lengths at several concurrencies), gpucap's frontier
points at the measured concurrencies (``gpucap.planning.interactivity.option_points``, the closed loop
the estimator uses: waves for fixed lengths, steady state for dataset lengths) next to the
measured ones on the same axes: output tokens/s per GPU, and tokens/s per user (1 / TPOT where
the row gives TPOT, else the row's output tokens/s over its concurrency, compared with the same
quotient predicted). Prints each point and the median error along each curve.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from gpucap.calibration.corrections import read_public
from gpucap.calibration.validate import case_hardware
from gpucap.config import Workload
from gpucap.physics.coefficients import Coefficients
from gpucap.planning.interactivity import option_points

DEFAULT_CASES = Path(__file__).resolve().parents[2] / "shared" / "data" / "measured-public.csv"
SWEEP_KEYS = ["source_id", "engine", "model", "gpu", "num_gpus", "tp", "weight_dtype", "isl", "osl"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="?", default=str(DEFAULT_CASES))
    args = ap.parse_args()
    cases = read_public(args.cases, DEFAULT_CASES)  # with the project's sourced corrections
    sweeps = cases[cases["load_mode"] == "fixed-concurrency"].fillna({"weight_dtype": "bf16"})
    errors: dict[str, list[float]] = {"per GPU": [], "per user": []}
    print("| sweep | in flight | tok/s/GPU measured / gpucap | tok/s/user measured / gpucap | per user is |")
    print("|---|---|---|---|---|")
    for key, sweep in sweeps.groupby(SWEEP_KEYS, sort=False):
        sweep = sweep.sort_values("concurrency")
        row = sweep.iloc[0]
        hw, replicas, _ = case_hardware(row)
        lengths = "fixed" if str(row.get("length_dist", "")).startswith("fixed") else "varied"
        wl = Workload(float(row["isl"]), float(row["osl"]), lengths=lengths)
        per_replica = sweep["concurrency"].to_numpy(dtype=float) / replicas
        pts = option_points(hw, Coefficients.for_engine(hw.engine.engine), wl, per_replica)
        name = f"{key[0]}: {key[2].split('/')[-1]} {key[3]} x{key[4]:g} {key[6]} {key[1]} {key[7]:g}/{key[8]:g}"
        for (_, m), (_, p) in zip(sweep.iterrows(), pts.iterrows(), strict=True):
            gpu_m = float(m["output_tok_s"]) / float(m["num_gpus"])
            gpu_p = float(p["tokens_per_s_per_gpu"])
            tpot = m.get("tpot_mean_ms")
            if isinstance(tpot, float) and np.isfinite(tpot):
                user_m, user_p, kind = 1e3 / tpot, float(p["tokens_per_s_per_user"]), "1 / TPOT"
            else:
                user_m = float(m["output_tok_s"]) / float(m["concurrency"])
                user_p, kind = float(p["output_tokens_per_s"]) / float(p["concurrency"]), "tok/s / in flight"
            errors["per GPU"].append(gpu_p / gpu_m - 1)
            errors["per user"].append(user_p / user_m - 1)
            print(
                f"| {name} | {m['concurrency']:g} | {gpu_m:,.0f} / {gpu_p:,.0f} ({gpu_p / gpu_m - 1:+.0%}) "
                f"| {user_m:,.1f} / {user_p:,.1f} ({user_p / user_m - 1:+.0%}) | {kind} |"
            )
    for axis, errs in errors.items():
        e = np.abs(np.asarray(errs))
        print(f"{axis}: median |error| {np.median(e):.1%} over {e.size} points (p90 {np.quantile(e, 0.9):.1%})")
    summary = pd.DataFrame(errors)
    print(
        f"median ratio: per GPU {1 + summary['per GPU'].median():.2f}, per user {1 + summary['per user'].median():.2f}"
    )


if __name__ == "__main__":
    main()
