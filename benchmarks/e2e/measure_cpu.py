"""Measure this CPU as gpucap describes a GPU: dense matmul FLOP/s in the dtype the server runs,
through the server's own GEMM path, and memory bandwidth; write them as a GPU-catalog row.

    benchmarks/e2e/.venv/bin/python benchmarks/e2e/measure_cpu.py MODEL_DIR OUT.csv \\
        --key CPU-E2E --cores 0 --tokens 256 --dtype float32

Runs pinned to ``--cores`` with one thread per core: the cores vLLM's CPU worker binds its
OpenMP threads to (``VLLM_CPU_OMP_THREADS_BIND``; on a 2-core machine it takes core 0 and leaves
core 1 to the API server).

Matmul: every linear layer of the model (q/k/v, o, gate/up, down, lm_head) on ``--tokens`` rows
(one prompt's prefill), through what vLLM's ``dispatch_cpu_unquantized_gemm`` picks for an
unquantized layer on this CPU: vLLM's oneDNN matmul when it builds for the dtype, else
``torch.nn.functional.linear`` (as the server falls back). FLOP/s = 2 M K N / t; the peak is the
best layer (a datasheet peak is what the best kernel reaches).

Roofline overlap: the model's whole stack of linear layers (distinct weights per layer, streamed
from memory as in a decode step) at 1 to 256 rows. A device that hides the shorter roofline
under the longer takes ``max(c, m)``, c the multiplies at ``u`` of the peak and m the weights'
read at the peak bandwidth; one that does not takes ``c + m``. The row's ``roofline_overlap`` is
the rho of ``max(c, m) + (1 - rho) min(c, m)`` that fits the ladder best (least squares in log
time, rho and u on a grid), the form ``gpucap.physics.steptime.step_terms`` applies.

Memory: STREAM-style kernels on 128 MiB float32 arrays (4x the last-level cache): read (sum),
copy (``y = x``, 2 x bytes) and add (``z = x + y``, 3 x bytes); bytes/s = bytes moved / t; the
peak is the best kernel (STREAM's convention: write-allocate traffic not counted).

Every time is the shortest of many single calls of a few milliseconds: on a machine shared with
other work, some calls run undisturbed, and the shortest is the hardware's figure.

The row's memory is the machine's RAM (``/proc/meminfo`` MemTotal); the share of it that vLLM
gives the KV cache is set by the end-to-end fit from ``VLLM_CPU_KVCACHE_SPACE``. link_kind and
bandwidth are placeholders (one CPU, no tensor parallelism).
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os
import platform
import time
from pathlib import Path

GIB = 2.0**30
COLUMNS = ("key", "name", "vendor", "memory_GB", "memory_GiB_reported", "bf16_dense_TFLOPs", "fp8_dense_TFLOPs",
           "fp4_dense_TFLOPs", "int8_dense_TOPs", "hbm_TB_per_s", "link_kind", "link_GB_per_s_per_direction",
           "max_tp_on_link", "pcie_GB_per_s_per_direction", "tdp_W", "roofline_overlap", "source", "notes")  # fmt: skip
LADDER_ROWS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def linear_shapes(config: dict) -> dict[str, tuple[int, int]]:
    """(K, N) of each linear layer of a Llama-style config: input features, output features."""
    h, inter, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    heads, kv = config["num_attention_heads"], config.get("num_key_value_heads", config["num_attention_heads"])
    head_dim = config.get("head_dim") or h // heads
    return {
        "qkv_proj": (h, (heads + 2 * kv) * head_dim),
        "o_proj": (heads * head_dim, h),
        "gate_up_proj": (h, 2 * inter),
        "down_proj": (inter, h),
        "lm_head": (h, vocab),
    }


def best_time_s(fn, repeats: int, rounds: int) -> float:
    """Shortest mean time of one call over ``rounds`` rounds of ``repeats`` calls."""
    fn()
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(repeats):
            fn()
        best = min(best, (time.perf_counter() - t0) / repeats)
    return best


def server_linear(weight, torch):  # noqa: ANN001 - torch objects
    """The server's GEMM for an unquantized weight [N, K]: vLLM's oneDNN matmul, else torch's."""
    try:
        from vllm import _custom_ops as ops
        from vllm.platforms import current_platform

        current_platform.import_kernels()
        if ops._supports_onednn:
            handler = ops.create_onednn_mm(weight.t(), 32)
            return (lambda x: ops.onednn_mm(handler, x, None)), "vLLM oneDNN matmul"
    except (ImportError, RuntimeError, AttributeError):
        pass
    return (lambda x: torch.nn.functional.linear(x, weight)), "torch.nn.functional.linear (vLLM's fallback)"


def matmul_flops_per_s(config: dict, tokens: int, dtype: str) -> tuple[dict[str, float], str]:
    """FLOP/s of each linear layer at ``tokens`` rows: 2 x tokens x K x N / time."""
    import torch

    dt_ = getattr(torch, dtype)
    out, path = {}, ""
    for name, (k, n) in linear_shapes(config).items():
        w = torch.randn(n, k, dtype=dt_)
        x = torch.randn(tokens, k, dtype=dt_)
        fn, path = server_linear(w, torch)
        flop = 2.0 * tokens * k * n
        t = best_time_s(lambda fn=fn, x=x: fn(x), repeats=1, rounds=40)
        out[name] = flop / t
    return out, path


def stack_seconds(
    config: dict, dtype: str, rows: tuple[int, ...] = LADDER_ROWS
) -> tuple[dict[int, float], float, float]:
    """Time of one pass through every linear layer of the model (each layer its own weights) at
    each row count; with the FLOP a row costs and the bytes of all the weights."""
    import torch

    dt_ = getattr(torch, dtype)
    shapes = linear_shapes(config)
    per_layer = [shapes[n] for n in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")]
    kn = per_layer * config["num_hidden_layers"] + [shapes["lm_head"]]
    layers = [(server_linear(torch.randn(n, k, dtype=dt_), torch)[0], k) for k, n in kn]
    times = {}
    for m in rows:
        xs = {k: torch.randn(m, k, dtype=dt_) for k in {k for _, k in layers}}
        times[m] = best_time_s(lambda xs=xs: [f(xs[k]) for f, k in layers], repeats=1, rounds=15)
    size = torch.tensor([], dtype=dt_).element_size()
    return times, sum(2.0 * k * n for k, n in kn), sum(size * k * n for k, n in kn)


def roofline_overlap(
    times: dict[int, float], flop_per_row: float, weight_bytes: float, flops: float, bw: float
) -> float:
    """rho of ``max(c, m) + (1 - rho) min(c, m)`` that fits ``times`` best (module docstring)."""
    import numpy as np

    rows = np.array(list(times), dtype=float)
    t = np.array(list(times.values()))
    best, rho_best = np.inf, 1.0
    for rho in np.linspace(0.0, 1.0, 21):
        for u in np.linspace(0.3, 1.0, 71):
            c, m = rows * flop_per_row / (flops * u), weight_bytes / bw
            model = np.maximum(c, m) + (1.0 - rho) * np.minimum(c, m)
            err = float(np.sum(np.log(model / t) ** 2))
            if err < best:
                best, rho_best = err, float(rho)
    return rho_best


def memory_bytes_per_s(mib: int = 128) -> dict[str, float]:
    """STREAM-style bandwidth: bytes moved / time for read (sum), copy and add."""
    import torch

    n = mib * 2**20 // 4
    x, y, z = torch.ones(n), torch.ones(n), torch.empty(n)
    kernels = {
        "read": (lambda: x.sum(), 4 * n),
        "copy": (lambda: z.copy_(x), 8 * n),
        "add": (lambda: torch.add(x, y, out=z), 12 * n),
    }
    return {name: moved / best_time_s(fn, repeats=1, rounds=40) for name, (fn, moved) in kernels.items()}


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "CPU"


def ram_bytes() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return float(line.split()[1]) * 1024
    raise RuntimeError("/proc/meminfo has no MemTotal line")


def parse_cores(text: str) -> set[int]:
    """'0', '0,2' or '0-3' (VLLM_CPU_OMP_THREADS_BIND's syntax for one rank) -> core ids."""
    cores: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        cores.update(range(int(lo), int(hi or lo) + 1))
    return cores


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model_dir", type=Path, help="folder with the served model's config.json")
    ap.add_argument("out", type=Path, help="GPU-file CSV to write (refused if it exists)")
    ap.add_argument("--key", default="CPU-E2E")
    ap.add_argument("--cores", default="0", help="comma-separated cores the server's inference threads use")
    ap.add_argument("--tokens", type=int, default=256, help="rows of the matmuls (one prompt's prefill)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    args = ap.parse_args()
    if args.out.exists():
        raise SystemExit(f"measure_cpu.py: error: {args.out} exists; results are never overwritten")
    cores = parse_cores(args.cores)
    os.sched_setaffinity(0, cores)
    import torch

    torch.set_num_threads(len(cores))
    config = json.loads((args.model_dir / "config.json").read_text())
    load = os.getloadavg()[0]
    if load > 0.5 * (os.cpu_count() or 1):
        print(f"cpu: warning: load average {load:.1f} on {os.cpu_count()} cores; other work lowers these figures")
    t0 = time.perf_counter()
    flops, path = matmul_flops_per_s(config, args.tokens, args.dtype)
    bw = memory_bytes_per_s()
    peak_flops, peak_bw = max(flops.values()), max(bw.values())
    print(f"cpu: {cpu_name()}, cores {sorted(cores)}, {len(cores)} thread(s), {time.perf_counter() - t0:.0f} s")
    print(f"cpu: {args.dtype} matmul at M={args.tokens} through {path}:")
    for name, v in flops.items():
        print(f"       {name:<13} {v / 1e9:7.1f} GFLOP/s")
    print("cpu: memory: " + ", ".join(f"{k} {v / 1e9:.1f} GB/s" for k, v in bw.items()))
    ladder, flop_per_row, weight_bytes = stack_seconds(config, args.dtype)
    rho = roofline_overlap(ladder, flop_per_row, weight_bytes, peak_flops, peak_bw)
    print(f"cpu: all linear layers ({weight_bytes / 1e6:.1f} MB of weights; the read alone "
          f"{weight_bytes / peak_bw * 1e3:.2f} ms) at M rows:")  # fmt: skip
    for m, t in ladder.items():
        print(f"       M={m:<4} {t * 1e3:7.2f} ms  (multiplies at peak {m * flop_per_row / peak_flops * 1e3:6.2f} ms)")
    print(f"cpu: roofline overlap {rho:.2f} (1: the shorter roofline hides under the longer; 0: they add)")
    print(f"cpu: peak {peak_flops / 1e9:.1f} GFLOP/s, {peak_bw / 1e9:.1f} GB/s -> {args.out}")
    date = dt.date.today().isoformat()
    row = dict.fromkeys(COLUMNS, "")
    row.update(
        key=args.key,
        name=f"{cpu_name()} ({len(cores)} core(s) for inference)",
        vendor="CPU",
        memory_GB=f"{ram_bytes() / 1e9:.3f}",
        memory_GiB_reported=f"{ram_bytes() / GIB:.3f}",
        bf16_dense_TFLOPs=f"{peak_flops / 1e12:.6f}",
        hbm_TB_per_s=f"{peak_bw / 1e12:.6f}",
        link_kind="pcie",
        link_GB_per_s_per_direction="1",
        max_tp_on_link="1",
        roofline_overlap=f"{rho:.2f}",
        source=f"measured by benchmarks/e2e/measure_cpu.py on {date}",
        notes=(
            f"bf16_dense_TFLOPs holds the best {args.dtype} matmul measured ({path}, M={args.tokens}; "
            + ", ".join(f"{k} {v / 1e9:.1f}" for k, v in flops.items())
            + " GFLOP/s): gpucap computes fp32 and bf16 weights at this column's rate. hbm_TB_per_s: best of "
            + ", ".join(f"{k} {v / 1e9:.1f}" for k, v in bw.items())
            + f" GB/s (128 MiB arrays); load average {load:.1f} when measured. roofline_overlap: fitted to the"
            + " linear stack at M rows: "
            + ", ".join(f"M={m} {t * 1e3:.2f} ms" for m, t in ladder.items())
            + f" against {weight_bytes / peak_bw * 1e3:.2f} ms for the weights' read. Link columns are placeholders"
            + " (one CPU, tp=1)."
        ),
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("x", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerow(row)


if __name__ == "__main__":
    main()
