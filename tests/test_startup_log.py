"""Reading a vLLM start-up log's memory lines (``gpucap.calibration.startuplog``) and using them
(``gpucap estimate --startup-log`` / ``--kv-cache-memory``). The log lines are quoted from the
published start-ups in data/memory/vllm-startup-logs.csv and the vLLM PRs named below."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from gpucap.calibration.startuplog import parse_startup_log, read_startup_log
from gpucap.cli.main import main

TABLE = Path(__file__).resolve().parents[1] / "data" / "memory" / "vllm-startup-logs.csv"
QWEN32_TP2 = """\
(Worker_TP0 pid=611) INFO [model_runner.py:329] Model loading took 30.59 GiB and 20.690370 seconds
(Worker_TP1 pid=612) INFO [model_runner.py:329] Model loading took 30.61 GiB and 20.712301 seconds
(Worker_TP0 pid=611) INFO [gpu_worker.py:563] Available KV cache memory: 8.22 GiB
(Worker_TP1 pid=612) INFO [gpu_worker.py:563] Available KV cache memory: 8.25 GiB
(EngineCore pid=411) INFO [kv_cache_utils.py:2235] GPU KV cache size: 67,296 tokens
"""
QWEN32_ARGS = [
    "estimate", "--model", "Qwen/Qwen3-32B", "--gpu", "RTX-PRO-6000-96GB", "--tp", "2",
    "--input-len", "2000", "--output-len", "500",
]  # fmt: skip


def test_every_logged_case_reads_back_its_weights_and_kv() -> None:
    for _, row in pd.read_csv(TABLE).iterrows():
        got = parse_startup_log(row["quote"], f"case {row['case']}")
        if got.weights_gib is not None:  # V0 lines give the weights in GB (= GiB) or GiB
            assert got.weights_gib == pytest.approx(row["weights_GiB"], abs=0.005), row["case"]
        if got.kv_gib is not None:  # case 26 logs the KV pool sleep mode freed, not this line
            assert got.kv_gib == pytest.approx(row["kv_GiB"], abs=0.005), row["case"]


def test_v0_breakdown_line() -> None:
    # vLLM PR #10511 (0.6.5): the whole breakdown, spaced for alignment
    got = parse_startup_log(
        "INFO 12-13 19:54:18 worker.py:243] total_gpu_memory     79.22GiB | gpu_memory_utilization       0.90 | "
        "the current vLLM instance can use    71.29GiB | model weights take   14.96GiB | non_torch_memory     "
        "1.79GiB | PyTorch activation peak memory       1.26GiB | available_kv_cache_memory    53.29GiB"
    )
    assert (got.total_gib, got.utilization, got.weights_gib) == (79.22, 0.90, 14.96)
    assert (got.non_torch_gib, got.activation_gib, got.kv_gib) == (1.79, 1.26, 53.29)
    # 0.9 x 79.22 - 14.96 - 53.29 = 3.048: the activation and non-torch memory, 1.26 + 1.79 = 3.05
    assert got.rest_gib == pytest.approx(3.048)


def test_v1_breakdown_line() -> None:
    # vLLM PR #21489: the summary line that came with --kv-cache-memory
    got = parse_startup_log(
        "Free memory on device (177.66/178.36 GiB) on startup. Desired GPU memory utilization is (0.9, "
        "160.53 GiB). Actual usage is 8.58 GiB for weight, 9.96 GiB for peak activation, 0.07 GiB for "
        "non-torch memory, and 0.65 GiB for CUDAGraph memory. Replace gpu_memory_utilization config with "
        "`--kv-cache-memory=151519866880` to fit into requested memory"
    )
    assert (got.total_gib, got.utilization, got.weights_gib) == (178.36, 0.9, 8.58)
    assert (got.activation_gib, got.non_torch_gib, got.graphs_gib) == (9.96, 0.07, 0.65)
    assert got.kv_gib is None and got.rest_gib is None


def test_v1_consumed_memory_line() -> None:
    # vLLM 0.31.0, Llama-3.1-8B-Instruct on an A100 (data/memory case 30): from 0.27 the weights and
    # the non-torch memory come as one figure, so non-torch = 15.26 - 15.0 = 0.26 GiB
    got = parse_startup_log(pd.read_csv(TABLE).set_index("case").loc[30, "quote"])
    assert (got.weights_gib, got.consumed_gib, got.activation_gib, got.graphs_gib) == (15.0, 15.26, 1.44, 0.23)
    assert got.non_torch == pytest.approx(0.26)
    assert (got.total_gib, got.utilization, got.kv_gib, got.kv_tokens) == (79.25, 0.92, 56.21, 460_496)


def test_tensor_parallel_workers_keep_the_smallest_kv_and_largest_weights() -> None:
    got = parse_startup_log(QWEN32_TP2)
    assert (got.weights_gib, got.kv_gib, got.kv_tokens) == (30.61, 8.22, 67_296)


def test_a_log_without_memory_lines_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "server.log"
    f.write_text("INFO Started server process\nINFO Application startup complete.\n")
    with pytest.raises(ValueError, match=r"server\.log: no vLLM memory lines"):
        read_startup_log(f)
    with pytest.raises(ValueError, match=r"start-up log .*missing\.log does not exist"):
        read_startup_log(tmp_path / "missing.log")


def test_estimate_uses_the_logged_kv_budget(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "vllm.log"
    log.write_text(QWEN32_TP2)
    assert main([*QWEN32_ARGS, "--startup-log", str(log), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["memory"]["kv_budget_bytes_per_gpu"] == pytest.approx(8.22 * 2**30)
    assert d["startup_log"]["kv_tokens"] == 67_296
    # 8.22 GiB / 131,072 B per token per GPU (64 layers x 2 x 4 KV heads x 128 x 2 B) = 67,338
    # tokens; at 2500 tokens a request (157 blocks of 16) memory holds 67,338 // 2512 = 26
    assert d["limits"]["memory"] == 26
    assert main([*QWEN32_ARGS, "--startup-log", str(log)]) == 0
    out = capsys.readouterr().out
    assert "against " + str(log) in out and "30.61 / 30.51" in out


def test_estimate_kv_cache_memory_option(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*QWEN32_ARGS, "--kv-cache-memory", "8.22", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["memory"]["kv_budget_bytes_per_gpu"] == pytest.approx(8.22 * 2**30)


def test_a_start_up_that_did_not_fit_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # vllm-project/vllm#23278: gpt-oss-120b on one H100, "Available KV cache memory: -2.14 GiB"
    log = tmp_path / "oss.log"
    log.write_text("Model loading took 65.9651 GiB and 12.799889 seconds\nAvailable KV cache memory: -2.14 GiB\n")
    rc = main([*QWEN32_ARGS, "--startup-log", str(log)])
    err = capsys.readouterr().err
    assert rc == 2 and "oss.log" in err and "-2.14 GiB" in err and "Traceback" not in err


def test_the_log_shows_the_sampler_and_the_moe_kernel(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # vLLM 0.27.1's V2 model runner logs from model_runner.py (QWEN32_TP2, case 28); V1 from
    # gpu_model_runner.py, which alone says nothing of its sampler
    assert parse_startup_log(QWEN32_TP2).sampler == "logits"
    v1 = "[gpu_model_runner.py:2007] Model loading took 65.9651 GiB and 12.799889 seconds"
    assert parse_startup_log(v1).sampler is None
    # vllm-project/vllm#23278 (0.10.1, gpt-oss-120b on one H100): the Marlin warning; cases 31-32
    # (0.10.2): the sampler's fallback to PyTorch's sort
    log = tmp_path / "oss.log"
    log.write_text(
        "[topk_topp_sampler.py:69] FlashInfer is not available. Falling back to the PyTorch-native "
        "implementation of top-p & top-k sampling. For the best performance, please install FlashInfer.\n"
        "[marlin_utils_fp4.py:196] Your GPU does not have native support for FP4 computation but FP4 "
        "quantization is being used. Weight-only FP4 compression will be used leveraging the Marlin kernel.\n"
        f"{v1}\n[gpu_worker.py:276] Available KV cache memory: 2.0 GiB\n"
    )
    got = read_startup_log(log)
    assert (got.sampler, got.moe_backend) == ("sort", "marlin")
    args = ["estimate", "--model", "openai/gpt-oss-120b", "--gpu", "H100-SXM-80GB", "--input-len", "1000"]
    assert main([*args, "--output-len", "200", "--startup-log", str(log)]) == 0
    out = capsys.readouterr().out
    # weights with Marlin's padding (logged 65.97); the sort over 1,024 x 201,088 logits at 38 B: 7.29
    assert "65.97 / 65.82" in out and "not logged / 7.29" in out
    # a setting given on the command line wins over the log's
    assert main([*args, "--output-len", "200", "--startup-log", str(log), "--sampler", "logits"]) == 0
    assert "not logged / 7.29" not in capsys.readouterr().out
