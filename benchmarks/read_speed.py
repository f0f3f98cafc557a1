"""How fast gpucap reads load-test results: one JSON-lines file of ``--size-mb`` megabytes of
``vllm bench serve --save-result`` objects (each with its per-request lists, as
``--save-detailed`` writes them), read by ``gpucap.calibration.results.read_results``.

    python benchmarks/read_speed.py [--size-mb 200]

Prints the size, the runs, the seconds and MB/s. The file is written to a temporary folder and
removed afterwards.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from gpucap.calibration.loadtests import cases_from_runs
from gpucap.calibration.results import read_results

REQUESTS = 200  # per run: the per-request lists make a run ~20 kB, as real detailed results are


def one_run(k: int, rng: np.random.Generator) -> str:
    """A run in the layout of vllm/benchmarks/serve.py's saved result (values made up)."""
    ttfts = rng.uniform(0.05, 0.5, REQUESTS)
    run = {
        "date": "20261201-120000", "endpoint_type": "openai", "backend": "vllm", "label": None,
        "model_id": "Qwen/Qwen3-8B", "tokenizer_id": "Qwen/Qwen3-8B", "num_prompts": REQUESTS,
        "gpu": "H100-SXM-80GB", "tp": "1", "request_rate": "inf", "burstiness": 1.0, "max_concurrency": 1 + k % 64,
        "duration": 60.0 + k, "completed": REQUESTS, "failed": 0, "total_input_tokens": 1000 * REQUESTS,
        "total_output_tokens": 200 * REQUESTS, "request_throughput": REQUESTS / (60.0 + k),
        "output_throughput": 200 * REQUESTS / (60.0 + k), "total_token_throughput": 1200 * REQUESTS / (60.0 + k),
        "mean_ttft_ms": float(ttfts.mean() * 1e3), "median_ttft_ms": float(np.median(ttfts) * 1e3),
        "p99_ttft_ms": float(np.quantile(ttfts, 0.99) * 1e3), "mean_tpot_ms": 20.0, "median_tpot_ms": 19.0,
        "p99_tpot_ms": 30.0, "mean_itl_ms": 19.5, "median_itl_ms": 18.0, "p99_itl_ms": 60.0,
        "input_lens": [1000] * REQUESTS, "output_lens": [200] * REQUESTS,
        "ttfts": [round(float(t), 6) for t in ttfts], "itls": [[0.02, 0.021, 0.019]] * REQUESTS,
        "generated_texts": ["x" * 16] * REQUESTS, "errors": [""] * REQUESTS,
    }  # fmt: skip
    return json.dumps(run)


def summary_run(k: int) -> str:
    """A run without per-request lists, padded to the ~2.7 kB of a typical summary line."""
    run = json.loads(one_run(k, np.random.default_rng(k)))
    for key in ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors"):
        run.pop(key)
    run["label"] = "x" * 1900
    return json.dumps(run)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=float, default=200.0)
    ap.add_argument(
        "--summary-only",
        action="store_true",
        help="runs without their per-request lists (~2.7 kB each, as a plain --save-result JSON-lines file)",
    )
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "results.jsonl"
        written, k = 0, 0
        with path.open("w") as f:
            while written < args.size_mb * 1e6:
                line = (summary_run(k) if args.summary_only else one_run(k, rng)) + "\n"
                f.write(line)
                written += len(line)
                k += 1
        t0 = time.perf_counter()
        rs = read_results(path)
        seconds = time.perf_counter() - t0
        t0 = time.perf_counter()
        cases = cases_from_runs(rs.runs)
        to_cases = time.perf_counter() - t0
    mb = written / 1e6
    print(
        f"{mb:.0f} MB, {k:,} runs ({len(rs.runs):,} read, {len(rs.bad)} bad): {seconds:.1f} s, {mb / seconds:.0f} MB/s; "
        f"as {len(cases):,} calibration cases in {to_cases:.1f} s more"
    )


if __name__ == "__main__":
    main()
