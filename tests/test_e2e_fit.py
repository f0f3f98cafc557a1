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

from gpucap import units
from gpucap.calibration import validate
from gpucap.catalog.gpus import get_gpu
from gpucap.catalog.lookup import load_model
from gpucap.config import Layout
from gpucap.physics.memory import memory_breakdown
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


# --- the shipped example: data/loadtests/vllm-cpu-tiny-llama, a `make e2e` run --------------------

CPU_RUNS = ROOT / "data" / "loadtests" / "vllm-cpu-tiny-llama"


@pytest.fixture()
def cpu_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpucap.catalog import gpus

    monkeypatch.setattr(gpus, "_ADDED_FILES", [])
    gpus.add_gpu_file(CPU_RUNS / "gpus.csv")


def test_shipped_cpu_runs_carry_the_served_engine(cpu_gpu: None) -> None:
    """The manifest's memory share is fit.py's for the server's 1 GiB KV cache (make e2e's
    settings), and every case is predicted with the engine the server ran."""
    import json

    args = server_args(model=str(CPU_RUNS / "config.json"), gpu="CPU-E2E", dtype="fp32", kv_cache_gib=1.0,
                       max_num_seqs=256, max_num_batched_tokens=2048)  # fmt: skip
    engine = fit.server_engine(args)
    entry = json.loads((CPU_RUNS / "manifest.json").read_text())["concurrency-*.json"]
    assert entry["gpu_memory_utilization"] == pytest.approx(engine.gpu_memory_utilization, rel=1e-6)
    cases = _cpu_cases()
    assert len(cases) == 5 and list(cases["concurrency"]) == [1, 2, 4, 8, 16]
    hw, replicas, _ = validate.case_hardware(cases.iloc[0])
    assert replicas == 1 and hw.gpu.key == "CPU-E2E" and hw.spec.num_layers == 6 and hw.weight_dtype == "fp32"
    assert (hw.engine.max_num_seqs, hw.engine.max_num_batched_tokens, hw.engine.block_size) == (256, 2048, 128)
    assert hw.engine.cuda_graphs is False
    # vLLM's CPU platform turns async scheduling off (vllm/platforms/cpu.py): the host adds
    assert hw.engine.overlap_host is False


def _cpu_cases() -> pd.DataFrame:
    from gpucap.calibration.loadtests import cases_from_runs
    from gpucap.calibration.results import read_results

    return cases_from_runs(read_results(CPU_RUNS).runs.sort_values("concurrency"))


def test_shipped_cpu_sweep_limit_and_its_fit(cpu_gpu: None) -> None:
    from gpucap.calibration.calibrate import calibrate
    from gpucap.calibration.limits import find_sweeps
    from gpucap.config import SLO

    slo = SLO(1.0, 0.05, "mean")
    cases = _cpu_cases()
    (sweep,), _ = find_sweeps(cases, slo)
    # concurrency-0004.json: mean TTFT 736.24 ms; -0008: 1534.4 ms (TPOT 42 ms < 50 there): the
    # TTFT SLO of 1 s is crossed at 4 + (1000 - 736.24) / (1534.4 - 736.24) x 4 = 5.323
    assert sweep.measured.binding == "ttft"
    assert sweep.measured.limit == pytest.approx(4 + (1000 - 736.245) / (1534.396 - 736.245) * 4, rel=1e-3)
    result = calibrate(cases, free=("u_compute", "u_hbm", "t_layer_s", "t_seq_s"), targets=("runs", "limits"), slo=slo)
    row = result.limits.iloc[0]
    assert row["fitted_low"] <= row["measured"] <= row["fitted_high"]
    assert not result.metric_errors["worse"].any()
    assert (result.metric_errors["after"] < result.metric_errors["before"]).all()


def test_cli_calibrates_the_shipped_cpu_runs_with_their_gpu_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpucap.catalog import gpus
    from gpucap.cli.main import main

    monkeypatch.setattr(gpus, "_ADDED_FILES", [])
    common = [str(CPU_RUNS), "--targets", "runs,limits", "--slo-ttft", "1", "--slo-tpot", "0.05"]
    assert main(["calibrate", *common, "--out", str(tmp_path / "none.json")]) == 2
    assert "CPU-E2E" in capsys.readouterr().err  # the runs name a GPU no catalog has
    assert not (tmp_path / "none.json").exists()
    out = tmp_path / "cpu.json"
    argv = ["calibrate", *common, "--gpu-file", str(CPU_RUNS / "gpus.csv"), "--free", "u_compute,t_seq_s", "--out"]
    assert main([*argv, str(out)]) == 0
    assert "measured 5.32" in capsys.readouterr().out and out.exists()
