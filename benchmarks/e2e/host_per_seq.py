"""The engine's host time per running sequence per decode step, on vLLM's own engine loop.

    benchmarks/e2e/.venv/bin/python benchmarks/e2e/host_per_seq.py [--batches 1,64,256,512,1024] [--steps 64]

A decode step of B sequences costs the device's work plus the host's: scheduling, the model
runner's input preparation and the bookkeeping of each sequence's new token (``t_seq_s`` per
sequence, ``t_overhead_s`` per step in gpucap). On a GPU the two are hard to tell apart from the
outside; on this CPU they can be, by making the model so small that its own work per sequence is
a few microseconds. This builds three such Llamas (random weights, the tiny model's tokenizer;
hidden size 64 with one and with four layers, hidden size 256 with one), runs vLLM's engine (``vllm.LLM``, the engine core in
its own process as the server runs it) on B prompts of 8 tokens decoding ``--steps`` tokens each
with every one in the batch at once, and takes the step time as the time of that run less a run
of one output token, over the steps between. The slope of the step time in B is the cost per
sequence: the host's, the model's kernels per layer (on a CPU each layer's attention and matmuls
have a cost per sequence beyond their FLOP) and the model's FLOP, three unknowns that the three
models' slopes determine; the host's is what is left with no layer and no FLOP.

Prints the step time per batch and model, the slopes, and the host time per sequence per step.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MICRO = (
    {"hidden_size": 64, "intermediate_size": 192, "num_hidden_layers": 1},
    {"hidden_size": 64, "intermediate_size": 192, "num_hidden_layers": 4},
    {"hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 1},
)
VOCAB = 4096  # the tiny model's tokenizer


def build(out: Path, shape: dict[str, int]) -> float:
    """A micro Llama at ``out`` with the tiny model's tokenizer; returns its FLOP per decoded token
    (2 x the parameters, the logits included; attention over a few dozen tokens is negligible)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    spec = {**shape, "vocab_size": VOCAB, "num_attention_heads": 2, "num_key_value_heads": 1}
    stamp = out / "micro.json"
    if not (stamp.is_file() and json.loads(stamp.read_text()) == spec):
        out.mkdir(parents=True, exist_ok=True)
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(HERE / "model" / name, out / name)
        torch.manual_seed(0)
        config = LlamaConfig(
            **spec, max_position_embeddings=512, tie_word_embeddings=False, bos_token_id=0, eos_token_id=1
        )
        LlamaForCausalLM(config).to(torch.float32).save_pretrained(out, safe_serialization=True)
        stamp.write_text(json.dumps(spec))
    h, f, layers = shape["hidden_size"], shape["intermediate_size"], shape["num_hidden_layers"]
    head = h // 2
    per_layer = h * h * 2 + 2 * h * head + 3 * h * f  # q, o; k, v (one KV head); the MLP
    return 2.0 * (layers * per_layer + VOCAB * h)


def step_times(model: Path, batches: list[int], steps: int, repeats: int) -> dict[int, float]:
    """Seconds per decode step at each batch: (run of ``steps`` tokens - run of one) / (steps - 1),
    the least of ``repeats``."""
    from vllm import LLM, SamplingParams

    llm = LLM(
        model=str(model), dtype="float32", max_model_len=256, max_num_seqs=max(batches),
        max_num_batched_tokens=max(8192, 8 * max(batches)), enforce_eager=True, enable_prefix_caching=False, seed=0,
    )  # fmt: skip
    prompt = {"prompt_token_ids": [5, 6, 7, 8, 9, 10, 11, 12]}

    def run(b: int, n: int) -> float:
        params = SamplingParams(max_tokens=n, ignore_eos=True, detokenize=False, temperature=0.0)
        t0 = time.perf_counter()
        llm.generate([prompt] * b, params, use_tqdm=False)
        return time.perf_counter() - t0

    run(8, 4)  # warm-up
    out = {}
    for b in batches:
        long = min(run(b, steps) for _ in range(repeats))
        short = min(run(b, 1) for _ in range(repeats))
        out[b] = (long - short) / (steps - 1)
        print(f"   batch {b:5d}: {out[b] * 1e3:8.3f} ms a step", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", default="1,64,256,512,1024")
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--work", type=Path, default=HERE / "out" / "micro", help="where the micro models are built")
    a = ap.parse_args()
    try:
        batches = sorted({int(b) for b in a.batches.split(",")})
    except ValueError:
        sys.exit(f"--batches must be whole numbers separated by commas, got {a.batches!r}")
    if len(batches) < 2 or batches[0] < 1:
        sys.exit(f"--batches needs at least two batch sizes >= 1, got {a.batches!r}")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0")
    import numpy as np

    slopes, flops = [], []
    for k, shape in enumerate(MICRO):
        path = a.work / f"micro{k}"
        flop = build(path, shape)
        print(f"micro model {k}: {shape}, {flop / 1e6:.2f} MFLOP a token")
        times = step_times(path, batches, a.steps, a.repeats)
        b = np.array(batches, dtype=float)
        t = np.array([times[x] for x in batches])
        slope, intercept = np.polyfit(b, t, 1)
        print(f"   step = {intercept * 1e3:.3f} ms + {slope * 1e6:.2f} us x batch")
        slopes.append(slope)
        flops.append(flop)
    # slope = host + layers x (per-layer kernel time a sequence) + FLOP / rate: three models, three unknowns
    design = np.array([[1.0, float(m["num_hidden_layers"]), f] for m, f in zip(MICRO, flops, strict=True)])
    host, per_layer, per_flop = np.linalg.solve(design, np.array(slopes))
    print(
        "per sequence a step: "
        + ", ".join(f"{s * 1e6:.2f} us" for s in slopes)
        + f"; solved: the host's {host * 1e6:.2f} us, {per_layer * 1e6:.2f} us a layer (the model's kernels), "
        f"{per_flop * 1e12:.2f} ps a FLOP ({1 / per_flop / 1e9:.1f} GFLOP/s)"
    )


if __name__ == "__main__":
    main()
