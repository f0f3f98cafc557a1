"""Calibrate gpucap on the load test of the CPU server and print predicted vs measured per level,
with the default coefficients and with the fitted ones.

    .venv/bin/python benchmarks/e2e/fit.py RESULTS_DIR --gpu-file CPU.csv --gpu CPU-E2E \\
        --model benchmarks/e2e/model/config.json --kv-cache-gib 1 --max-num-seqs 256 \\
        --max-num-batched-tokens 2048 --block-size 128 --eager --dtype fp32 [--step-log SERVER.log] --save FIT.json

The engine gpucap predicts with is the one the server ran: its knobs go into each case's
columns (max_num_seqs, max_num_batched_tokens, block_size, enforce_eager and the memory share
``u = (KV bytes + weights + activations + runtime reservation) / memory``, so that gpucap's KV
budget ``u x memory - weights - activations - reservation`` is exactly the server's
``VLLM_CPU_KVCACHE_SPACE``), and the KV cache is ``fp32`` (the server's cache is in the model's
float32).

The CPU itself is a GPU-file row (``measure_cpu.py``), given through ``GPUCAP_GPU_FILE``.

With ``--step-log`` (the server ran with ``--enable-logging-iteration-details``), u_compute is the
rate the server's own prompt steps ran at during these runs, not a fit to them: a closed loop's
TTFT mixes the compute rate with how the requests group into steps, and a fitted u_compute took up
the difference (benchmarks/README.md, "The compute rate from the server's own prompt steps").
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path

import numpy as np
import pandas as pd

from gpucap.calibration import validate
from gpucap.calibration.calibrate import calibrate
from gpucap.calibration.loadtests import cases_from_runs
from gpucap.calibration.promptsteps import calibrate_with_prompt_steps
from gpucap.calibration.results import read_results
from gpucap.catalog.gpus import get_gpu
from gpucap.catalog.lookup import load_model
from gpucap.config import SLO, EngineConfig, Layout
from gpucap.physics.coefficients import Coefficients
from gpucap.physics.memory import memory_breakdown
from gpucap.telemetry.steplog import read_step_log
from gpucap.units import GiB

# The efficiencies, and the step's floors, which on this CPU (eager operator dispatch per layer;
# sampling, bookkeeping and paged attention per sequence) are far above a GPU server's. With the
# server's step log (--step-log), u_compute is not fitted to the runs but timed by the server's
# own prompt steps (gpucap.calibration.promptsteps).
FREE = ("u_compute", "u_hbm", "t_layer_s", "t_seq_s")


def memory_share_for_kv(
    *, kv_bytes: float, weight_bytes: float, activation_bytes: float, reserved_bytes: float, memory_bytes: float
) -> float:
    """The ``gpu_memory_utilization`` u at which gpucap's vLLM KV budget equals ``kv_bytes``:
    ``kv = u x memory - weights - activations - reserved`` (gpucap.physics.memory.memory_breakdown; no
    CUDA-graph pool when eager), so ``u = (kv + weights + activations + reserved) / memory``."""
    u = (kv_bytes + weight_bytes + activation_bytes + reserved_bytes) / memory_bytes
    if not 0 < u <= 1:
        raise ValueError(f"KV cache {kv_bytes / GiB:.2f} GiB plus weights does not fit {memory_bytes / GiB:.1f} GiB")
    return u


def server_engine(args: argparse.Namespace) -> EngineConfig:
    """The EngineConfig of the server that was measured (see the module docstring)."""
    knobs = EngineConfig(
        engine="vllm",
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        block_size=args.block_size,
        cuda_graphs=not args.eager,
        prefix_caching=False,  # the server runs --no-enable-prefix-caching
        # no overlap_host here: vLLM on a CPU row never runs a step ahead, and case_hardware says so
        # (gpucap.calibration.cases.row_overlap_host)
    )
    gpu = get_gpu(args.gpu)
    # the terms as gpucap's breakdown charges them (the utilization does not change them)
    mem = memory_breakdown(
        load_model(args.model), gpu, Layout(), weight_dtype=args.dtype, kv_dtype="auto", engine=knobs
    )
    u = memory_share_for_kv(
        kv_bytes=args.kv_cache_gib * GiB,
        weight_bytes=mem.weights.total,
        activation_bytes=mem.activations,
        reserved_bytes=mem.reserved - mem.activations,
        memory_bytes=gpu.memory_bytes,
    )
    return dataclasses.replace(knobs, gpu_memory_utilization=u)


def as_served(cases: pd.DataFrame, engine: EngineConfig) -> pd.DataFrame:
    """The cases with the server's engine knobs as columns (``gpucap.calibration.validate.case_hardware``)."""
    return cases.assign(
        max_num_seqs=engine.max_num_seqs,
        max_num_batched_tokens=engine.max_num_batched_tokens,
        block_size=engine.block_size,
        gpu_memory_utilization=engine.gpu_memory_utilization,
        enforce_eager=not engine.cuda_graphs,
        enable_prefix_caching=engine.prefix_caching,
    )


def level_table(cases: pd.DataFrame, before: pd.DataFrame, after: pd.DataFrame) -> pd.DataFrame:
    """One row per level: measured, default and fitted predictions of output tok/s, TTFT, TPOT."""
    rows = []
    for i, case in cases.reset_index(drop=True).iterrows():
        load = (
            f"c={case['concurrency']:g}" if case["load_mode"] == "fixed-concurrency" else f"{case['request_rate']:g}/s"
        )
        row: dict[str, object] = {"load": load}
        for metric, label in (("output_tok_s", "tok/s"), ("ttft_ms", "TTFT ms"), ("tpot_ms", "TPOT ms")):
            row[f"{label} measured"] = before.loc[i, f"{metric}_measured"]
            row[f"{label} default"] = before.loc[i, f"{metric}_predicted"]
            row[f"{label} fitted"] = after.loc[i, f"{metric}_predicted"]
        rows.append(row)
    return pd.DataFrame(rows)


def median_abs_error(result: pd.DataFrame) -> dict[str, float]:
    """|predicted / measured - 1| median per metric."""
    return {m: float(np.nanmedian(np.abs(result[f"{m}_ratio"].astype(float) - 1.0))) for m in validate.METRICS}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, help="the load test's run folder")
    ap.add_argument("--gpu-file", type=Path, required=True, help="GPU CSV with the measured CPU row")
    ap.add_argument("--gpu", required=True, help="its key")
    ap.add_argument("--model", required=True, help="config.json of the served model")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"], help="weights and KV cache format served")
    ap.add_argument("--kv-cache-gib", type=float, required=True, help="VLLM_CPU_KVCACHE_SPACE of the server")
    ap.add_argument("--max-num-seqs", type=int, required=True)
    ap.add_argument("--max-num-batched-tokens", type=int, required=True)
    ap.add_argument("--block-size", type=int, required=True)
    ap.add_argument("--eager", action="store_true", help="the server ran with --enforce-eager")
    ap.add_argument("--free", default=",".join(FREE), help="coefficients to fit")
    ap.add_argument(
        "--step-log",
        type=Path,
        default=None,
        help="the server's log with --enable-logging-iteration-details: u_compute from its prompt steps during "
        "these runs (gpucap.calibration.promptsteps), not fitted to the runs",
    )
    ap.add_argument("--save", type=Path, default=None, help="write the fit as JSON (never overwritten)")
    ap.add_argument(
        "--max-error",
        type=float,
        default=0.3,
        help="fail when the fitted output tokens/s are off by more than this (median, default 0.3)",
    )
    ap.add_argument(
        "--max-top-ttft-error",
        type=float,
        default=0.35,
        help="fail when the fitted mean TTFT at the highest concurrency is off by more than this (default 0.35): "
        "the TTFT curve's shape, which waves decide, is lost",
    )
    ap.add_argument("--ttft-slo", type=float, default=1.0, help="TTFT SLO (s) of the limits table (default 1)")
    ap.add_argument("--tpot-slo", type=float, default=0.05, help="TPOT SLO (s) of the limits table (default 0.05)")
    args = ap.parse_args()
    os.environ["GPUCAP_GPU_FILE"] = str(args.gpu_file)

    rs = read_results(args.results)
    if rs.bad or rs.incomplete:
        raise SystemExit(f"fit.py: error: {args.results}: unreadable {rs.bad}, incomplete {rs.incomplete}")
    runs = rs.runs.sort_values(["concurrency", "request_rate"]).reset_index(drop=True)
    kv = "fp32" if args.dtype == "fp32" else "auto"
    engine = server_engine(args)
    cases = as_served(cases_from_runs(runs, weight_dtype=args.dtype, kv_cache_dtype=kv), engine)
    print(
        f"fit: {len(cases)} levels from {args.results}; engine as served: max_num_seqs {engine.max_num_seqs}, "
        f"max_num_batched_tokens {engine.max_num_batched_tokens}, block {engine.block_size}, "
        f"{'eager' if not engine.cuda_graphs else 'graphs'}, KV cache {args.kv_cache_gib:g} GiB "
        f"(memory share {engine.gpu_memory_utilization:.4f}), {args.dtype} weights and KV"
    )
    free = tuple(n.strip() for n in args.free.split(",") if n.strip())
    start = Coefficients.for_engine("vllm")
    before = validate.validate(cases, start)
    if before["error"].notna().any():
        raise SystemExit(f"fit.py: error: cases not predicted: {before['error'].dropna().tolist()}")
    results = sorted(args.results.glob("*.json"))
    settings = dict(
        sources=list(map(str, results)),
        method="simulate",
        slo=SLO(args.ttft_slo, args.tpot_slo, "mean"),
    )
    if args.step_log and "u_compute" in free:
        try:
            with_steps = calibrate_with_prompt_steps(
                cases,
                read_step_log(args.step_log),
                results,
                free=free,
                start=start,
                **{**settings, "sources": [*settings["sources"], str(args.step_log)]},
            )
        except ValueError as e:
            raise SystemExit(f"fit.py: error: {e}") from None
        fit = with_steps.fit
        print(
            f"fit: u_compute {with_steps.u_compute:.3f} from the {with_steps.prompt_steps} prompt steps of "
            f"{args.step_log} during these runs (fitted to the runs: {with_steps.first.coefficients.u_compute:.3f})"
        )
    else:
        fit = calibrate(cases, start=start, free=free, **settings)
    after = validate.validate(cases, fit.coefficients)
    print(fit.report())
    pd.set_option("display.width", 200)
    table = level_table(cases, before, after)
    print("\npredicted vs measured per level (default = vLLM's default coefficients, fitted = this fit):")
    print(table.to_string(index=False, float_format=lambda x: f"{x:.1f}"))
    err_before, err_after = median_abs_error(before), median_abs_error(after)
    print("\nmedian |predicted / measured - 1|, default -> fitted:")
    for m in validate.METRICS:
        print(f"    {m:<13} {err_before[m]:6.1%} -> {err_after[m]:6.1%}")
    if args.save:
        fit.save(args.save)
        print(f"\nfit: coefficients saved to {args.save}")
    top = after.assign(c=cases["concurrency"].to_numpy()).dropna(subset=["c"]).sort_values("c").iloc[-1]
    top_error = abs(float(top["ttft_ms_ratio"]) - 1.0)
    print(
        f"TTFT at the top concurrency {top['c']:g}: measured {top['ttft_ms_measured']:.0f} ms, "
        f"fitted {top['ttft_ms_predicted']:.0f} ms ({top_error:.0%} off)"
    )
    if not top_error <= args.max_top_ttft_error:
        raise SystemExit(
            f"fit.py: error: TTFT at concurrency {top['c']:g} is off by {top_error:.0%} after the fit, more than "
            f"--max-top-ttft-error {args.max_top_ttft_error:.0%}: the model no longer follows the TTFT curve"
        )
    if not err_after["output_tok_s"] <= args.max_error:
        raise SystemExit(
            f"fit.py: error: fitted output tokens/s are off by {err_after['output_tok_s']:.0%} (median), "
            f"more than --max-error {args.max_error:.0%}: the load test, the CPU row or the engine description is wrong"
        )


if __name__ == "__main__":
    main()
