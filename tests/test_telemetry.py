"""The telemetry reader: vLLM's /metrics scrapes (the real captures of vLLM 0.32's server in
../shared/formats, and hand-written ones for the renames, restarts, custom buckets and bad input),
its windows, its step log, and the memory check."""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from gpucap.telemetry.scrapes import read_scrapes
from gpucap.telemetry.steplog import parse_step_lines, read_step_log
from gpucap.telemetry.windows import cut_windows

CAPTURES = Path(__file__).resolve().parents[2] / "shared" / "formats" / "vllm-metrics-0.32-cpu"
# The three captures' order and times: idle before the load, 30 s into it, after it (README there).
CAPTURE_TIMES = {"metrics_idle.txt": 1000.0, "metrics_t030.txt": 1030.0, "metrics_after.txt": 1050.0}


@pytest.fixture
def captures(tmp_path: Path) -> Path:
    """The shipped captures with a '# scraped at' line each, as gpucap's scraper writes them."""
    if not CAPTURES.is_dir():
        pytest.skip("../shared/formats/vllm-metrics-0.32-cpu not present")
    folder = tmp_path / "scrapes"
    folder.mkdir()
    for name, t in CAPTURE_TIMES.items():
        text = (CAPTURES / name).read_text()
        (folder / f"{name}.prom").write_text(f"# scraped at x ({t:.3f}) from http://127.0.0.1/metrics\n{text}")
    return folder


def test_every_family_in_the_captures_is_read(captures: Path) -> None:
    s = read_scrapes(captures)
    assert [sc.time_s for sc in s.scrapes] == sorted(CAPTURE_TIMES.values())
    assert s.engine == "vllm" and s.model_name == "tiny-llama" and s.segments == [0, 0, 0]
    after = s.scrapes[-1]
    # the README's facts: 780 steps of 30,603 tokens; 24,459 computed + 128 cached prompt tokens; 96 requests
    assert after.values["step_tokens_count"] == 780 and after.values["step_tokens_sum"] == 30603
    assert after.values["prompt_tokens"] == 24587 and after.values["cached_prompt_tokens"] == 128
    assert after.values["finished"] == 96 and after.values["generation_tokens"] == 96 * 64
    for hist in ("ttft", "itl", "tpot", "e2e", "queue", "prefill", "decode", "inference", "prompt_len", "output_len"):
        assert after.values[f"{hist}_count"] > 0 and after.buckets[hist], hist
    # 84 of 96 TTFTs in the 2.5-5 s bucket (README)
    assert after.buckets["ttft"][5.0] - after.buckets["ttft"][2.5] == 84
    assert after.info["num_gpu_blocks"] == "1365" and after.info["kv_cache_size_tokens"] == "174720"
    for gauge in ("running", "waiting", "kv_usage"):
        assert gauge in after.values


def test_windows_of_the_captures_are_exact_differences(captures: Path) -> None:
    w = cut_windows(read_scrapes(captures), window_s=60).windows
    assert len(w) == 1
    row = w[0].row
    assert row["finished"] == 96 and row["duration_s"] == 50
    assert row["prompt_tokens_mean"] == pytest.approx(24587 / 96) and row["output_tokens_mean"] == 64
    assert row["tokens_per_step"] == pytest.approx(30603 / 780) and row["steps_per_s"] == pytest.approx(780 / 50)
    # the server's mean TTFT is ~47 ms below the client's (README; bench.json: 2854.2 ms)
    assert 2.8542 - 0.070 < row["ttft_mean_s"] < 2.8542 - 0.030
    bounds, counts = w[0].buckets["ttft"]
    assert counts.sum() == 96 and counts[list(bounds).index(5.0)] == 84


PROM = """# TYPE vllm:{itl} histogram
vllm:{itl}_bucket{{engine="0",le="0.01",model_name="m"}} {b1}
vllm:{itl}_bucket{{engine="0",le="0.5",model_name="m"}} {b2}
vllm:{itl}_bucket{{engine="0",le="+Inf",model_name="m"}} {n}
vllm:{itl}_count{{engine="0",model_name="m"}} {n}
vllm:{itl}_sum{{engine="0",model_name="m"}} {s}
# TYPE vllm:request_success_total counter
vllm:request_success_total{{engine="0",finished_reason="length",model_name="m"}} {done}
vllm:request_success_created{{engine="0",finished_reason="length",model_name="m"}} {created}
# TYPE vllm:{usage} gauge
vllm:{usage}{{engine="0",model_name="m"}} 0.5
vllm:num_requests_running{{engine="0",model_name="m"}} 2
"""


def scrape(itl="inter_token_latency_seconds", usage="kv_cache_usage_perc", b1=1, b2=3, n=4, s=0.4, done=2, created=1.0):
    return PROM.format(itl=itl, usage=usage, b1=b1, b2=b2, n=n, s=s, done=done, created=created)


def write(folder: Path, texts: list[str], start_ms: int = 1_796_000_000_000, step_ms: int = 10_000) -> Path:
    folder.mkdir(exist_ok=True)
    for k, t in enumerate(texts):
        (folder / f"scrape-{start_ms + k * step_ms}.prom").write_text(t)
    return folder


def test_renamed_families_read_as_one(tmp_path: Path) -> None:
    old = read_scrapes(write(tmp_path / "old", [scrape("time_per_output_token_seconds", "gpu_cache_usage_perc")]))
    new = read_scrapes(write(tmp_path / "new", [scrape()]))
    for key in ("itl_sum", "itl_count", "kv_usage"):
        assert old.scrapes[0].values[key] == new.scrapes[0].values[key]
    assert old.scrapes[0].time_from == "file name (unix ms)"


def test_custom_buckets_are_read_as_given(tmp_path: Path) -> None:
    s = read_scrapes(write(tmp_path / "a", [scrape(), scrape(b1=2, b2=7, n=9, s=1.0, done=7)]))
    w = cut_windows(s, 60).windows[0]
    bounds, counts = w.buckets["itl"]
    assert list(bounds) == [0.01, 0.5, np.inf] and list(counts) == [1, 3, 1]
    assert w.row["itl_mean_s"] == pytest.approx(0.6 / 5)


def test_a_restart_splits_the_series(tmp_path: Path) -> None:
    texts = [scrape(done=2), scrape(done=9, n=8, s=0.8), scrape(done=1, n=1, s=0.1, created=500.0)]
    s = read_scrapes(write(tmp_path / "r", texts))
    assert s.segments == [0, 0, 1]
    w = cut_windows(s, 60)
    assert len(w.windows) == 1 and w.windows[0].row["finished"] == 7
    assert any("restarted" in why for why in w.skipped)


def test_time_from_header_wins_and_backwards_time_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "h"
    folder.mkdir()
    (folder / "scrape-1796000020000.prom").write_text("# scraped at t (2000.0) from u\n" + scrape(done=3))
    (folder / "scrape-1796000010000.prom").write_text("# scraped at t (1990.0) from u\n" + scrape())
    s = read_scrapes(folder)
    assert [x.time_s for x in s.scrapes] == [1990.0, 2000.0] and s.scrapes[0].time_from == "'# scraped at' line"
    mtimes = tmp_path / "m"
    mtimes.mkdir()
    for name, t in (("a.prom", 2000), ("b.prom", 1990)):  # b was written before a: its name says otherwise
        (mtimes / name).write_text(scrape())
        os.utime(mtimes / name, (t, t))
    with pytest.raises(ValueError, match=r"time goes backwards from .*a\.prom to .*b\.prom"):
        read_scrapes(mtimes)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("<html>not metrics</html>\n", r"bad\.prom line 1: not the Prometheus text format"),
        ("process_cpu_seconds_total 1.0\npython_info 1\n", "not an engine gpucap reads"),
    ],
)
def test_bad_scrapes_name_file_and_line(tmp_path: Path, text: str, match: str) -> None:
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "bad.prom").write_text(text)
    with pytest.raises(ValueError, match=match):
        read_scrapes(folder)


def test_two_models_need_a_choice(tmp_path: Path) -> None:
    other = scrape(n=6).replace('model_name="m"', 'model_name="other"')
    text = scrape() + "\n".join(line for line in other.splitlines() if not line.startswith("#")) + "\n"
    folder = write(tmp_path / "two", [text])
    with pytest.raises(ValueError, match="2 model_name labels .* --model-name"):
        read_scrapes(folder)
    assert read_scrapes(folder, model_name="other").scrapes[0].values["itl_count"] == 6


def test_two_servers_in_one_folder_are_refused(tmp_path: Path) -> None:
    info = 'vllm:cache_config_info{{block_size="16",engine="0",num_gpu_blocks="{}"}} 1.0\n'
    folder = write(tmp_path / "two", [scrape() + info.format(100), scrape(done=3) + info.format(200)])
    with pytest.raises(ValueError, match="different cache settings"):
        read_scrapes(folder)


def test_a_window_without_finished_requests_is_skipped(tmp_path: Path) -> None:
    w = cut_windows(read_scrapes(write(tmp_path / "idle", [scrape(), scrape()])), 60)
    assert not w.windows and "no request finished" in w.skipped[0]


STEP = (
    "(APIServer pid=1) INFO 12-02 21:22:{s:02d} [loggers.py:199] Engine 000: Iteration({i}): {cr} context requests, "
    "{ct} context tokens, {gr} generation requests, {gt} generation tokens, iteration elapsed time: {ms} ms, "
    "CPU KV cache usage: {kv}%"
)


def test_step_log_lines_and_a_restart() -> None:
    lines = [
        "(EngineCore pid=2) INFO 12-02 21:22:07 [kv_cache_utils.py:2327] CPU KV cache size: 174,720 tokens, ...",
        STEP.format(s=1, i=0, cr=1, ct=256, gr=0, gt=0, ms="100.38", kv="0.1"),
        "unrelated line",
        STEP.format(s=2, i=1, cr=0, ct=0, gr=1, gt=1, ms="6.90", kv="0.2"),
        STEP.format(s=9, i=0, cr=0, ct=0, gr=2, gt=2, ms="7.00", kv="0.4"),
    ]
    log = parse_step_lines("\n".join(lines))
    s = log.steps
    assert log.kv_cache_tokens == 174720
    assert list(s["prompt_tokens"]) == [256, 0, 0] and list(s["decode_requests"]) == [0, 1, 2]
    assert s["elapsed_s"].iloc[0] == pytest.approx(0.10038) and list(s["segment"]) == [0, 0, 1]
    assert list(s["line"]) == [2, 4, 5]
    # mean context: usage x cache tokens / running requests
    assert log.mean_context()[2] == pytest.approx(0.004 * 174720 / 2)


def test_the_shipped_step_log_reads() -> None:
    path = CAPTURES / "iteration_details.log"
    if not path.exists():
        pytest.skip("../shared/formats capture not present")
    log = read_step_log(path)
    assert len(log.steps) == 780  # the README: 780 per-step lines
    # 24,459 computed prompt tokens (README); 96 x 64 generated, each request's first from its last prompt step
    assert log.steps["prompt_tokens"].sum() == 24459 and log.steps["decode_tokens"].sum() == 96 * 63


def test_a_log_without_steps_says_how_to_get_them(tmp_path: Path) -> None:
    f = tmp_path / "server.log"
    f.write_text("INFO starting\n")
    with pytest.raises(ValueError, match="--enable-logging-iteration-details"):
        read_step_log(f)


@pytest.mark.parametrize(
    "text",
    [
        'http_requests_total{handler="/v1/completions",method="POST",status="2xx"} 96.0\n',
        'vllm:num_requests_running{engine="0",model_name="m"} 0\n',
    ],
)
def test_disable_log_stats_records_nothing(tmp_path: Path, text: str) -> None:
    with pytest.raises(ValueError, match="--disable-log-stats"):
        read_scrapes(write(tmp_path / "quiet", [text, text]))


def test_gzipped_scrapes_read_as_plain_ones(captures: Path, tmp_path: Path) -> None:
    folder = tmp_path / "gz"
    folder.mkdir()
    for f in captures.iterdir():
        with f.open("rb") as src, gzip.open(folder / (f.name + ".gz"), "wb") as dst:
            shutil.copyfileobj(src, dst)
    plain, packed = read_scrapes(captures), read_scrapes(folder)
    assert [s.values for s in plain.scrapes] == [s.values for s in packed.scrapes]
