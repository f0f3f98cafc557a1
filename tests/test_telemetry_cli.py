"""``gpucap telemetry`` and the fit from telemetry on the shipped capture of vLLM 0.32's CPU server
(``data/telemetry/vllm-cpu-tiny-llama``: scrapes, step log and the load test's own results)."""

from __future__ import annotations

import http.server
import json
import threading
from pathlib import Path

import pandas as pd
import pytest

from gpucap.calibration.loadtests import cases_from_runs
from gpucap.calibration.results import read_results
from gpucap.calibration.telemetryfit import TELEMETRY_FREE, fit_telemetry, weak_prior, window_targets
from gpucap.calibration.validate import case_hardware, validate
from gpucap.cli.main import main
from gpucap.physics.coefficients import Coefficients
from gpucap.telemetry import cut_windows, read_scrapes, read_step_log, scrape_to_folder

CAPTURE = Path(__file__).resolve().parents[1] / "data" / "telemetry" / "vllm-cpu-tiny-llama"
DEPLOYMENT = [
    "--model", str(CAPTURE / "config.json"), "--gpu", "CPU-E2E", "--gpu-file", str(CAPTURE / "gpus.csv"),
    "--weight-dtype", "fp32", "--kv-dtype", "fp32", "--kv-cache-memory", "1", "--no-cuda-graphs",
    "--max-num-seqs", "256", "--max-num-batched-tokens", "2048", "--block-size", "128", "--engine-version", "0.32.0",
]  # fmt: skip
ROW = {
    "model": str(CAPTURE / "config.json"), "gpu": "CPU-E2E", "num_gpus": 1, "tp": 1, "engine": "vllm",
    "engine_version": "0.32.0", "weight_dtype": "fp32", "kv_cache_dtype": "fp32", "max_num_seqs": 256,
    "max_num_batched_tokens": 2048, "block_size": 128, "enforce_eager": True, "kv_cache_memory_gib": 1.0,
    "case_id": "telemetry",
}  # fmt: skip


@pytest.fixture(scope="module")
def cpu_gpu():
    """The capture's CPU device in the catalog for this module's tests only (the catalog is the
    process's: left in, it would show in other tests' GPU lists)."""
    from gpucap.catalog import gpus

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(gpus, "_ADDED_FILES", [])
        gpus.add_gpu_file(CAPTURE / "gpus.csv")
        yield


def test_windows_and_memory_check_from_the_command_line(capsys, tmp_path) -> None:
    assert main(["telemetry", str(CAPTURE / "metrics"), "--window", "30s", "--no-fit", *DEPLOYMENT]) == 0
    out = capsys.readouterr().out
    assert "47 scrapes; time from '# scraped at' line" in out and "windows of 30 s" in out
    # the server's 1,365 blocks of 128 tokens, and gpucap's 6,144 bytes a token holding as many in 1 GiB
    assert "1365 blocks x 128 tokens = 174,720 tokens" in out and "matches the blocks it allocated" in out
    assert main(["telemetry", str(CAPTURE / "metrics"), "--window", "30s", "--no-fit", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["series"]["model_name"] == "tiny-llama" and len(data["windows"]) == 10


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"a.prom": "<html>hello</html>\n"}, "a.prom line 1: not the Prometheus text format"),
        (
            {"a.prom": 'http_requests_total{handler="/v1/completions",method="POST",status="2xx"} 3\n'},
            "--disable-log-stats",
        ),
    ],
)
def test_bad_scrapes_are_one_line_and_exit_2(capsys, tmp_path, files, message) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert main(["telemetry", str(tmp_path), "--no-fit"]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_scrape_needs_a_folder_and_keeps_every_sample(capsys, tmp_path) -> None:
    text = (CAPTURE / "metrics").iterdir().__next__()
    import gzip

    body = gzip.decompress(text.read_bytes()).split(b"\n", 1)[1]  # as the server sent it

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        assert main(["telemetry", "--scrape", url, "--for", "1s"]) == 2
        assert "--scrape-to" in capsys.readouterr().err
        files = scrape_to_folder(url, tmp_path / "s", every_s=0.2, for_s=0.5)
        assert len(files) >= 2 and all(f.read_text().startswith("# scraped at ") for f in files)
        assert len(read_scrapes(tmp_path / "s").scrapes) == len(files)
    finally:
        server.shutdown()


def test_the_fit_from_telemetry_predicts_the_load_test(cpu_gpu) -> None:
    """The fit sees the scrapes and the step log only; the load test's own results (the client's
    mean TTFT, TPOT and output tokens/s at concurrency 1-16, data/telemetry/README.md) are predicted
    within 20%, and each better in the median than with vLLM's GPU defaults (which, with the CPU's
    host time added to every step as vLLM's CPU platform runs it, miss TTFT by 44% in the median)."""
    windows = cut_windows(read_scrapes(CAPTURE / "metrics"), 30)
    targets, _ = window_targets(windows, ROW, load="closed")
    assert len(targets) == 9
    start = Coefficients.for_engine("vllm")
    free = TELEMETRY_FREE  # the HTTP server's own timing identifies the front end
    steps = read_step_log(CAPTURE / "server-steps.log.gz")
    hw, _, _ = case_hardware(pd.Series(ROW))
    tf = fit_telemetry(targets, start=start, free=free, prior=weak_prior(start, free), steps=steps, step_hw=hw)
    cases = cases_from_runs(read_results(CAPTURE / "loadtest").runs, weight_dtype="fp32", kv_cache_dtype="fp32")
    cases = cases.assign(kv_cache_memory_gib=1.0)
    before, after = validate(cases, start), validate(cases, tf.fit.coefficients)
    for m in ("output_tok_s", "ttft_ms", "tpot_ms"):
        assert (after[f"{m}_ratio"] - 1).abs().max() < 0.2, m
        assert (after[f"{m}_ratio"] - 1).abs().median() < (before[f"{m}_ratio"] - 1).abs().median(), m
    assert (before["ttft_ms_ratio"] - 1).abs().median() > 0.2
    assert not tf.steps.empty and {"start_s", "fitted_s"} <= set(tf.steps.columns)


def test_a_tight_prior_holds_what_the_windows_do_not_see(cpu_gpu) -> None:
    """A window simulated without the HTTP server says nothing of the front end: t_frontend_s stays
    at its prior and is named as not identified."""
    windows = cut_windows(read_scrapes(CAPTURE / "metrics"), 30)
    targets, _ = window_targets(windows, ROW, load="closed")
    offline = [t for t in targets if t.case.hw.engine.front_end == "offline"]
    assert offline  # the first window: its first scrape has no HTTP timing yet
    start = Coefficients.for_engine("vllm")
    free = ("u_compute", "t_frontend_s")
    tf = fit_telemetry(offline[:1], start=start, free=free, prior=weak_prior(start, free))
    assert "t_frontend_s" in tf.unidentified and tf.fit.coefficients.t_frontend_s == pytest.approx(start.t_frontend_s)
