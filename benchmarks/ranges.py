"""Build the ranges table (data/ranges.csv) and check its coverage leave-one-source-out.

    python benchmarks/ranges.py [ACCURACY.csv] [--write]

Reads a per-run table written by ``benchmarks/accuracy.py`` (default: the newest in
benchmarks/out/), whose predictions use the default coefficients (nothing fitted to these runs).
Prints, per metric and per source, the share of measured values inside the 80% range built from
the other sources' runs, and how many runs each source had no range for (no group of theirs had
enough runs elsewhere). With ``--write`` the bands built from all runs replace data/ranges.csv.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from gpucap.calibration.ranges import METRICS, RANGES_FILE, build_table, coverage, find_band
from gpucap.calibration.validate import ENGINE_ALIASES
from gpucap.catalog.lookup import load_model

OUT = Path(__file__).resolve().parent / "out"


def runs_from_accuracy(path: Path) -> pd.DataFrame:
    """The accuracy table with engine aliases resolved and the model class added. A run that
    reports median ITL but no TPOT (SGLang's bench_serving summaries) lends its ITL to the TPOT
    band: both are the decode step's time per token, each compared with its own prediction."""
    runs = pd.read_csv(path)
    runs = runs[runs["error"].isna()].copy()
    no_tpot = runs["tpot_ms_measured"].isna() & runs["itl_ms_measured"].notna()
    for side in ("measured", "predicted"):
        runs.loc[no_tpot, f"tpot_ms_{side}"] = runs.loc[no_tpot, f"itl_ms_{side}"]
    runs["engine"] = [ENGINE_ALIASES.get(str(e), str(e)) for e in runs["engine"]]
    classes = {m: "moe" if load_model(m).is_moe else "dense" for m in runs["model"].unique()}
    runs["model_class"] = runs["model"].map(classes)
    return runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("accuracy", nargs="?", help="per-run CSV of benchmarks/accuracy.py (default: newest in out/)")
    ap.add_argument("--write", action="store_true", help=f"replace {RANGES_FILE} with the bands of all runs")
    args = ap.parse_args()
    path = Path(args.accuracy) if args.accuracy else max(OUT.glob("accuracy-*.csv"), key=lambda p: p.stat().st_mtime)
    runs = runs_from_accuracy(path)
    print(f"{path}: {len(runs)} predicted runs")

    cov = coverage(runs)
    measured = {m: runs.groupby("source_id")[f"{m}_measured"].apply(lambda s: int(s.notna().sum())) for m in METRICS}
    print("\nleave-one-source-out coverage of the 80% range (each source against the other sources' bands):")
    print("| metric | source | runs measured | runs with a range | inside | share |")
    print("|---|---|---|---|---|---|")
    for _, r in cov.iterrows():
        n_meas = measured[r["metric"]].get(r["source_id"], 0)
        print(
            f"| {r['metric']} | {r['source_id']} | {n_meas} | {r['runs']} | {r['inside']} | {r['inside'] / r['runs']:.0%} |"
        )
    print("\n| metric | runs with a range | inside | coverage |")
    print("|---|---|---|---|")
    for metric, g in cov.groupby("metric", sort=False):
        n, k = int(g["runs"].sum()), int(g["inside"].sum())
        print(f"| {metric} | {n} | {k} | {k / n:.1%} |")
    without = {m: int(measured[m].sum()) - int(cov[cov["metric"] == m]["runs"].sum()) for m in METRICS}
    print("runs measured but without a range when their source is left out: " + str(without))

    table = build_table(runs)
    print("\nin sample (bands of all runs, checked on the same runs; for TPOT, whose runs come from two sources,")
    print("the only check there is): | metric | runs | inside |")
    for metric in METRICS:
        n = k = 0
        for _, run in runs.iterrows():
            m, p = float(run[f"{metric}_measured"]), float(run[f"{metric}_predicted"])
            band = find_band(
                table, metric, engine=run["engine"], load_mode=run["load_mode"], model_class=run["model_class"]
            )
            if band is None or not (m > 0 and p > 0):
                continue
            lo, hi = band.apply(p)
            n, k = n + 1, k + (lo <= m <= hi)
        print(f"| {metric} | {n} | {k / n:.1%} |" if n else f"| {metric} | 0 | - |")
    print(f"\nbands from all {len(runs)} runs ({len(table)} groups):")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    if args.write:
        table.to_csv(RANGES_FILE, index=False, float_format="%.4g")
        print(f"wrote {RANGES_FILE}")


if __name__ == "__main__":
    main()
