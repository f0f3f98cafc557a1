"""Accuracy of gpucap on published serving measurements.

    python benchmarks/accuracy.py [CASES.csv] [--out-dir benchmarks/out] [--corrections FILE | --no-corrections]

Runs the estimator on every row (the same predictions as ``gpucap validate``), prints the error
tables by metric, engine, GPU, model size and load mode, compares throughput with seed 1's
formula (2 x params FLOP per token at 35% of peak), and writes the per-row table as CSV and a
measured-vs-predicted plot. Never overwrites: each run writes files stamped with the time.
The public set is read with the project's sourced fixes (``data/measured-corrections.csv``,
``gpucap.calibration.corrections``) unless ``--no-corrections``.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from gpucap.calibration.accuracy import abs_error, error_summary, source_speeds
from gpucap.calibration.analysis import size_bucket
from gpucap.calibration.calibrate import calibrate
from gpucap.calibration.corrections import PROJECT_CORRECTIONS, read_public
from gpucap.calibration.validate import read_cases, validate
from gpucap.catalog.gpus import get_gpu
from gpucap.catalog.lookup import load_model
from gpucap.physics.coefficients import Coefficients
from gpucap.units import COMPUTE_FORMAT

DEFAULT_CASES = Path(__file__).resolve().parents[2] / "shared" / "data" / "measured-public.csv"
SEED_UTILIZATION = 0.35  # seed 1's compute utilization
ENGINE_COLORS = {
    "vllm": "tab:red",
    "sglang": "tab:orange",
    "trtllm": "tab:green",
    "nim": "tab:blue",
    "other": "tab:purple",
}


def seed_throughput(row: pd.Series) -> float:
    """Seed 1: tokens/s = GPUs x peak x 0.35 / (2 x params), peak of the weight format."""
    spec = load_model(str(row["model"]))
    gpu = get_gpu(str(row["gpu"]))
    fmt = COMPUTE_FORMAT.get(str(row["weight_dtype"]), "bf16") if isinstance(row["weight_dtype"], str) else "bf16"
    return float(row["num_gpus"]) * gpu.peak_flops_per_s(fmt) * SEED_UTILIZATION / (2 * spec.total_params)


def leave_one_source_out(cases: pd.DataFrame) -> pd.DataFrame:
    """Each source predicted (by simulation) with u_compute and u_hbm fitted (by the closed forms,
    per engine's defaults for the rest) on every other source's rows: what a fit to published
    numbers would tell a lab it has not seen."""
    parts = []
    for source in sorted(cases["source_id"].astype(str).unique()):
        rest, held = cases[cases["source_id"] != source], cases[cases["source_id"] == source]
        fit = calibrate(rest, free=("u_compute", "u_hbm"), start=Coefficients(), method="closed-form")
        fitted = {
            engine: dataclasses.replace(
                Coefficients.for_engine(engine), **{n: getattr(fit.coefficients, n) for n in fit.free}
            )
            for engine in ("vllm", "sglang", "trtllm")
        }
        out = validate(held, fitted)
        print(f"  without {source}: u_compute {fit.coefficients.u_compute:.3f}, u_hbm {fit.coefficients.u_hbm:.3f}")
        parts.append(out)
    return pd.concat(parts, ignore_index=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="?", default=str(DEFAULT_CASES))
    ap.add_argument("--out-dir", default=str(Path(__file__).resolve().parent / "out"))
    ap.add_argument("--no-speeds", action="store_true", help="skip the per-source testbed factor (saves minutes)")
    ap.add_argument(
        "--loso",
        action="store_true",
        help="also fit u_compute and u_hbm without each source (closed forms) and predict it (simulation)",
    )
    ap.add_argument(
        "--corrections",
        default=None,
        help=f"sourced fixes to apply (default for the public set: {PROJECT_CORRECTIONS.name})",
    )
    ap.add_argument("--no-corrections", action="store_true", help="take every row as the cases file has it")
    args = ap.parse_args()

    if args.no_corrections:
        cases = read_cases(args.cases)
    else:
        cases = read_public(args.cases, DEFAULT_CASES, args.corrections)
    t0 = time.perf_counter()
    result = validate(cases)
    seconds = time.perf_counter() - t0
    ok = result["error"].isna()
    print(f"{args.cases}: {int(ok.sum())} of {len(result)} rows predicted ({ok.mean():.1%}) in {seconds:.1f} s")
    for _, r in result[~ok].iterrows():
        print(f"  not predicted: {r['case_id']} ({r['model']}, {r['gpu']}): {r['error']}")

    fmt = {"median_abs_err": "{:.1%}".format, "p90_abs_err": "{:.1%}".format, "median_ratio": "{:.2f}".format}
    print("\nabsolute error |predicted / measured - 1| (median_ratio > 1: overestimate)")
    print(error_summary(result).to_string(index=False, formatters=fmt))

    result["size"] = [size_bucket(m) for m in result["model"]]
    if "source_id" in result:
        result["source_mode"] = result["source_id"].astype(str) + " / " + result["load_mode"].astype(str)
        print("\nevery metric by source and load mode:")
        print(error_summary(result, "source_mode").to_string(index=False, formatters=fmt))
    for by in ("engine", "gpu", "size", "load_mode", "model"):
        s = error_summary(result, by)
        s = s[s["metric"] == "output_tok_s"].drop(columns="metric")
        print(f"\noutput tokens/s by {by}:")
        print(s.to_string(index=False, formatters=fmt))

    if "source_id" in cases and not args.no_speeds:
        t1 = time.perf_counter()
        speeds = source_speeds(cases)
        scaled_result = validate(cases, speed=speeds)
        print(
            f"\nwith one testbed speed factor per source, fitted on that source's throughput only "
            f"({time.perf_counter() - t1:.0f} s):"
        )
        for source, k in speeds.items():
            print(f"  {source}: x{k:.2f}")
        print(error_summary(scaled_result).to_string(index=False, formatters=fmt))
        scaled_result["source_mode"] = (
            scaled_result["source_id"].astype(str) + " / " + scaled_result["load_mode"].astype(str)
        )
        print(error_summary(scaled_result, "source_mode").to_string(index=False, formatters=fmt))

    if "source_id" in cases and args.loso:
        t1 = time.perf_counter()
        held = leave_one_source_out(cases)
        print(
            f"\nleave one source out: u_compute and u_hbm fitted on the other sources ({time.perf_counter() - t1:.0f} s)"
        )
        print(error_summary(held, "source_id").to_string(index=False, formatters=fmt))
        print(error_summary(held).to_string(index=False, formatters=fmt))

    tput = result[result["output_tok_s_ratio"].notna()].copy()
    rows = cases.set_index("case_id").loc[tput["case_id"]]
    seed = np.array([seed_throughput(r) for _, r in rows.iterrows()])
    seed_err = abs_error(pd.Series(seed / tput["output_tok_s_measured"].to_numpy()))
    ours = abs_error(tput["output_tok_s_ratio"])
    print(
        f"\nthroughput, same {len(tput)} rows: gpucap median abs error {ours.median():.1%} (p90 {ours.quantile(0.9):.1%}); "
        f"seed 1 formula {seed_err.median():.1%} (p90 {seed_err.quantile(0.9):.1%})"
    )

    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    table = out / f"accuracy-{stamp}.csv"
    result.to_csv(table, index=False)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for ax, metric in zip(axes, ("output_tok_s", "ttft_ms", "tpot_ms"), strict=True):
        d = result[result[f"{metric}_ratio"].notna()]
        for engine, g in d.groupby("engine"):
            ax.scatter(
                g[f"{metric}_measured"],
                g[f"{metric}_predicted"],
                s=12,
                label=engine,
                alpha=0.7,
                color=ENGINE_COLORS.get(str(engine), "grey"),
            )
        lo, hi = (
            d[[f"{metric}_measured", f"{metric}_predicted"]].min().min(),
            d[[f"{metric}_measured", f"{metric}_predicted"]].max().max(),
        )
        ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
        ax.plot([lo, hi], [lo * 1.25, hi * 1.25], "k:", lw=0.6)
        ax.plot([lo, hi], [lo / 1.25, hi / 1.25], "k:", lw=0.6)
        ax.set(
            xscale="log",
            yscale="log",
            xlabel=f"measured {metric}",
            ylabel=f"predicted {metric}",
            title=f"{metric} (n={len(d)})",
        )
        ax.legend(fontsize=7)
    fig.tight_layout()
    plot = out / f"accuracy-{stamp}.png"
    fig.savefig(plot, dpi=110)
    print(f"\nwrote {table} and {plot}")


if __name__ == "__main__":
    main()
