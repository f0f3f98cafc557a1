"""Fixed-length closed loops: the wave formula against the step-level simulation, run by run.

    python benchmarks/waves.py [--waves 8] [--jobs 2]

A closed loop of fixed lengths starts in one wave, its first C requests, and then runs as a
convoy (``gpucap.physics.waves``; an engine that runs prompts first keeps its waves). For a grid of
models (Llama-3.1-8B on one H100, Llama-3.3-70B on 4 H100 and on 8 A100 with vLLM, and on 4 H100
with SGLang), prompt and output lengths and concurrencies (2-64, within what the KV cache
holds), this simulates a run of ``waves x C`` prompts (``gpucap.queueing.simulate.run_benchmark``)
and prints, as predicted / simulated, the throughput, mean TTFT and mean TPOT of ``wave_loop`` for
that run, and of every wave taken as the first (``num_prompts = C``, the formula before the
convoy); then the mean TTFT of the run's later waves (the fifth on) against the convoy alone
(``num_prompts`` infinite), and the share of cells within 10% and 20%.
"""

from __future__ import annotations

import argparse

import numpy as np
from joblib import Parallel, delayed

from gpucap.config import hardware
from gpucap.physics.coefficients import Coefficients
from gpucap.physics.memory import batch_slots
from gpucap.physics.requests import Requests
from gpucap.physics.waves import wave_loop
from gpucap.queueing.loads import Load
from gpucap.queueing.simulate import run_benchmark

SETUPS = {
    "8B, 1 H100": ("meta-llama/Llama-3.1-8B-Instruct", "H100-SXM-80GB", 1, "vllm"),
    "70B, 4 H100": ("meta-llama/Llama-3.3-70B-Instruct", "H100-SXM-80GB", 4, "vllm"),
    "70B, 8 A100": ("meta-llama/Llama-3.3-70B-Instruct", "A100-SXM-80GB", 8, "vllm"),
    "70B, 4 H100, SGLang": ("meta-llama/Llama-3.3-70B-Instruct", "H100-SXM-80GB", 4, "sglang"),
}
SHAPES = [(128, 128), (1000, 256), (3840, 256), (4000, 256), (1000, 1000), (16000, 64)]
CONCURRENCY = [2, 4, 16, 64]
LATER = 4  # waves left out of the later waves' mean TTFT


def cell(setup: str, input_len: int, output_len: int, c: int, waves: int) -> dict[str, object] | None:
    model, gpu, tp, engine = SETUPS[setup]
    hw = hardware(model, gpu, tp=tp, engine=engine)
    coef = Coefficients.for_engine(engine)
    slots = batch_slots(hw, context_tokens=input_len + output_len)
    if c > slots:
        return None
    sim = run_benchmark(
        hw, coef, Load.closed_loop(c, waves * c), input_len=float(input_len), output_len=float(output_len)
    )
    requests = Requests(float(input_len), float(output_len), max_running=slots)
    run = wave_loop(hw, coef, requests, concurrency=float(c), num_prompts=float(waves * c))
    first = wave_loop(hw, coef, requests, concurrency=float(c), num_prompts=float(c))
    steady = wave_loop(hw, coef, requests, concurrency=float(c))
    later = float(np.mean(np.asarray(sim.ttft_s)[LATER * c :]))
    measured = (sim.output_tokens_per_s, sim.stats["ttft"]["mean"], sim.stats["tpot"]["mean"])
    return {
        "cell": f"{setup}, {input_len}/{output_len}, C={c}",
        "run": [float(v) / m for v, m in zip((run.output_tokens_per_s, run.ttft_s, run.tpot_s), measured, strict=True)],
        "first": [
            float(v) / m for v, m in zip((first.output_tokens_per_s, first.ttft_s, first.tpot_s), measured, strict=True)
        ],
        "later": float(steady.ttft_s) / later,
        "later_first": float(first.ttft_s) / later,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--waves", type=int, default=8, help="prompts per run, in multiples of the concurrency (default 8)")
    ap.add_argument("--jobs", type=int, default=2, help="processes (default 2)")
    args = ap.parse_args()
    grid = [(s, i, o, c) for s in SETUPS for i, o in SHAPES for c in CONCURRENCY]
    rows = [r for r in Parallel(n_jobs=args.jobs)(delayed(cell)(*g, args.waves) for g in grid) if r is not None]
    print(f"runs of {args.waves} x C prompts; predicted / simulated (convoy | every wave as the first)\n")
    print("| cell | throughput | mean TTFT | mean TPOT | later waves' TTFT |")
    print("|---|---|---|---|---|")
    for r in rows:
        run, first = r["run"], r["first"]
        parts = [f"{a:.2f} \\| {b:.2f}" for a, b in zip(run, first, strict=True)]  # type: ignore[call-overload]
        print(f"| {r['cell']} | {' | '.join(parts)} | {r['later']:.2f} \\| {r['later_first']:.2f} |")
    print()
    for name, key, k in (("throughput", "run", 0), ("mean TTFT", "run", 1), ("mean TPOT", "run", 2)):
        for label, kk in (("convoy", key), ("every wave as the first", "first")):
            ratio = np.array([r[kk][k] for r in rows])  # type: ignore[index]
            err = np.abs(ratio - 1.0)
            print(
                f"{name:10s} {label:24s} within 10%: {np.mean(err <= 0.10):5.0%}  within 20%: {np.mean(err <= 0.20):5.0%}"
                f"  worst {ratio[np.argmax(err)]:.2f}  median error {np.median(err):.1%}"
            )
    for label, key in (("convoy", "later"), ("every wave as the first", "later_first")):
        ratio = np.array([r[key] for r in rows])
        err = np.abs(ratio - 1.0)
        print(
            f"later waves' TTFT {label:24s} within 10%: {np.mean(err <= 0.10):5.0%}  within 20%: {np.mean(err <= 0.20):5.0%}"
            f"  range {ratio.min():.2f}-{ratio.max():.2f}"
        )
    print(f"\n{len(rows)} cells")


if __name__ == "__main__":
    main()
