"""benchmarks/e2e/fit.py: the engine it predicts the CPU server with.

The server is given its KV cache in bytes (VLLM_CPU_KVCACHE_SPACE); gpucap takes a memory share.
fit.py picks the share u = (KV + weights + activations) / memory, so that gpucap's own budget
u x memory - weights - activations is the server's KV cache to the byte.
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
    assert (mem.cuda_graphs, mem.runtime_overhead) == (0.0, 0.0)  # eager, nothing reserved
    assert (engine.max_num_seqs, engine.max_num_batched_tokens, engine.block_size) == (64, 4096, 128)
    assert engine.cuda_graphs is False


def test_memory_share_formula_and_refusal() -> None:
    # (1 + 2 + 1) GiB of 16 GiB = 0.25
    u = fit.memory_share_for_kv(kv_bytes=1 * GiB, weight_bytes=2 * GiB, activation_bytes=1 * GiB, memory_bytes=16 * GiB)
    assert u == 0.25
    with pytest.raises(ValueError, match="does not fit"):
        fit.memory_share_for_kv(kv_bytes=15 * GiB, weight_bytes=2 * GiB, activation_bytes=0, memory_bytes=16 * GiB)


def test_served_engine_applies_inside_only() -> None:
    engine = fit.server_engine(server_args())
    row = pd.Series({"model": "Qwen/Qwen3-8B", "gpu": "L40S", "num_gpus": 1, "tp": 1, "pp": 1, "engine": "vllm",
                     "weight_dtype": "bf16", "kv_cache_dtype": "fp32"})  # fmt: skip
    with fit.served_engine(engine):
        hw, _, _ = validate.case_hardware(row)
        assert hw.engine == engine
        assert units.kv_bytes_per_element("fp32") == 4.0  # a float32 KV cache: 4 bytes an element
        with pytest.raises(ValueError, match="the server ran vllm"):
            validate.case_hardware(row.copy().replace({"vllm": "sglang"}))
    assert "fp32" not in units.KV_BYTES_PER_ELEMENT
    hw, _, _ = validate.case_hardware(row.replace({"fp32": "auto"}))
    assert hw.engine.max_num_seqs != 64  # the engine's own default again
