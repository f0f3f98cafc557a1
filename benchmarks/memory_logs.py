"""gpucap's memory breakdown against vLLM's own startup logs.

    python benchmarks/memory_logs.py [data/memory/vllm-startup-logs.csv]

Each case of the table is a published vLLM start-up: "Model loading took W GiB" and the KV cache
it was given ("Available KV cache memory", or the pool it allocated), with the GPU's total as
torch sees it, the tensor parallelism, ``gpu_memory_utilization`` and the batch defaults of that
version. gpucap is run with the same knobs and the logged total, and the CUDA-graph reservation
only where that version counts graphs in the budget (vLLM 0.20 and later). Prints, per case, the
weights and the KV budget predicted against logged, and what the start-up left for everything
else (``utilization x total - weights - KV``) against gpucap's reservation (activations + CUDA
graphs + runtime).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from pathlib import Path

import pandas as pd

from gpucap.config import EngineConfig, hardware
from gpucap.physics.memory import hardware_memory
from gpucap.units import GiB

TABLE = Path(__file__).resolve().parents[1] / "data" / "memory" / "vllm-startup-logs.csv"


def predict(row: pd.Series) -> dict[str, float]:
    """gpucap's weights, reservation and KV budget (GiB per GPU) for one logged start-up."""
    engine = EngineConfig(
        engine="vllm",
        max_num_seqs=int(row["max_num_seqs"]),
        max_num_batched_tokens=int(row["max_num_batched_tokens"]),
        gpu_memory_utilization=float(row["gpu_memory_utilization"]),
        cuda_graph_bytes=EngineConfig().cuda_graph_bytes if bool(row["graphs_in_budget"]) else 0.0,
    )
    hw = hardware(
        str(row["model"]), str(row["gpu"]), tp=int(row["tp"]), weight_dtype=str(row["weight_dtype"]), engine=engine
    )
    if isinstance(row["total_GiB"], float) and math.isfinite(row["total_GiB"]):
        hw = dataclasses.replace(hw, gpu=dataclasses.replace(hw.gpu, memory_bytes=float(row["total_GiB"]) * GiB))
    mem = hardware_memory(hw)
    return {
        "total": mem.total / GiB,
        "weights": mem.weights.total / GiB,
        "reserved": mem.reserved / GiB,
        "activations": mem.activations / GiB,
        "kv": mem.kv_budget / GiB,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("table", nargs="?", default=str(TABLE))
    args = ap.parse_args()
    cases = pd.read_csv(args.table)
    print(
        "| case | model | GPU x tp | util | vLLM | weights logged / gpucap | KV logged / gpucap (GiB) | KV error | rest logged / gpucap reserved |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    errors = []
    for _, row in cases.iterrows():
        p = predict(row)
        util = float(row["gpu_memory_utilization"])
        rest = util * p["total"] - float(row["weights_GiB"]) - float(row["kv_GiB"])
        kv_err = p["kv"] / float(row["kv_GiB"]) - 1 if float(row["kv_GiB"]) > 0 else float("nan")
        errors.append((row, kv_err, p["kv"] - float(row["kv_GiB"])))
        print(
            f"| {row['case']} | {row['model'].split('/')[-1]} | {row['gpu']} x {row['tp']} | {util:g} | {row['vllm_version']} "
            f"| {row['weights_GiB']:.2f} / {p['weights']:.2f} ({p['weights'] / float(row['weights_GiB']) - 1:+.1%}) "
            f"| {row['kv_GiB']:.2f} / {p['kv']:.2f} | {kv_err:+.1%} ({p['kv'] - float(row['kv_GiB']):+.2f} GiB) "
            f"| {rest:.2f} / {p['reserved']:.2f} |"
        )
    shown = [abs(e) for _, e, _ in errors if math.isfinite(e)]
    print(
        f"\nKV budget: median |error| {pd.Series(shown).median():.1%} over {len(shown)} cases with a positive logged budget"
    )
    tight = [
        (r, d)
        for r, _, d in errors
        if float(r["weights_GiB"]) > 0.7 * float(r["gpu_memory_utilization"]) * predict(r)["total"]
    ]
    for r, d in tight:
        print(f"  tight (weights > 70% of what vLLM may use): case {r['case']} {r['model']}: gpucap {d:+.2f} GiB off")


if __name__ == "__main__":
    main()
