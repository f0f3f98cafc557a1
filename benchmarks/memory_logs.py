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

``--snapshot-by-version`` counts gpucap's runtime reservation (CUDA context and NCCL buffers,
1 GiB) inside the budget only where that version's memory snapshot does: vLLM V0 and V1 up to
0.9.0 charge every non-torch byte on the GPU; 0.9.1 to 0.10.2 take the snapshot after the CUDA
context exists but before the distributed environment, so NCCL and custom all-reduce buffers
(tp > 1, taken here as half the reservation) are charged and the context is not; from 0.11.0
(``vllm/v1/worker/gpu_worker.py Worker.init_device``: "Initialize the distributed environment
BEFORE taking memory snapshot") neither is. ``--sampler-by-version`` charges the profiling
run's sampler as V1 runs it (``GPUModelRunner._dummy_sampler_run``): ``min(max_num_seqs,
max_num_batched_tokens)`` rows of the full vocabulary (gathered under tp), bf16 logits, their
fp32 copy and fp32 probabilities (10 bytes a logit, the FlashInfer path; the PyTorch top-p path
sorts and holds more).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from pathlib import Path

import pandas as pd

from gpucap.catalog.lookup import load_model
from gpucap.config import EngineConfig, hardware
from gpucap.physics.memory import SAMPLER_BYTES_PER_LOGIT, hardware_memory
from gpucap.units import GiB

TABLE = Path(__file__).resolve().parents[1] / "data" / "memory" / "vllm-startup-logs.csv"


RUNTIME_GIB = EngineConfig().runtime_overhead_bytes / GiB
V1_SAMPLER_BYTES_PER_LOGIT = 2 + 4 + 4  # bf16 logits, their fp32 copy, fp32 probabilities


def version(text: str) -> tuple[int, int, int]:
    """(0, 10, 1) from "0.10.1.1"; V0 rows ("0.6.5 (V0)") read as their number."""
    parts = [int(p) for p in text.split()[0].split(".")[:3] if p.isdigit()]
    return (parts + [0, 0, 0])[0], (parts + [0, 0, 0])[1], (parts + [0, 0, 0])[2]


def runtime_in_budget_gib(row: pd.Series) -> float:
    """The part of gpucap's runtime reservation that the row's vLLM version counts inside
    ``utilization x total`` (module docstring, ``--snapshot-by-version``)."""
    v = version(str(row["vllm_version"]))
    if "V0" in str(row["vllm_version"]) or v < (0, 9, 1):
        return RUNTIME_GIB
    if v < (0, 11, 0):
        return RUNTIME_GIB / 2 if int(row["tp"]) > 1 else 0.0
    return 0.0


def v1_sampler_change_gib(row: pd.Series) -> float:
    """The sampler's profiling peak as V1 runs it, less gpucap's (``--sampler-by-version``)."""
    spec = load_model(str(row["model"]))
    seqs, tokens, tp = int(row["max_num_seqs"]), int(row["max_num_batched_tokens"]), int(row["tp"])
    if "V0" in str(row["vllm_version"]):
        return 0.0
    ours = seqs * spec.vocab_size / tp * SAMPLER_BYTES_PER_LOGIT
    theirs = min(seqs, tokens) * spec.vocab_size * V1_SAMPLER_BYTES_PER_LOGIT
    return (theirs - ours) / GiB


def predict(row: pd.Series, *, snapshot: bool = False, sampler: bool = False) -> dict[str, float]:
    """gpucap's weights, reservation and KV budget (GiB per GPU) for one logged start-up; with
    ``snapshot`` / ``sampler`` the version's accounting of the runtime and the sampler."""
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
    change = (runtime_in_budget_gib(row) - RUNTIME_GIB if snapshot else 0.0) + (
        v1_sampler_change_gib(row) if sampler else 0.0
    )
    return {
        "total": mem.total / GiB,
        "weights": mem.weights.total / GiB,
        "reserved": mem.reserved / GiB + change,
        "activations": mem.activations / GiB,
        "kv": mem.kv_budget / GiB - change,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("table", nargs="?", default=str(TABLE))
    ap.add_argument("--snapshot-by-version", action="store_true", help="runtime reservation as each version counts it")
    ap.add_argument("--sampler-by-version", action="store_true", help="the sampler's peak as V1 profiles it")
    args = ap.parse_args()
    how = dict(snapshot=args.snapshot_by_version, sampler=args.sampler_by_version)
    cases = pd.read_csv(args.table)
    print(
        "| case | model | GPU x tp | util | vLLM | weights logged / gpucap | KV logged / gpucap (GiB) | KV error | rest logged / gpucap reserved |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    errors = []
    for _, row in cases.iterrows():
        p = predict(row, **how)
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
        f"\nKV budget: median |error| {pd.Series(shown).median():.1%} over {len(shown)} cases with a positive logged budget; "
        f"median |GiB off| {pd.Series([abs(d) for _, _, d in errors]).median():.2f} over all {len(errors)}"
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
