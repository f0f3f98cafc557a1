"""gpucap's memory breakdown against vLLM's own startup logs.

    python benchmarks/memory_logs.py [data/memory/vllm-startup-logs.csv]

Each case of the table is a published vLLM start-up: "Model loading took W GiB" and the KV cache
it was given ("Available KV cache memory", or the pool it allocated), with the GPU's total as
torch sees it, the tensor parallelism, ``gpu_memory_utilization`` and the batch defaults of that
version. gpucap is run with the same knobs and the logged total (else the catalog's, which is the
CUDA runtime's), and with what that version charges to the KV budget
(``data/memory/README.md``):

- the sampler's top-k/top-p as the row's ``sampler`` column says it ran ("sort" or "in-place",
  with its basis: the log's own line where it has one), and the MoE kernel its log names
  (``moe_backend``, which sets how MXFP4 experts are padded);
- the CUDA-graph reservation only from vLLM 0.20, which estimates the graphs and subtracts them;
- the non-torch memory: vLLM V0 and V1 up to 0.9.0 take their snapshot before the CUDA context
  and the distributed environment exist, so both are charged (gpucap's ``RUNTIME_OVERHEAD_BYTES``,
  as SGLang and TensorRT-LLM are modelled); later versions take it after the context, so the
  profiling run's workspaces are charged (``VLLM_NON_TORCH_BYTES``) and, at tp > 1, the buffers
  NCCL allocates at the run's first all-reduce (``VLLM_NCCL_BYTES``): gpucap's vLLM defaults.

Prints, per case, each term logged against gpucap's (weights, peak activation and non-torch
memory where the log gives them) and the KV budget, then the median error over all cases and
the tight ones (weights over 70% of what vLLM may use).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from pathlib import Path

import pandas as pd

from gpucap.config import RUNTIME_OVERHEAD_BYTES, EngineConfig, hardware
from gpucap.physics.memory import MemoryBreakdown, hardware_memory
from gpucap.units import GiB

TABLE = Path(__file__).resolve().parents[1] / "data" / "memory" / "vllm-startup-logs.csv"


def version(text: str) -> tuple[int, int, int]:
    """(0, 10, 1) from "0.10.1.1"; V0 rows ("0.6.5 (V0)") read as their number."""
    parts = [int(p) for p in text.split()[0].split(".")[:3] if p.isdigit()]
    return (parts + [0, 0, 0])[0], (parts + [0, 0, 0])[1], (parts + [0, 0, 0])[2]


def charges_context(row: pd.Series) -> bool:
    """Whether the row's vLLM version takes its memory snapshot before the CUDA context and the
    distributed environment exist, charging both to the budget (V0, and V1 up to 0.9.0)."""
    return "V0" in str(row["vllm_version"]) or version(str(row["vllm_version"])) < (0, 9, 1)


def _logged(row: pd.Series, column: str) -> float | None:
    value = row.get(column)
    return float(value) if isinstance(value, float | int) and math.isfinite(value) else None


def predict(row: pd.Series) -> MemoryBreakdown:
    """gpucap's memory breakdown for one logged start-up, as that version accounts it."""
    engine = EngineConfig(
        engine="vllm",
        max_num_seqs=int(row["max_num_seqs"]),
        max_num_batched_tokens=int(row["max_num_batched_tokens"]),
        gpu_memory_utilization=float(row["gpu_memory_utilization"]),
        cuda_graph_bytes=EngineConfig().cuda_graph_bytes if bool(row["graphs_in_budget"]) else 0.0,
        # the context and NCCL charged whole as SGLang's and TensorRT-LLM's runtime; else vLLM's defaults
        runtime_overhead_bytes=RUNTIME_OVERHEAD_BYTES if charges_context(row) else None,
        nccl_bytes=0.0 if charges_context(row) else None,
        sampler=str(row["sampler"]),
        moe_backend=str(row["moe_backend"]),
    )
    hw = hardware(
        str(row["model"]), str(row["gpu"]), tp=int(row["tp"]), weight_dtype=str(row["weight_dtype"]), engine=engine
    )
    total = _logged(row, "total_GiB")
    if total is not None:
        hw = dataclasses.replace(hw, gpu=dataclasses.replace(hw.gpu, memory_bytes=total * GiB))
    return hardware_memory(hw)


def _pair(logged: float | None, ours: float) -> str:
    return f"{'-' if logged is None else f'{logged:.2f}'} / {ours:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("table", nargs="?", default=str(TABLE))
    args = ap.parse_args()
    cases = pd.read_csv(args.table)
    print(
        "| case | model | GPU x tp | util | vLLM | weights | peak activation | non-torch | rest | KV budget | KV off |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    print("| | | | | | logged / gpucap, GiB per GPU | | | | | |")
    offs, tight = [], []
    for _, row in cases.iterrows():
        mem = predict(row)
        util, kv = float(row["gpu_memory_utilization"]), float(row["kv_GiB"])
        rest = util * mem.total / GiB - float(row["weights_GiB"]) - kv
        off = mem.kv_budget / GiB - kv
        pct = f" ({off / kv:+.0%})" if kv > 0 else ""
        offs.append(off)
        if float(row["weights_GiB"]) > 0.7 * util * mem.total / GiB:
            tight.append((row, off))
        print(
            f"| {row['case']} | {row['model'].split('/')[-1]} | {row['gpu']} x {row['tp']} | {util:g} "
            f"| {row['vllm_version']} | {_pair(float(row['weights_GiB']), mem.weights.total / GiB)} "
            f"| {_pair(_logged(row, 'activation_GiB'), mem.activations / GiB)} "
            f"| {_pair(_logged(row, 'non_torch_GiB'), mem.runtime_overhead / GiB)} "
            f"| {_pair(rest, mem.reserved / GiB)} | {_pair(kv, mem.kv_budget / GiB)} | {off:+.2f}{pct} |"
        )
    print(f"\nKV budget, gpucap - logged: median |off| {pd.Series(offs).abs().median():.2f} GiB over {len(offs)} cases")
    for r, d in tight:
        print(f"  tight (weights > 70% of what vLLM may use): case {r['case']} {r['model']}: {d:+.2f} GiB")
    if tight:
        print(
            f"  median |off| over the {len(tight)} tight cases: {pd.Series([abs(d) for _, d in tight]).median():.2f} GiB"
        )


if __name__ == "__main__":
    main()
