"""gpucap.calibration.results: every real example file parses with the values written in it; malformed input
is an error naming the file and the field; hardware comes from metadata, then manifest, then
defaults. Files marked synthetic below are built here from the field notes in
../shared/formats/notes/ (no real example of them was found)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest

from gpucap.calibration.resultfields import COLUMNS
from gpucap.calibration.results import ResultSet, read_result_file, read_results, runs_needing

ROOT = Path(__file__).resolve().parent.parent
LOADTESTS = ROOT / "data" / "loadtests"
FORMATS = ROOT.parent / "shared" / "formats"
NERDALERT = LOADTESTS / "nerdalert-llama-3.2-3b-l40s" / "vllm-10qps-Llama-3.2-3B-Instruct.json"
SGLANG = LOADTESTS / "datacrunch-h200-sglang"
CONSOLE = LOADTESTS / "gpustack-qwen3-8b-h100" / "vllm-bench-serve-console.txt"

# SYNTHETIC: expected_content of test_streaming_llm_csv_output in genai-perf's
# tests/test_csv_exporter.py (the layout is exact, the numbers are made up), plus a goodput row
# and a value >= 1000 to exercise the quoted thousands separator.
GENAI_PERF_CSV = """Metric,avg,min,max,p99,p95,p90,p75,p50,p25
Time To First Token (ms),8.00,7.00,9.00,8.98,8.90,8.80,8.50,8.00,7.50
Time To Second Token (ms),2.00,1.00,3.00,2.98,2.90,2.80,2.50,2.00,1.50
Request Latency (ms),"1,234.50",4.00,6.00,5.98,5.90,5.80,5.50,5.00,4.50
Inter Token Latency (ms),11.00,10.00,12.00,11.98,11.90,11.80,11.50,11.00,10.50
Output Sequence Length,2.00,1.00,3.00,2.98,2.90,2.80,2.50,2.00,1.50
Input Sequence Length,6.00,5.00,7.00,6.98,6.90,6.80,6.50,6.00,5.50

Metric,Value
Output Token Throughput (per sec),456.00
Request Throughput (per sec),123.00
Request Count (count),3.00
Request Goodput (per sec),100.00
"""


def vllm_serve_result(**overrides: object) -> dict[str, object]:
    """SYNTHETIC `vllm bench serve --save-result` JSON, keys in the order of serve.py (notes/
    vllm_serve_newest.md), with `--metadata gpu=H100-SXM-80GB tp=2` and --metric-percentiles 90,99."""
    result: dict[str, object] = {
        "date": "20250901-120000", "endpoint_type": "openai", "backend": "vllm", "label": None,
        "model_id": "Qwen/Qwen3-8B", "tokenizer_id": "Qwen/Qwen3-8B", "num_prompts": 105,
        "gpu": "H100-SXM-80GB", "tp": "2", "request_rate": "inf", "burstiness": 1.0, "max_concurrency": 16,
        "duration": 50.0, "completed": 100, "failed": 5, "total_input_tokens": 102400, "total_output_tokens": 12800,
        "request_throughput": 2.0, "request_goodput": 1.5, "output_throughput": 256.0, "total_token_throughput": 2304.0,
        "max_output_tokens_per_s": 300.0, "max_concurrent_requests": 16, "rtfx": 0.0,
        "mean_ttft_ms": 250.0, "median_ttft_ms": 200.0, "std_ttft_ms": 50.0, "p90_ttft_ms": 400.0, "p99_ttft_ms": 900.0,
        "mean_tpot_ms": 20.0, "median_tpot_ms": 19.0, "std_tpot_ms": 2.0, "p90_tpot_ms": 24.0, "p99_tpot_ms": 30.0,
        "mean_itl_ms": 19.5, "median_itl_ms": 18.0, "std_itl_ms": 3.0, "p90_itl_ms": 25.0, "p99_itl_ms": 60.0,
    }  # fmt: skip
    result.update(overrides)
    # the tool writes request_throughput = completed / duration: keep a changed duration consistent
    duration, completed = result.get("duration"), result.get("completed")
    if "request_throughput" not in overrides and isinstance(duration, (int, float)) and duration > 0:
        if isinstance(completed, (int, float)) and not isinstance(completed, bool):
            result["request_throughput"] = completed / duration
    return result


def guidellm_report() -> dict[str, object]:
    """SYNTHETIC minimal GuideLLM v0.3 benchmarks.json (notes/guidellm.md; field names from
    src/guidellm/benchmark/benchmark.py): one concurrent benchmark of 8 streams."""

    def dist(mean: float, median: float, p90: float, p99: float) -> dict[str, object]:
        summary = {"mean": mean, "median": median, "count": 40, "percentiles": {"p90": p90, "p99": p99}}
        return {"successful": summary, "errored": {"mean": 0.0}, "incomplete": None, "total": summary}

    metrics = {
        "requests_per_second": dist(2.5, 2.5, 2.5, 2.5),
        "request_concurrency": dist(7.9, 8, 8, 8),
        "request_latency": dist(3.2, 3.1, 3.9, 4.5),  # seconds
        "prompt_token_count": dist(256, 256, 256, 256),
        "output_token_count": dist(128, 128, 128, 128),
        "time_to_first_token_ms": dist(120.0, 110.0, 180.0, 250.0),
        "time_per_output_token_ms": dist(23.0, 23.0, 25.0, 28.0),
        "inter_token_latency_ms": dist(24.0, 23.5, 26.0, 29.0),
        "output_tokens_per_second": dist(320.0, 320.0, 320.0, 320.0),
        "tokens_per_second": dist(960.0, 960.0, 960.0, 960.0),
    }
    benchmark = {
        "type_": "generative_benchmark",
        "run_id": "r1",
        "args": {"strategy": {"type_": "concurrent", "streams": 8}, "max_duration": 16},
        "run_stats": {"requests_made": {"successful": 40, "incomplete": 2, "errored": 1, "total": 43}},
        "worker": {"backend_model": "meta-llama/Llama-3.1-8B-Instruct"},
        "start_time": 1000.0,
        "end_time": 1016.0,
        "duration": 16.0,
        "metrics": metrics,
        "request_totals": {"successful": 40, "incomplete": 2, "errored": 1, "total": 43},
    }
    return {"benchmarks": [benchmark]}


def write(path: Path, content: str | dict | list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


# --- real files ---------------------------------------------------------------------------------


def test_shipped_loadtests_load_complete() -> None:
    rs = read_results(LOADTESTS)
    assert isinstance(rs, ResultSet)
    assert list(rs.runs.columns) == list(COLUMNS)
    # 1 vLLM JSON + 7 + 7 + 6 SGLang JSON lines + 1 console block + 5 vLLM JSON of the CPU server
    assert len(rs.runs) == 27
    assert rs.bad == []
    # the CPU server's folder carries its model's config.json and the CPU as a GPU-file row
    assert sorted(Path(f).name for f, _ in rs.skipped) == ["config.json", "gpus.csv"]
    assert rs.incomplete == []  # the manifests give gpu, tp and model wherever the files lack them


@pytest.mark.skipif(not FORMATS.is_dir(), reason="../shared/formats not present")
def test_every_shared_example_parses() -> None:
    files = sorted(f for f in FORMATS.iterdir() if f.is_file() and f.suffix != ".md")
    assert len(files) >= 6
    for f in files:
        if f.name == GENAI_FIXTURE:  # synthetic values that cannot all be true: test_genai_perf_shared_fixture
            continue
        assert read_result_file(f), f
    rs = read_results(FORMATS)
    # 22 runs in the top-level files, and vllm-metrics-0.32-cpu/bench.json's one run; that
    # folder's /metrics scrapes and header dump are left out by name, not listed as bad.
    metrics = FORMATS / "vllm-metrics-0.32-cpu"
    assert [Path(f).name for f, _ in rs.bad] == [GENAI_FIXTURE] and len(rs.runs) == 22 + metrics.is_dir()
    if metrics.is_dir():
        left_out = {Path(f).name: why for f, why in rs.skipped if Path(f).parent == metrics}
        assert set(left_out) == {"headers.txt", "metrics_after.txt", "metrics_idle.txt", "metrics_t030.txt"}
        assert "gpucap telemetry" in left_out["metrics_idle.txt"]


@pytest.mark.skipif(not FORMATS.is_dir(), reason="../shared/formats not present")
def test_shipped_copies_are_the_shared_files() -> None:
    pairs = {
        NERDALERT: "vllm_benchmark_serving_save_result__nerdalert_vllm-bench-automation_10qps.json",
        SGLANG / "llama_405b_online_output.jsonl": "sglang_bench_serving__datacrunch_llama_405b_online_output.jsonl",
        CONSOLE: "vllm_bench_serve_console_output__gpustack_qwen3-8b_h100-latency_L85.txt",
    }
    for copy, name in pairs.items():
        assert copy.read_bytes() == (FORMATS / name).read_bytes()


def test_vllm_benchmark_serving_file_values() -> None:
    [run] = read_result_file(NERDALERT)
    # File: "completed": 300, "num_prompts": 300, "request_rate": 10.0, "max_concurrency": null
    assert run["completed"] == 300 and run["num_prompts"] == 300
    assert run["request_rate"] == 10.0 and run["concurrency"] is None
    # "mean_ttft_ms": 54.577085783294024, "p99_itl_ms": 34.210415409961556, "duration": 36.034275877000255
    assert run["ttft_mean_s"] == pytest.approx(0.054577085783294024)
    assert run["itl_p99_s"] == pytest.approx(0.034210415409961556)
    assert run["duration_s"] == pytest.approx(36.034275877000255)
    # "total_input_tokens": 299700, "total_output_tokens": 81050 over 300 completed
    assert run["input_len_mean"] == pytest.approx(999.0)
    assert run["output_len_mean"] == pytest.approx(81050 / 300)
    # "request_goodput:": null (old key with the colon); no "failed" key in this vLLM version
    assert run["goodput_per_s"] is None and run["failed"] is None
    # --metadata gpu=4xNVIDIA_L40S model=meta-llama/Llama-3.2-3B-Instruct
    assert (run["gpu"], run["num_gpus"]) == ("NVIDIA_L40S", 4)
    assert run["model"] == "meta-llama/Llama-3.2-3B-Instruct"


def test_sglang_infinity_and_values() -> None:
    offline = read_result_file(SGLANG / "llama_3_3_70b_offline_output.jsonl")
    assert len(offline) == 7
    # Line 1: "request_rate": Infinity, "completed": 3000, "duration": 341.72106836596504,
    # "median_ttft_ms": 91282.20983641222, "mean_e2e_latency_ms": 224918.79882259612,
    # "total_input_tokens": 1525074, "output_throughput": 4520.698730654741
    first = offline[0]
    assert math.isinf(first["request_rate"])
    assert first["completed"] == 3000
    assert first["ttft_median_s"] == pytest.approx(91.28220983641222)
    assert first["e2el_mean_s"] == pytest.approx(224.91879882259612)
    assert first["input_len_mean"] == pytest.approx(1525074 / 3000)
    assert first["output_tokens_per_s"] == pytest.approx(4520.698730654741)
    assert first["request_throughput_per_s"] == pytest.approx(3000 / 341.72106836596504)  # not in the file
    assert first["ttft_mean_s"] is None and first["tpot_mean_s"] is None  # not in Dec-2024 files
    rs = read_results(SGLANG / "llama_405b_online_output.jsonl")  # the folder's manifest applies
    runs = rs.runs
    assert len(runs) == 6 and set(runs["tp"]) == {8.0} and set(runs["gpu"]) == {"H200-SXM-141GB"}
    assert list(runs["request_rate"]) == [1.0, 2.0, 4.0, 8.0, 4.0, 8.0]
    assert set(runs["engine"]) == {"sglang"} and set(runs["model"]) == {"meta-llama/Llama-3.1-405B-Instruct"}


def test_vllm_console_summary_values() -> None:
    [run] = read_result_file(CONSOLE)
    # "Successful requests: 100", "Maximum request concurrency: 4", "Benchmark duration (s): 44.40"
    assert run["completed"] == 100 and run["concurrency"] == 4 and run["duration_s"] == 44.40
    # "Total input tokens: 23260", "Total generated tokens: 22061"
    assert run["input_len_mean"] == pytest.approx(232.60) and run["output_len_mean"] == pytest.approx(220.61)
    # "Mean TTFT (ms): 64.00", "Median TPOT (ms): 7.40", "P99 ITL (ms): 40.98", "Total Token throughput (tok/s): 1020.76"
    assert run["ttft_mean_s"] == pytest.approx(0.064)
    assert run["tpot_median_s"] == pytest.approx(0.0074)
    assert run["itl_p99_s"] == pytest.approx(0.04098)
    assert run["total_tokens_per_s"] == pytest.approx(1020.76)


# --- synthetic files of the other formats ---------------------------------------------------------


def test_vllm_serve_json_lines_and_sweep_csv(tmp_path: Path) -> None:
    a, b = vllm_serve_result(), vllm_serve_result(max_concurrency=32, duration=40.0, mean_ttft_ms=300.0)
    # --append-result writes a newline and then the object, for every run
    appended = write(tmp_path / "append.json", "".join("\n" + json.dumps(r) for r in (a, b)))
    runs = read_result_file(appended)
    assert [r["concurrency"] for r in runs] == [16, 32]
    assert runs[0]["failed"] == 5 and runs[0]["goodput_per_s"] == 1.5  # failures stay visible
    assert math.isinf(runs[0]["request_rate"])  # "request_rate": "inf"
    assert runs[0]["ttft_p90_s"] == pytest.approx(0.4) and runs[1]["ttft_mean_s"] == pytest.approx(0.3)
    assert (runs[0]["gpu"], runs[0]["tp"]) == ("H100-SXM-80GB", 2)  # from --metadata
    # vllm bench sweep: summary.csv = DataFrame.from_records(run dicts).to_csv(), plus run_number
    # and the serve/bench overrides
    records = [dict(r, run_number=0, tensor_parallel_size=4) for r in (a, b)]
    summary = tmp_path / "sweep" / "summary.csv"
    summary.parent.mkdir()
    pd.DataFrame.from_records(records).to_csv(summary)
    runs = read_result_file(summary)
    assert len(runs) == 2 and runs[1]["duration_s"] == 40.0 and runs[0]["completed"] == 100
    assert runs[0]["tpot_p99_s"] == pytest.approx(0.030)
    # the same runs also read from their run=0.json are not counted twice
    write(tmp_path / "sweep" / "SERVE-a-BENCH-b" / "run=0.json", records[0])
    rs = read_results(tmp_path / "sweep")
    assert len(rs.runs) == 2 and len(rs.skipped) == 1 and "the same run" in rs.skipped[0][1]


def test_genai_perf_csv(tmp_path: Path) -> None:
    path = write(tmp_path / "llama-openai-chat-concurrency8" / "profile_export_genai_perf.csv", GENAI_PERF_CSV)
    [run] = read_result_file(path)
    assert run["ttft_mean_s"] == pytest.approx(0.008) and run["ttft_p90_s"] == pytest.approx(0.0088)
    assert run["tpot_mean_s"] == pytest.approx(0.011)  # genai-perf ITL = vLLM TPOT
    assert run["e2el_mean_s"] == pytest.approx(1.2345)  # "1,234.50" ms
    assert (run["input_len_mean"], run["output_len_mean"]) == (6.0, 2.0)
    assert (run["completed"], run["request_throughput_per_s"], run["output_tokens_per_s"]) == (3, 123, 456)
    assert run["goodput_per_s"] == 100 and run["concurrency"] == 8


GENAI_FIXTURE = "genai_perf_profile_export_genai_perf__TEST_FIXTURE.csv"


@pytest.mark.skipif(not FORMATS.is_dir(), reason="../shared/formats not present")
def test_genai_perf_shared_fixture() -> None:
    """The shared GenAI-Perf file is the tool's own synthetic test fixture (its notes say so):
    "Time To First Token (ms),8.00" beside "Request Latency (ms),5.00", a first token 3 ms after
    the whole request. Its layout reads; the run is refused as impossible, naming both figures."""
    with pytest.raises(ValueError, match=r"mean TTFT \(0\.008 s\) is longer than mean E2E latency \(0\.005 s\)"):
        read_result_file(FORMATS / GENAI_FIXTURE)


def test_guidellm_benchmarks_json(tmp_path: Path) -> None:
    [run] = read_result_file(write(tmp_path / "benchmarks.json", guidellm_report()))
    assert run["concurrency"] == 8 and run["completed"] == 40 and run["failed"] == 1
    assert run["duration_s"] == 16 and run["request_throughput_per_s"] == 2.5
    assert run["ttft_median_s"] == pytest.approx(0.110) and run["tpot_p99_s"] == pytest.approx(0.029)
    assert run["e2el_mean_s"] == pytest.approx(3.2) and run["input_len_mean"] == 256
    assert run["model"] == "meta-llama/Llama-3.1-8B-Instruct"


def test_console_with_several_blocks(tmp_path: Path) -> None:
    text = CONSOLE.read_text()
    both = "Traffic request rate: 2.0\n" + text + "\nTraffic request rate: inf\n" + text.replace("64.00", "70.00")
    runs = read_result_file(write(tmp_path / "log.txt", both))
    assert [r["request_rate"] for r in runs] == [2.0, math.inf]
    assert runs[1]["ttft_mean_s"] == pytest.approx(0.070)


# --- malformed input ------------------------------------------------------------------------------


def _bad_cases() -> list[tuple[str, str, str]]:
    good = json.dumps(vllm_serve_result())
    return [
        ("truncated.json", good[: len(good) // 2], "JSON"),
        ("string.json", json.dumps(vllm_serve_result(mean_ttft_ms="fast")), "mean_ttft_ms"),
        ("missing.json", json.dumps({k: v for k, v in vllm_serve_result().items() if k != "completed"}), "completed"),
        ("nan.json", good.replace('"mean_ttft_ms": 250.0', '"mean_ttft_ms": NaN'), "mean_ttft_ms"),
        ("negative.json", json.dumps(vllm_serve_result(p99_tpot_ms=-3.0)), "p99_tpot_ms"),
        ("negative_duration.json", json.dumps(vllm_serve_result(duration=-1.0)), "duration"),
        ("zero.json", json.dumps(vllm_serve_result(completed=0)), "completed"),
        ("no_latency.json", json.dumps({"completed": 3, "duration": 1.0, "output_throughput": 9.0}), "latency"),
        ("no_throughput.json", json.dumps({"completed": 3, "duration": 1.0, "mean_ttft_ms": 9.0}), "throughput"),
        ("bad.csv", GENAI_PERF_CSV.replace("8.98", "fast"), "Time To First Token (ms) p99"),
        ("bad.txt", CONSOLE.read_text().replace("44.40", "-44.40"), "Benchmark duration (s)"),
        ("tp.json", json.dumps(vllm_serve_result(tp="two")), "tp"),
        # figures that cannot all be true (each alone reads)
        ("p99_below_median.json", json.dumps(vllm_serve_result(p99_ttft_ms=150.0)), "ttft p99"),
        ("p90_above_p99.json", json.dumps(vllm_serve_result(p90_tpot_ms=40.0)), "tpot p99"),
        ("more_done_than_sent.json", json.dumps(vllm_serve_result(completed=200)), "num_prompts"),
        ("throughput_1000x.json", json.dumps(vllm_serve_result(request_throughput=2000.0)), "request_throughput"),
        ("nanosecond.json", json.dumps(vllm_serve_result(duration=1e-9)), "duration"),
        ("ttft_after_e2e.json", json.dumps(vllm_serve_result(mean_e2el_ms=100.0)), "E2E"),
        ("concurrency_zero.json", json.dumps(vllm_serve_result(max_concurrency=0)), "max_concurrency"),
        ("concurrency_half.json", json.dumps(vllm_serve_result(max_concurrency=1.5)), "max_concurrency"),
    ]


@pytest.mark.parametrize(("name", "content", "field"), _bad_cases(), ids=[c[0] for c in _bad_cases()])
def test_malformed_file_names_file_and_field(tmp_path: Path, name: str, content: str, field: str) -> None:
    path = write(tmp_path / name, content)
    with pytest.raises(ValueError, match=re.escape(field)) as err:
        read_result_file(path)
    assert str(err.value).startswith(f"{path}")


def test_folder_with_a_bad_file_loads_the_rest(tmp_path: Path) -> None:
    write(tmp_path / "good.json", vllm_serve_result())
    write(tmp_path / "sub" / "cut.json", json.dumps(vllm_serve_result())[:300])
    write(tmp_path / "good.pytorch.json", [{"benchmark": {}}])
    rs = read_results(tmp_path)
    assert len(rs.runs) == 1 and rs.runs.loc[0, "source_file"] == str(tmp_path / "good.json")
    assert [f for f, _ in rs.bad] == [str(tmp_path / "sub" / "cut.json")]
    assert "truncated" in rs.bad[0][1]
    assert [f for f, _ in rs.skipped] == [str(tmp_path / "good.pytorch.json")]


def test_nothing_readable_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=str(tmp_path)):
        read_results(tmp_path)
    write(tmp_path / "cut.json", "{")
    with pytest.raises(ValueError, match="no readable"):
        read_results(tmp_path)
    with pytest.raises(ValueError, match="no such"):
        read_results(tmp_path / "absent")


# --- hardware: metadata, then manifest, then defaults --------------------------------------------


def test_relative_model_config_is_read_beside_the_file_that_names_it(tmp_path: Path) -> None:
    by_meta, by_manifest = tmp_path / "a", tmp_path / "b"
    for folder, meta in ((by_meta, {"model": "config.json"}), (by_manifest, {"model_id": None, "duration": 40.0})):
        folder.mkdir()
        (folder / "config.json").write_text("{}")
        (folder / "run.json").write_text(json.dumps(vllm_serve_result(**meta)))
    (by_manifest / "manifest.json").write_text(json.dumps({"*.json": {"model": "config.json", "gpu": "L40S"}}))
    runs = read_results([by_meta, by_manifest]).runs
    assert list(runs["model"]) == [str(by_meta / "config.json"), str(by_manifest / "config.json")]


def test_metadata_beats_manifest_beats_defaults(tmp_path: Path) -> None:
    write(tmp_path / "runs" / "a.json", vllm_serve_result())  # metadata gpu=H100-SXM-80GB, tp=2
    write(tmp_path / "manifest.json", {"runs/*.json": {"gpu": "A100-SXM-80GB", "tp": 4, "pp": 2, "engine": "sglang"}})
    defaults = {"gpu": "B200-180GB", "tp": 8, "pp": 4, "ep": 2, "num_gpus": 8, "engine": "trtllm"}
    run = read_results(tmp_path, defaults=defaults).runs.iloc[0]
    assert (run["gpu"], run["tp"]) == ("H100-SXM-80GB", 2)  # metadata
    assert (run["pp"], run["engine"]) == (2, "sglang")  # manifest
    assert (run["ep"], run["num_gpus"]) == (2, 8)  # defaults
    # an explicit manifest (CSV form) wins over the folder's, but not over the metadata
    explicit = write(tmp_path / "elsewhere" / "m.csv", "pattern,gpu,pp,engine\na.json,L40S-48GB,3,vllm\n")
    run = read_results(tmp_path / "runs", manifest=explicit).runs.iloc[0]
    assert (run["gpu"], run["pp"], run["engine"]) == ("H100-SXM-80GB", 3, "vllm")
    with pytest.raises(ValueError, match="gpus"):
        read_results(tmp_path, defaults={"gpus": 8})


def test_incomplete_runs_are_listed(tmp_path: Path) -> None:
    meta_free = {k: v for k, v in vllm_serve_result().items() if k not in ("gpu", "tp")}
    write(tmp_path / "a.json", dict(meta_free, max_concurrency=None, request_rate="inf"))
    write(tmp_path / "b.json", dict(meta_free, max_concurrency=None, request_rate=None, duration=51.0))
    rs = read_results(tmp_path, defaults={"gpu": "H100-SXM-80GB"})
    assert (f"{tmp_path / 'a.json'} run 0", "missing field tp needed for the fit") in rs.incomplete
    assert (f"{tmp_path / 'b.json'} run 0", "missing field concurrency or request_rate needed for the fit") in (
        rs.incomplete
    )
    assert len(rs.incomplete) == 3
    assert runs_needing(rs, ["model"]) == []


def test_sweep_summary_json_list_and_broken_manifest(tmp_path: Path) -> None:
    # vllm bench sweep summary.json is a JSON list of the run dicts
    write(tmp_path / "summary.json", [vllm_serve_result(), vllm_serve_result(duration=60.0)])
    write(tmp_path / "notes.txt", "nothing to see")
    write(tmp_path / "manifest.json", {"*.json": {"gpu": "H100-SXM-80GB", "tp": "two"}})
    rs = read_results(tmp_path)
    assert list(rs.runs["duration_s"]) == [50.0, 60.0]
    reasons = dict(rs.bad)
    assert "tp = 'two'" in reasons[str(tmp_path / "manifest.json")]
    assert "not a load-test result" in reasons[str(tmp_path / "notes.txt")]


def test_engine_knobs_from_metadata_reach_the_prediction(tmp_path: Path) -> None:
    from gpucap.calibration.loadtests import cases_from_runs
    from gpucap.calibration.validate import case_hardware

    knobs = {"num_gpus": "2", "max_num_seqs": "64", "max_num_batched_tokens": "4096", "enforce_eager": "true"}
    knobs |= {"gpu_memory_utilization": "0.85", "weight_dtype": "fp8", "kv_cache_dtype": "fp8"}
    write(tmp_path / "a.json", vllm_serve_result(**knobs))
    run = read_results(tmp_path).runs.iloc[0]
    assert (run["max_num_seqs"], run["enforce_eager"], run["gpu_memory_utilization"]) == (64, True, 0.85)
    case = cases_from_runs(read_results(tmp_path).runs).iloc[0]
    assert (case["weight_dtype"], case["kv_cache_dtype"]) == ("fp8", "fp8")  # the run's, not the default bf16
    hw, _, _ = case_hardware(case)
    eng = hw.engine
    assert (eng.max_num_seqs, eng.max_num_batched_tokens, eng.gpu_memory_utilization) == (64, 4096, 0.85)
    assert eng.cuda_graphs is False and hw.weight_dtype == "fp8"


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [("gpu_memory_utilization", "1.5", "not a fraction"), ("enforce_eager", "maybe", "not true or false")],
)
def test_bad_engine_knob_is_named(tmp_path: Path, key: str, value: str, says: str) -> None:
    path = write(tmp_path / "a.json", vllm_serve_result(**{key: value}))
    with pytest.raises(ValueError, match=rf"a\.json.*{key} = '{value}' is {says}"):
        read_result_file(path)


# --- hostile and damaged files ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (json.dumps(vllm_serve_result()).replace('"mean_ttft_ms": 250.0', '"mean_ttft_ms": Infinity'), "infinite"),
        (json.dumps(vllm_serve_result()).replace('"mean_ttft_ms": 250.0', '"mean_ttft_ms": 1e400'), "infinite"),
        (json.dumps(vllm_serve_result()).replace('"completed": 100', '"completed": ' + "9" * 400), "400 digits"),
        (json.dumps(vllm_serve_result()).replace('"duration": 50.0', '"duration": 1e13'), "beyond any measurement"),
        (json.dumps(vllm_serve_result()).replace('"completed": 100', '"completed": ' + "9" * 5000), "unreadable JSON"),
        ("[" * 100_000, "nested too deeply"),
        (json.dumps(vllm_serve_result(gpu_memory_utilization=1)).replace(": 1}", ": " + "9" * 400 + "}"), "fraction"),
        (json.dumps(vllm_serve_result(random_range_ratio=0)).replace(": 0}", ": " + "9" * 400 + "}"), "range ratio"),
    ],
)
def test_non_finite_absurd_and_hostile_values_are_named(tmp_path: Path, text: str, says: str) -> None:
    path = write(tmp_path / "r.json", text)
    with pytest.raises(ValueError, match=says) as err:
        read_result_file(path)
    assert str(path) in str(err.value) and len(str(err.value)) < 300


def test_request_rate_infinity_is_all_at_once(tmp_path: Path) -> None:
    text = json.dumps(vllm_serve_result(request_rate=1.0)).replace('"request_rate": 1.0', '"request_rate": Infinity')
    [run] = read_result_file(write(tmp_path / "r.json", text))
    assert run["request_rate"] == math.inf


def test_one_bad_run_of_a_json_lines_file_does_not_hide_the_others(tmp_path: Path) -> None:
    lines = [json.dumps(vllm_serve_result(max_concurrency=c, duration=50.0 + c)) for c in (1, 4, 16)]
    lines[1] = lines[1].replace('"mean_tpot_ms": 20.0', '"mean_tpot_ms": Infinity')
    write(tmp_path / "runs" / "sweep.jsonl", "\n".join(lines) + "\n")
    write(tmp_path / "runs" / "other.json", vllm_serve_result(max_concurrency=64, duration=99.0))
    rs = read_results(tmp_path / "runs")
    assert sorted(rs.runs["concurrency"]) == [1, 16, 64]
    assert [name for name, _ in rs.bad] == [f"{tmp_path / 'runs' / 'sweep.jsonl'}, line 2"]
    assert "mean_tpot_ms is infinite" in rs.bad[0][1]


def test_cut_off_console_block_is_a_bad_file(tmp_path: Path) -> None:
    text = CONSOLE.read_text()
    cut = text[: text.rindex("=")].rstrip("=\n ")  # the closing ===== line gone
    path = write(tmp_path / "console.txt", cut)
    with pytest.raises(ValueError, match="block 0: no closing '=====' line"):
        read_result_file(path)


def test_not_a_regular_file_is_refused_before_reading(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a regular file"):
        read_result_file(Path("/dev/zero"))
    with pytest.raises(ValueError, match="not a regular file"):
        read_result_file(tmp_path)


def test_reading_is_linear_in_the_number_of_runs(tmp_path: Path) -> None:
    # 20,000 JSON lines; counting lines from the start for every object (the old reader) made
    # this quadratic. The figure for 200 MB is benchmarks/read_speed.py's, not a timed test.
    one = json.dumps(vllm_serve_result())
    path = write(
        tmp_path / "many.jsonl",
        "\n".join(one.replace('"max_concurrency": 16', f'"max_concurrency": {16 + k}') for k in range(20_000)),
    )
    bad: list[tuple[str, str]] = []
    runs = read_result_file(path, bad)
    assert len(runs) == 20_000 and bad == []


def test_truncated_json_line_keeps_the_complete_ones(tmp_path: Path) -> None:
    """An interrupted ``--append-result`` leaves a last line cut short: the two complete runs load
    and the broken line is reported by its line number; read strictly, the file is refused naming
    that line; a pretty-printed document cut short is refused as a whole."""
    a, b = vllm_serve_result(), vllm_serve_result(request_rate=4.0)
    path = write(tmp_path / "runs.jsonl", json.dumps(a) + "\n" + json.dumps(b) + "\n" + json.dumps(a)[:57])
    bad: list[tuple[str, str]] = []
    rows = read_result_file(path, bad)
    assert len(rows) == 2 and [r["request_rate"] for r in rows][1] == 4.0
    assert len(bad) == 1 and bad[0][0].endswith("line 3") and "truncated" in bad[0][1]
    with pytest.raises(ValueError, match="line 3"):
        read_result_file(path)
    pretty = write(tmp_path / "cut.json", json.dumps(a, indent=1)[:200])
    with pytest.raises(ValueError, match="truncated or invalid JSON"):
        read_result_file(pretty, [])


def test_byte_order_mark_and_gzip_results_read(tmp_path: Path) -> None:
    """A result saved with a UTF-8 byte-order mark (Windows editors) reads as without one; a
    gzipped one (.json.gz, .jsonl.gz) in a results folder is read, not skipped without a word."""
    import gzip

    bom = tmp_path / "bom.json"
    bom.write_bytes(b"\xef\xbb\xbf" + json.dumps(vllm_serve_result()).encode())
    assert read_result_file(bom)[0]["completed"] == 100
    folder = tmp_path / "folder"
    folder.mkdir()
    with gzip.open(folder / "runs.jsonl.gz", "wt") as f:
        f.write(
            json.dumps(vllm_serve_result())
            + "\n"
            + json.dumps(vllm_serve_result(max_concurrency=32, duration=40.0))
            + "\n"
        )
    rs = read_results(folder)
    assert sorted(rs.runs["concurrency"]) == [16, 32] and rs.bad == []
