"""The planner's tail latency against the engine loop on a grid (gpucap.planning.tailcheck):

    python benchmarks/tailgrid.py [--requests 4000] [--runs 2] [--runs-at-90 10] [--jobs N] [--quick] [--csv cells.csv]
    python benchmarks/tailgrid.py --reuse cells.csv [--csv new.csv]

Dense and mixture-of-experts models; prompts from 128 to 16k tokens, fixed and with dataset-like
tails; tp and pp; 30-90% of the service rate; P90 and P99 TTFT and TPOT. Prints analytic /
simulated per cell, then the test: within 25% where the simulation is below 10x the SLO (2 s
TTFT, 100 ms TPOT, the planner's defaults), and never optimistic by more than 25% where the
simulation is within a factor 2 of the SLO. Simulated P99s of a few thousand requests move by
10-25% from seed to seed near saturation, and at 90% of the service rate by 2-4x: each cell pools
the requests of ``--runs`` runs (``--runs-at-90`` at 90%) before its percentiles are taken, and
runs above half the service rate are longer (``requests_at``). Cells run in parallel on ``--jobs``
processes (default: every core). Each cell also gives the simulated figure's 90% interval over its
runs (a bootstrap of the runs, ``gpucap.planning.tailcheck.run_interval``): a failing cell whose
analytic figure is within 25% of that interval fails by the runs drawn as much as by the model.

``--reuse cells.csv`` takes the simulated figures (and their intervals) of an earlier run's
``--csv`` and computes only the analytic ones again: seconds instead of half an hour, for a change
to the tail model alone. It refuses a file whose request rates are no longer the analytic
service rate's shares (the service curve changed: the simulation must run again).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import pandas as pd
from joblib import Parallel, delayed

from gpucap.config import hardware
from gpucap.physics.coefficients import Coefficients
from gpucap.planning.tailcheck import TailCase, analytic_tail, compare_tails, judge
from gpucap.queueing.lengths import Lengths

UTILIZATIONS = (0.3, 0.5, 0.7, 0.8, 0.9)
HIGH_LOAD_SCALE = 5.0  # the most requests_at multiplies the requests by (at 90% of the service rate)
TTFT_SLO_S, TPOT_SLO_S = 2.0, 0.1

CHAT_IN = Lengths.percentiles({5: 30, 50: 128, 90: 500, 99: 1500}, "chat prompts")
CHAT_OUT = Lengths.percentiles({5: 20, 50: 200, 90: 600, 99: 1200}, "chat outputs")
RAG_IN = Lengths.percentiles({5: 600, 50: 2000, 90: 4000, 99: 8000}, "RAG prompts")
RAG_OUT = Lengths.percentiles({5: 50, 50: 300, 90: 700, 99: 1000}, "RAG outputs")
LONG_IN = Lengths.percentiles({5: 9000, 50: 16000, 90: 24000, 99: 30000}, "long prompts")
LONG_OUT = Lengths.percentiles({5: 50, 50: 200, 90: 500, 99: 800}, "long outputs")


def requests_at(requests: int, utilization: float, quick: bool = False) -> int:
    """Requests simulated at a utilization: ``requests`` up to 1/2, then ``requests x 0.5 / (1 -
    u)`` up to 5x (2.5x at 80%, 5x at 90%): near saturation the queue relaxes over ~1 / (1 - u)^2
    service times and a run of a few thousand requests has not seen its tail (P99 TTFT at 90% moved
    by 25% between two seeds of 16,000)."""
    if quick:
        return requests
    return int(requests * min(max(0.5 / (1.0 - utilization), 1.0), HIGH_LOAD_SCALE))


def cases(quick: bool = False) -> list[TailCase]:
    llama8 = "meta-llama/Llama-3.1-8B"
    llama70 = "meta-llama/Llama-3.3-70B-Instruct"
    out = [
        TailCase("8B H100 tp1, chat", hardware(llama8, "H100-SXM-80GB"), CHAT_IN, CHAT_OUT),
        TailCase(
            "70B H200 tp1 fp8, 2000/300",
            hardware(llama70, "H200-SXM-141GB", weight_dtype="fp8", kv_dtype="fp8"),
            Lengths.fixed(2000),
            Lengths.fixed(300),
        ),
        TailCase(
            "70B H100 tp2 fp8, RAG", hardware(llama70, "H100-SXM-80GB", tp=2, weight_dtype="fp8"), RAG_IN, RAG_OUT
        ),
        TailCase("Qwen3-30B-A3B H100 tp1 (MoE), RAG", hardware("Qwen/Qwen3-30B-A3B", "H100-SXM-80GB"), RAG_IN, RAG_OUT),
        TailCase("8B H100 tp1, 16k", hardware(llama8, "H100-SXM-80GB"), LONG_IN, LONG_OUT),
    ]
    if quick:
        return out[:2]
    return out + [
        TailCase(
            "70B H100 pp2 fp8, 2000/300",
            hardware(llama70, "H100-SXM-80GB", pp=2, weight_dtype="fp8", kv_dtype="fp8"),
            Lengths.fixed(2000),
            Lengths.fixed(300),
        ),
        TailCase(
            "gpt-oss-120b H100 tp2 (MoE), chat",
            hardware("openai/gpt-oss-120b", "H100-SXM-80GB", tp=2),
            CHAT_IN,
            CHAT_OUT,
        ),
        TailCase(
            "70B H100 tp4 fp8, 16k", hardware(llama70, "H100-SXM-80GB", tp=4, weight_dtype="fp8"), LONG_IN, LONG_OUT
        ),
    ]


def reanalysed(path: str, coef: Coefficients) -> pd.DataFrame:
    """An earlier run's cells (``--csv``) with the analytic figures and ratios computed again."""
    try:
        old = pd.read_csv(path)
    except (OSError, ValueError) as err:
        sys.exit(f"--reuse {path}: cannot read it as a CSV of cells ({err})")
    need = {"case", "utilization", "request_rate", "stat", "metric", "simulated_s"}
    if not need <= set(old.columns):
        sys.exit(
            f"--reuse {path}: missing columns {', '.join(sorted(need - set(old.columns)))}; give a file written by --csv"
        )
    known = {c.label: c for c in cases()}
    rows = []
    for label, cells in old.groupby("case", sort=False):
        if label not in known:
            sys.exit(f"--reuse {path}: no case {label!r} in this grid")
        mu = analytic_tail(known[label], coef, [1e-6], ("p99",)).attrs["service_rate"]
        if not np.allclose(cells["request_rate"], cells["utilization"] * mu, rtol=1e-9):
            sys.exit(
                f"--reuse {path}: {label}'s service rate is now {mu:.6g} requests/s, not the file's; run the grid again"
            )
        rates = np.sort(cells["request_rate"].unique())
        ana = analytic_tail(known[label], coef, rates, tuple(sorted(cells["stat"].unique())))
        for _, cell in cells.iterrows():
            k = int(np.flatnonzero(np.isclose(rates, cell["request_rate"], rtol=1e-12))[0])
            a = float(ana[f"{cell['metric']}_{cell['stat']}_s"].iloc[k])
            rows.append({**cell.to_dict(), "analytic_s": a, "ratio": a / cell["simulated_s"]})
    return pd.DataFrame(rows)[[c for c in old.columns if c in rows[0]]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=4000)
    ap.add_argument("--runs", type=int, default=2, help="simulated runs pooled per cell")
    ap.add_argument("--runs-at-90", type=int, default=10, help="... at 90%% of the service rate")
    ap.add_argument("--jobs", type=int, default=-1, help="processes (default: every core)")
    ap.add_argument("--quick", action="store_true", help="two cases, one run, 1500 requests")
    ap.add_argument("--csv", default=None, help="also write every cell to this CSV file")
    ap.add_argument("--reuse", default=None, help="simulated figures from this earlier --csv: the analytic ones only")
    args = ap.parse_args()
    coef = Coefficients.for_engine("vllm")

    def runs_at(u: float) -> int:
        return 1 if args.quick else (args.runs_at_90 if u >= 0.9 else args.runs)

    def cell(case: TailCase, k: int, u: float) -> pd.DataFrame:
        n = requests_at(1500 if args.quick else args.requests, u, args.quick)
        return compare_tails(case, coef, [u], num_requests=n, seed=100 + k, runs=runs_at(u))

    t0 = time.perf_counter()
    if args.reuse:
        frame = reanalysed(args.reuse, coef)
        print(
            f"{len(frame)} cells: simulated figures from {args.reuse}, analytic ones in {time.perf_counter() - t0:.1f} s"
        )
    else:
        jobs = [(case, k, u) for case in cases(args.quick) for k, u in enumerate(UTILIZATIONS)]
        frames = Parallel(n_jobs=args.jobs)(delayed(cell)(*job) for job in jobs)
        print(f"{len(jobs)} cells in {time.perf_counter() - t0:.0f} s")
        frame = pd.concat(frames, ignore_index=True)
    table = judge(frame, ttft_slo_s=TTFT_SLO_S, tpot_slo_s=TPOT_SLO_S)
    if args.csv:
        table.to_csv(args.csv, index=False)
    print()
    wide = table.pivot_table(
        index=["case", "utilization"], columns=["metric", "stat"], values=["analytic_s", "simulated_s"], sort=False
    )
    with pd.option_context("display.width", 200, "display.max_rows", 200, "display.float_format", "{:.3g}".format):
        cells = pd.DataFrame(index=wide.index)
        for metric in ("ttft", "tpot"):
            unit = 1.0 if metric == "ttft" else 1e3
            for stat in ("p90", "p99"):
                a, s = wide[("analytic_s", metric, stat)] * unit, wide[("simulated_s", metric, stat)] * unit
                cells[f"{metric.upper()} {stat} {'s' if metric == 'ttft' else 'ms'}"] = [
                    f"{x:.3g} / {y:.3g}" for x, y in zip(a, s, strict=True)
                ]
        print("analytic / simulated")
        print(cells.to_string())
    judged = table[table["judged"]]
    print()
    print(
        f"judged cells (simulated < 10x SLO): {len(judged)} of {len(table)}; within 25%: "
        f"{int(judged['within'].sum())} ({judged['within'].mean():.0%}); median |ratio - 1| "
        f"{(judged['ratio'] - 1).abs().median():.0%}"
    )
    by = judged.groupby(["metric", "stat"])
    print(by["within"].mean().map("{:.0%}".format).rename("within 25%").to_string())
    edge = table[table["edge"]]
    print(f"cells at the SLO's edge: {len(edge)}; optimistic by more than 25%: {int(edge['optimistic'].sum())}")
    bad = table[~table["ok"]]
    if not bad.empty:
        print("\ncells that fail the test (lo, hi: the simulated figure's 90% interval over its runs):")
        cols = [
            "case",
            "utilization",
            "metric",
            "stat",
            "analytic_s",
            "simulated_s",
            "simulated_lo_s",
            "simulated_hi_s",
        ]
        print(bad[[*cols, "ratio", "within_interval"]].to_string(index=False, float_format="{:.3g}".format))
        near = int(bad["within_interval"].sum())
        print(f"of these, within 25% of some value in that interval (failing by the runs drawn): {near}")
    spread = (table["simulated_hi_s"] - table["simulated_lo_s"]) / table["simulated_s"]
    print(
        "the simulated figures' 90% interval over runs, as a share of the figure, median by utilization: "
        + ", ".join(f"{u:.0%} {v:.0%}" for u, v in spread.groupby(table["utilization"]).median().items())
    )


if __name__ == "__main__":
    main()
