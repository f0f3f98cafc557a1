"""The commands that verify a plan (``gpucap.planning.commands``): one replica's server, the load-test
sweep, the calibration and the re-plan. Expected numbers are worked out here from the plan's row and
the engine defaults ``EngineConfig.resolve`` documents, not read back from the function; the
metadata is checked by gpucap's own result reader on a file written as ``vllm bench serve`` writes it."""

import json
import math
import shlex
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from gpucap.calibration.loadtests import cases_from_runs
from gpucap.calibration.resultfields import META_KEYS
from gpucap.calibration.results import read_results, runs_needing
from gpucap.catalog.gpus import get_gpu
from gpucap.cli.main import build_parser
from gpucap.config import SLO, EngineConfig, hardware
from gpucap.planning.commands import LOAD_FRACTIONS, plan_commands, verify_commands
from gpucap.planning.result import Target
from gpucap.planning.search import plan
from gpucap.queueing.lengths import Lengths

MODEL = "meta-llama/Llama-3.3-70B-Instruct"
GPU = "H100-SXM-80GB"
RPS = 20.0
IN, OUT = 2000, 300


@pytest.fixture(scope="module")
def result():
    return plan(MODEL, input_len=IN, output_len=OUT, target_request_rate=RPS, gpus=[GPU])


@pytest.fixture(scope="module")
def fp8_row(result) -> pd.Series:
    rows = result.plans[(result.plans["kv_dtype"] == "fp8") & (result.plans["weight_dtype"] == "fp8")]
    return rows.iloc[0]


@pytest.fixture(scope="module")
def commands(fp8_row):
    return verify_commands(MODEL, fp8_row, target=Target("request_rate", RPS), input_len=IN, output_len=OUT)


def flags(command: str) -> dict[str, list[str]]:
    """``--flag value...`` of a command line (the last command of a ``a && b`` chain), each flag's
    values in a list (empty for a switch)."""
    tokens = shlex.split(command.split(" && ")[-1])
    out: dict[str, list[str]] = {}
    key = None
    for tok in tokens:
        if tok.startswith("--"):
            key = tok
            out.setdefault(key, [])
        elif key is not None:
            out[key].append(tok)
    return out


def one(command: str, flag: str) -> str:
    values = flags(command)[flag]
    assert len(values) == 1, (flag, values)
    return values[0]


def hand_row(hw, *, replicas: int = 3, spares: int = 1, capacity: float = 2.0) -> dict[str, Any]:
    """A plan row for ``hw``, as the planner's columns name it."""
    return {
        "gpu": hw.gpu.key,
        "gpus_per_replica": hw.layout.gpus_per_replica,
        "tp": hw.layout.tp,
        "pp": hw.layout.pp,
        "ep": hw.layout.ep,
        "weight_dtype": hw.weight_dtype,
        "kv_dtype": hw.kv_dtype,
        "replicas": replicas,
        "spare_replicas": spares,
        "capacity_requests_per_s": capacity,
        "capacity_concurrency": float("nan"),
    }


def test_vllm_serve_is_the_rows_replica(fp8_row, commands) -> None:
    serve = commands.serve
    assert shlex.split(serve)[:3] == ["vllm", "serve", MODEL]
    assert one(serve, "--tensor-parallel-size") == str(fp8_row["tp"])
    assert one(serve, "--pipeline-parallel-size") == str(fp8_row["pp"])
    assert int(one(serve, "--tensor-parallel-size")) * int(one(serve, "--pipeline-parallel-size")) == int(
        fp8_row["gpus_per_replica"]
    )
    assert one(serve, "--kv-cache-dtype") == "fp8"
    # vLLM on a GPU of >= 70 GiB that is not an A100 and has < 160 GiB (H100: 79.2 GiB): 1024 and 8192
    assert one(serve, "--max-num-seqs") == "1024"
    assert one(serve, "--max-num-batched-tokens") == "8192"
    engine = EngineConfig(engine="vllm").resolve(get_gpu(GPU))
    assert int(one(serve, "--max-num-seqs")) == engine.max_num_seqs
    assert float(one(serve, "--gpu-memory-utilization")) == 0.92 == engine.gpu_memory_utilization
    # fp8 weights from Llama 3.3's bf16 checkpoint: vLLM quantizes when loading
    assert one(serve, "--quantization") == "fp8"
    assert one(serve, "--max-model-len") == str(IN + OUT)
    assert "--enable-expert-parallel" not in flags(serve)  # a dense model
    assert "--block-size" not in flags(serve)  # vLLM's own default block (16) is left to vLLM
    assert any("--quantization fp8" in n for n in commands.notes)


def test_auto_kv_row_serves_auto(result) -> None:
    row = result.plans[result.plans["kv_dtype"] == "auto"].iloc[0]
    c = verify_commands(MODEL, row, target=Target("request_rate", RPS), input_len=IN, output_len=OUT)
    assert one(c.serve, "--kv-cache-dtype") == "auto"
    assert "kv_cache_dtype=auto" in flags(c.bench[0])["--metadata"]


def test_bench_sweep_brackets_the_planned_capacity(fp8_row, commands) -> None:
    capacity = float(fp8_row["capacity_requests_per_s"])
    serving = int(fp8_row["replicas"]) - int(fp8_row["spare_replicas"])
    at_target = RPS / serving  # one replica's share with the spares out
    expected = sorted([0.5 * capacity, 0.8 * capacity, 1.0 * capacity, 1.2 * capacity, at_target])
    rates = [float(one(cmd, "--request-rate")) for cmd in commands.bench]
    assert rates == pytest.approx(expected, rel=1e-3)
    assert rates == sorted(rates)
    assert LOAD_FRACTIONS == (0.5, 0.8, 1.0, 1.2)
    for cmd, rate in zip(commands.bench, rates, strict=True):
        assert shlex.split(cmd)[:3] == ["vllm", "bench", "serve"]
        # 300 s of arrivals, at least 500 prompts
        assert int(one(cmd, "--num-prompts")) == max(500, math.ceil(rate * 300))
        assert one(cmd, "--random-input-len") == str(IN)
        assert one(cmd, "--random-output-len") == str(OUT)
        assert "--random-range-ratio" not in flags(cmd)  # fixed lengths
        assert "--ignore-eos" in flags(cmd) and "--save-result" in flags(cmd)
        assert one(cmd, "--result-dir") == "results"
    seeds = [one(cmd, "--seed") for cmd in commands.bench]
    assert len(set(seeds)) == len(seeds)  # each level its own prompts
    files = [one(cmd, "--result-filename") for cmd in commands.bench]
    assert files == sorted(files) and len(set(files)) == len(files)


def vllm_result(meta: list[str], *, request_rate: float, completed: int = 100) -> dict[str, Any]:
    """A result as ``vllm bench serve --save-result --metadata k=v ...`` writes it (vllm/benchmarks/serve.py:
    setup keys, the metadata pairs as strings at the top level, the traffic, then the metrics; the layout
    of data/loadtests/vllm-cpu-tiny-llama/concurrency-0001.json)."""
    out: dict[str, Any] = {
        "date": "20270101-120000",
        "endpoint_type": "openai",
        "backend": "openai",
        "label": None,
        "model_id": MODEL,
        "tokenizer_id": MODEL,
        "num_prompts": completed,
    }
    for item in meta:
        key, _, value = item.partition("=")
        out[key.strip()] = value.strip()
    out |= {"request_rate": request_rate, "burstiness": 1.0, "max_concurrency": None}
    duration = completed / request_rate
    out |= {
        "duration": duration,
        "completed": completed,
        "failed": 0,
        "total_input_tokens": completed * IN,
        "total_output_tokens": completed * OUT,
        "request_throughput": completed / duration,
        "request_goodput": None,
        "output_throughput": completed * OUT / duration,
        "total_token_throughput": completed * (IN + OUT) / duration,
        "mean_ttft_ms": 400.0,
        "median_ttft_ms": 380.0,
        "p90_ttft_ms": 600.0,
        "p99_ttft_ms": 900.0,
        "mean_tpot_ms": 40.0,
        "median_tpot_ms": 39.0,
        "p90_tpot_ms": 45.0,
        "p99_tpot_ms": 55.0,
        "mean_itl_ms": 40.0,
        "median_itl_ms": 39.0,
        "p90_itl_ms": 44.0,
        "p99_itl_ms": 80.0,
        "mean_e2el_ms": 12400.0,
    }
    return out


def test_metadata_reads_back_without_a_manifest(tmp_path: Path, fp8_row, commands) -> None:
    cmd = commands.bench[0]
    meta = flags(cmd)["--metadata"]
    keys = [m.partition("=")[0] for m in meta]
    assert set(keys) <= set(META_KEYS), set(keys) - set(META_KEYS)
    rate = float(one(cmd, "--request-rate"))
    (tmp_path / one(cmd, "--result-filename")).write_text(json.dumps(vllm_result(meta, request_rate=rate)))
    rs = read_results(tmp_path)
    assert rs.bad == [] and runs_needing(rs) == []  # nothing to give with --gpu/--tp or a manifest
    run = rs.runs.iloc[0]
    assert run["gpu"] == fp8_row["gpu"] == GPU
    assert run["tp"] == fp8_row["tp"] and run["pp"] == fp8_row["pp"] and run["ep"] == fp8_row["ep"]
    assert run["num_gpus"] == fp8_row["gpus_per_replica"]
    assert (run["engine"], run["model"]) == ("vllm", MODEL)
    assert (run["weight_dtype"], run["kv_cache_dtype"]) == ("fp8", "fp8")
    assert (run["max_num_seqs"], run["max_num_batched_tokens"], run["gpu_memory_utilization"]) == (1024, 8192, 0.92)
    assert run["request_rate"] == pytest.approx(rate)
    (case,) = cases_from_runs(rs.runs).to_dict("records")
    assert (case["gpu"], case["tp"], case["engine"], case["load_mode"]) == (GPU, fp8_row["tp"], "vllm", "poisson")
    assert (case["isl"], case["osl"], case["range_ratio"]) == (IN, OUT, 0.0)


def test_varied_lengths_spread_by_the_range_ratio(tmp_path: Path, fp8_row) -> None:
    # input uniform on [1500, 2500] (mean 2000, longest 2500: 25% above the mean), output fixed at 300
    inp = Lengths.range_ratio(IN, 0.25)
    c = verify_commands(MODEL, fp8_row, target=Target("request_rate", RPS), input_len=inp, output_len=OUT)
    cmd = c.bench[0]
    assert (one(cmd, "--random-input-len"), one(cmd, "--random-output-len")) == (str(IN), str(OUT))
    assert one(cmd, "--random-range-ratio") == "0.25"
    # longest input 2500; the one range ratio also spreads the output to ceil(300 x 1.25) = 375
    assert one(c.serve, "--max-model-len") == str(2500 + 375)
    assert "range_ratio=0.25" in flags(cmd)["--metadata"]
    (tmp_path / "run.json").write_text(json.dumps(vllm_result(flags(cmd)["--metadata"], request_rate=2.0)))
    assert read_results(tmp_path).runs.iloc[0]["range_ratio"] == 0.25
    assert any("uniform within +/- 0.25" in n for n in c.notes)


def test_sglang_variant(fp8_row) -> None:
    c = verify_commands(
        MODEL, fp8_row, target=Target("request_rate", RPS), input_len=IN, output_len=OUT, engine="sglang"
    )
    serve = c.serve
    assert shlex.split(serve)[:3] == ["python", "-m", "sglang.launch_server"]
    assert one(serve, "--model-path") == MODEL
    assert (one(serve, "--tp-size"), one(serve, "--pp-size")) == (str(fp8_row["tp"]), str(fp8_row["pp"]))
    # SGLang defaults as gpucap resolves them on a >= 60 GiB GPU: 1024 running, 8192-token chunks, 0.88
    assert one(serve, "--max-running-requests") == "1024"
    assert one(serve, "--chunked-prefill-size") == "8192"
    assert one(serve, "--mem-fraction-static") == "0.88"
    assert one(serve, "--kv-cache-dtype") == "fp8_e4m3"  # SGLang names the fp8 formats
    assert one(serve, "--quantization") == "fp8"
    assert one(serve, "--context-length") == str(IN + OUT)
    assert "--page-size" not in flags(serve)
    assert "engine=sglang" in flags(c.bench[0])["--metadata"]
    assert "--engine sglang" in c.replan


def test_trtllm_variant(tmp_path: Path, fp8_row) -> None:
    c = verify_commands(
        MODEL, fp8_row, target=Target("request_rate", RPS), input_len=IN, output_len=OUT, engine="trtllm"
    )
    write, _, serve = c.serve.partition(" && ")
    assert shlex.split(serve)[:2] == ["trtllm-serve", MODEL] and one(serve, "--backend") == "pytorch"
    assert (one(serve, "--tp_size"), one(serve, "--pp_size")) == (str(fp8_row["tp"]), str(fp8_row["pp"]))
    # TensorRT-LLM defaults as gpucap resolves them: 2048 requests, 8192 tokens, 0.9 of free memory
    assert (one(serve, "--max_batch_size"), one(serve, "--max_num_tokens")) == ("2048", "8192")
    assert one(serve, "--kv_cache_free_gpu_memory_fraction") == "0.9"
    assert one(serve, "--max_seq_len") == str(IN + OUT)
    assert "--quantization" not in flags(serve)  # no flag: the checkpoint decides
    assert any("FP8 checkpoint" in n for n in c.notes)
    # the fp8 KV cache goes in the YAML the command writes first
    subprocess.run(write, shell=True, check=True, cwd=tmp_path)
    yaml = (tmp_path / one(serve, "--extra_llm_api_options")).read_text()
    assert yaml == "kv_cache_config:\n  dtype: fp8\n"
    assert "engine=trtllm" in flags(c.bench[0])["--metadata"]


def test_concurrency_target_sweeps_max_concurrency() -> None:
    r = plan(
        MODEL, input_len=IN, output_len=OUT, target_concurrency=64.0, gpus=[GPU], gpu_counts=[2], kv_dtypes=["fp8"]
    )
    row = r.plans.iloc[0]
    c = verify_commands(MODEL, row, target=r.target, input_len=IN, output_len=OUT)
    capacity = float(row["capacity_concurrency"])
    serving = int(row["replicas"]) - int(row["spare_replicas"])
    expected = {max(round(f * capacity), 1) for f in (0.5, 0.8, 1.0, 1.2)} | {max(round(64.0 / serving), 1)}
    got = [int(one(cmd, "--max-concurrency")) for cmd in c.bench]
    assert sorted(set(got)) == got == sorted(expected)
    for cmd, n in zip(c.bench, got, strict=True):
        assert one(cmd, "--request-rate") == "inf"
        assert int(one(cmd, "--num-prompts")) == max(500, 10 * n)
    assert "--target-concurrency 64" in c.replan


def test_output_token_target_is_a_request_rate(fp8_row) -> None:
    # 6000 output tokens/s of 300-token answers: 20 requests/s across the serving replicas
    c = verify_commands(MODEL, fp8_row, target=Target("output_tps", 6000.0), input_len=IN, output_len=OUT)
    serving = int(fp8_row["replicas"]) - int(fp8_row["spare_replicas"])
    rates = [float(one(cmd, "--request-rate")) for cmd in c.bench]
    assert any(math.isclose(r, 6000.0 / OUT / serving, rel_tol=1e-3) for r in rates)
    assert "--target-output-tps 6000" in c.replan


def test_expert_parallel_flags() -> None:
    moe = "Qwen/Qwen3-30B-A3B"
    hw = hardware(moe, GPU, tp=2, ep=2, weight_dtype="bf16", kv_dtype="auto", engine="vllm")
    row = hand_row(hw)
    kw = dict(target=Target("request_rate", 4.0), input_len=IN, output_len=OUT)
    assert "--enable-expert-parallel" in flags(verify_commands(moe, row, **kw).serve)
    assert one(verify_commands(moe, row, engine="sglang", **kw).serve, "--ep-size") == "2"
    assert one(verify_commands(moe, row, engine="trtllm", **kw).serve, "--ep_size") == "2"
    assert "quantization" not in verify_commands(moe, row, **kw).serve  # bf16 from a bf16 checkpoint
    # vLLM's expert parallelism spans all tp GPUs: ep 2 over tp 4 has no flag
    hw4 = hardware(moe, GPU, tp=4, ep=2, weight_dtype="bf16", engine="vllm")
    with pytest.raises(ValueError, match="enable-expert-parallel"):
        verify_commands(moe, hand_row(hw4), hw=hw4, **kw)


def test_nvfp4_plan_names_the_checkpoint_it_needs() -> None:
    hw = hardware(MODEL, "B200-180GB", tp=1, weight_dtype="nvfp4", kv_dtype="fp8", engine="vllm")
    c = verify_commands(MODEL, hand_row(hw), target=Target("request_rate", 4.0), input_len=IN, output_len=OUT)
    assert "--quantization" not in flags(c.serve)  # no flag invented: the checkpoint carries the format
    assert any("NVFP4 checkpoint" in n and MODEL in n for n in c.notes)
    # vLLM on a >= 160 GiB GPU (B200: 178 GiB): 1024 sequences, 16384 batched tokens
    assert (one(c.serve, "--max-num-seqs"), one(c.serve, "--max-num-batched-tokens")) == ("1024", "16384")


def test_plan_commands_carry_the_plans_target_and_slos(result, fp8_row) -> None:
    c = plan_commands(result, input_len=IN, output_len=OUT, row=0)
    assert c == verify_commands(
        MODEL, result.plans.iloc[0], target=Target("request_rate", RPS), input_len=IN, output_len=OUT,
        slo=SLO(ttft_s=2.0, tpot_s=0.1, statistic="p99"),
    )  # fmt: skip
    assert (one(c.replan, "--target-rps"), one(c.replan, "--stat")) == ("20", "p99")
    assert one(c.replan, "--gpus") == GPU
    assert one(c.calibrate, "--out") == one(c.replan, "--coefficients") == "results-coefficients.json"
    assert one(c.replan, "--failure-spares") == str(result.plans.iloc[0]["spare_replicas"])


def test_plan_commands_default_to_the_recommended_plan_at_its_own_lengths() -> None:
    checked = plan(MODEL, input_len=IN, output_len=OUT, target_request_rate=RPS, gpus=[GPU], check=True)
    rec = checked.recommended
    assert rec is not None
    c = plan_commands(checked)  # lengths, engine and Hardware from the plan itself
    row = int(np.flatnonzero(checked.plans["recommended"].to_numpy())[0])
    assert c == plan_commands(checked, input_len=IN, output_len=OUT, row=row)
    assert one(c.serve, "--tensor-parallel-size") == str(rec["tp"])
    assert f"{rec['replicas']} replica(s)" in c.title
    unchecked = plan(MODEL, input_len=IN, output_len=OUT, target_request_rate=RPS, gpus=[GPU])
    assert plan_commands(unchecked) == plan_commands(unchecked, row=0)  # nothing recommended: the cheapest


def test_gpucap_commands_parse_with_gpucaps_own_cli(commands) -> None:
    for cmd, name in ((commands.calibrate, "calibrate"), (commands.replan, "plan")):
        argv = shlex.split(cmd)
        assert argv[:2] == ["gpucap", name]
        args = build_parser().parse_args(argv[1:])  # an unknown flag would exit 2 here
        assert args.command == name
    args = build_parser().parse_args(shlex.split(commands.replan)[1:])
    assert (args.target_rps, args.input_len, args.output_len) == (RPS, str(IN), str(OUT))
    assert (args.weight_dtypes, args.kv_dtypes) == (("fp8",), ("fp8",))


def test_percentile_lengths_reach_the_replan_as_given(fp8_row) -> None:
    inp = Lengths.parse("p50=800,p90=2000,p99=6000", "--input-len")
    c = verify_commands(MODEL, fp8_row, target=Target("request_rate", RPS), input_len=inp, output_len=OUT)
    assert one(c.replan, "--input-len") == "p50=800,p90=2000,p99=6000"
    assert int(one(c.serve, "--max-model-len")) >= 6000 + OUT


def test_text_is_the_commands_under_comments(commands) -> None:
    text = commands.text()
    body = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert body == [commands.serve, *commands.bench, commands.calibrate, commands.replan]
    assert text.startswith("# Verify ") and str(commands) == text


def test_bad_input_names_the_field(fp8_row) -> None:
    kw = dict(target=Target("request_rate", RPS), input_len=IN, output_len=OUT)
    with pytest.raises(ValueError, match="unknown engine 'tgi'"):
        verify_commands(MODEL, fp8_row, engine="tgi", **kw)
    with pytest.raises(ValueError, match="no column 'tp'.*Plan.plans"):
        verify_commands(MODEL, fp8_row.drop("tp"), **kw)
    with pytest.raises(ValueError, match="capacity_concurrency"):  # a rate plan's row for a concurrency target
        verify_commands(MODEL, fp8_row, target=Target("concurrency", 64.0), input_len=IN, output_len=OUT)
    with pytest.raises(ValueError, match="'replicas'"):
        verify_commands(MODEL, {**fp8_row.to_dict(), "replicas": 2.5}, **kw)
    with pytest.raises(ValueError, match="no replica serves"):
        verify_commands(MODEL, {**fp8_row.to_dict(), "replicas": 1, "spare_replicas": 1}, **kw)
    with pytest.raises(ValueError, match="unknown model.*hw="):
        verify_commands("acme/not-a-model", fp8_row, **kw)
    other = hardware(MODEL, GPU, tp=4, weight_dtype="fp8", kv_dtype="fp8")
    with pytest.raises(ValueError, match="hw has gpus_per_replica 4 but the row 2"):
        verify_commands(MODEL, fp8_row, hw=other, **kw)
    with pytest.raises(ValueError, match="hw is for engine 'vllm'"):
        verify_commands(MODEL, fp8_row, hw=other, engine="sglang", **kw)
    e5m2 = {**fp8_row.to_dict(), "kv_dtype": "fp8_e5m2"}
    with pytest.raises(ValueError, match="kv_dtype 'fp8_e5m2' has no TensorRT-LLM"):
        verify_commands(MODEL, e5m2, engine="trtllm", **kw)
    with pytest.raises(ValueError, match="fractions"):
        verify_commands(MODEL, fp8_row, fractions=(0.5, -1.0), **kw)
