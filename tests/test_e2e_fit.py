"""benchmarks/e2e/fit.py: the engine it predicts the CPU server with.

The server is given its KV cache in bytes (VLLM_CPU_KVCACHE_SPACE); gpucap takes a memory share.
fit.py picks the share u = (KV + weights + activations + reserved) / memory, so that gpucap's
own budget u x memory - weights - activations - reserved is the server's KV cache to the byte.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import pandas as pd
import pytest

from gpucap import units, validate
from gpucap.catalog import load_model
from gpucap.gpus import get_gpu
from gpucap.layout import Layout
from gpucap.memory import memory_breakdown
from gpucap.units import GiB

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("e2e_fit", ROOT / "benchmarks" / "e2e" / "fit.py")
assert spec and spec.loader
fit = importlib.util.module_from_spec(spec)
sys.modules["e2e_fit"] = fit
spec.loader.exec_module(fit)


def server_args(**over: object) -> argparse.Namespace:
    args = {"model": "Qwen/Qwen3-8B", "gpu": "L40S", "dtype": "bf16", "kv_cache_gib": 10.0, "max_num_seqs": 64,
            "max_num_batched_tokens": 4096, "block_size": 128, "eager": True}  # fmt: skip
    return argparse.Namespace(**{**args, **over})


def test_kv_budget_is_the_servers_kv_cache() -> None:
    args = server_args()
    engine = fit.server_engine(args)
    mem = memory_breakdown(
        load_model(args.model), get_gpu(args.gpu), Layout(), weight_dtype="bf16", kv_dtype="auto", engine=engine
    )
    assert mem.kv_budget == pytest.approx(10 * GiB, rel=1e-12)
    assert mem.cuda_graphs == 0.0  # eager: no CUDA-graph pool
    assert (engine.max_num_seqs, engine.max_num_batched_tokens, engine.block_size) == (64, 4096, 128)
    assert engine.cuda_graphs is False


def test_memory_share_formula_and_refusal() -> None:
    # (1 + 2 + 0.5 + 0.5) GiB of 16 GiB = 0.25
    gib = {"kv_bytes": 1 * GiB, "weight_bytes": 2 * GiB, "activation_bytes": 0.5 * GiB, "reserved_bytes": 0.5 * GiB}
    assert fit.memory_share_for_kv(memory_bytes=16 * GiB, **gib) == 0.25
    with pytest.raises(ValueError, match="does not fit"):
        fit.memory_share_for_kv(memory_bytes=3 * GiB, **gib)


def test_cases_carry_the_served_engine() -> None:
    engine = fit.server_engine(server_args())
    row = pd.Series({"model": "Qwen/Qwen3-8B", "gpu": "L40S", "num_gpus": 1, "tp": 1, "pp": 1, "engine": "vllm",
                     "weight_dtype": "bf16", "kv_cache_dtype": "fp32"})  # fmt: skip
    served = fit.as_served(pd.DataFrame([row]), engine).iloc[0]
    hw, _, _ = validate.case_hardware(served)
    assert hw.engine == engine.resolve(hw.gpu)
    assert units.kv_bytes_per_element("fp32") == 4.0  # a float32 KV cache: 4 bytes an element
    hw, _, _ = validate.case_hardware(row.replace({"fp32": "auto"}))
    assert hw.engine.max_num_seqs != 64  # without the columns: the engine's own default
