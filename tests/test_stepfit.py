"""The step log as a fit target: coefficients recovered from a log written with known ones, and
gpucap's memory model against the KV cache a real server allocated."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpucap.calibration.stepfit import fit_steps, predicted_logged_s, prompt_compute_share, step_compositions
from gpucap.config import EngineConfig, hardware
from gpucap.physics.coefficients import Coefficients
from gpucap.telemetry.memcheck import memory_check
from gpucap.telemetry.scrapes import read_scrapes
from gpucap.telemetry.steplog import parse_step_lines
from gpucap.units import GiB

CACHE_TOKENS = 200_000
TRUTH = dataclasses.replace(
    Coefficients.for_engine("vllm"), u_compute=0.6, u_hbm=0.7, t_layer_s=8e-6, t_seq_s=20e-6, t_overhead_s=1e-3
)
LINE = (
    "INFO 12-02 10:00:00 [loggers.py:199] Engine 000: Iteration({i}): {cr} context requests, {ct} context tokens, "
    "{gr} generation requests, {gt} generation tokens, iteration elapsed time: {ms:.2f} ms, GPU KV cache usage: {kv:.1f}%"
)


def synthetic_log(hw, truth: Coefficients, noise: float, seed: int = 0) -> str:
    """Steps of a decode batch from 1 to 512 sequences at ~1,000 tokens of context, some with a
    prompt chunk of one to eight whole prompts, timed as vLLM logs them with ``truth``."""
    rng = np.random.default_rng(seed)
    rows = []
    for n in np.unique(np.geomspace(1, 512, 40).astype(int)):
        for prompts in (0, 1, 4, 8):
            ctx = 1000.0
            chunk = 512 if prompts else 0
            held = n * ctx + prompts * chunk
            # contexts are what the printed usage (one decimal of a percent) gives back
            kv = round(held / CACHE_TOKENS * 100, 1)
            ctx = (kv / 100 * CACHE_TOKENS - prompts * chunk) / n
            comp = pd.DataFrame(
                {
                    "decode": [n],
                    "context": [ctx],
                    "prefill": [prompts * chunk],
                    "pairs": [prompts * chunk * (chunk + 1) / 2],
                }
            )
            t = float(predicted_logged_s(hw, truth, comp)[0]) * np.exp(noise * rng.standard_normal())
            rows.append(LINE.format(i=len(rows), cr=prompts, ct=prompts * chunk, gr=n, gt=n, ms=t * 1e3, kv=kv))
    return f"INFO GPU KV cache size: {CACHE_TOKENS:,} tokens\n" + "\n".join(rows)


@pytest.fixture(scope="module")
def hw():
    return hardware("meta-llama/Llama-3.1-8B", "H100-SXM-80GB", engine=EngineConfig(engine="vllm"))


def test_step_fit_recovers_the_coefficients_that_wrote_the_log(hw) -> None:
    log = parse_step_lines(synthetic_log(hw, TRUTH, noise=0.03))
    start = dataclasses.replace(TRUTH, u_compute=0.4, u_hbm=0.9, t_layer_s=1e-5, t_seq_s=5e-6)
    fit = fit_steps(log, hw, start=start)
    for name in ("u_compute", "u_hbm", "t_seq_s"):
        got, se = getattr(fit.coefficients, name), fit.stderr[name]
        assert abs(got - getattr(TRUTH, name)) < 3 * se + 0.02 * getattr(TRUTH, name), name
    assert fit.error("fitted") < 0.05 < fit.error("start")
    assert any("t_overhead_s stays" in n for n in fit.notes)  # vLLM's host runs beside the GPU


def test_a_host_beside_the_device_is_not_fitted_from_the_log(hw) -> None:
    log = parse_step_lines(synthetic_log(hw, TRUTH, noise=0.0))
    with pytest.raises(ValueError, match="t_overhead_s is not identified"):
        fit_steps(log, hw, free=("u_compute", "t_overhead_s"))


def test_the_prompt_steps_time_the_compute(hw) -> None:
    """The log was written with u_compute 0.6; its prompt steps give 0.6 back from a start of 0.4
    (the other coefficients as written), whatever the decode-only steps say."""
    comp = step_compositions(parse_step_lines(synthetic_log(hw, TRUTH, noise=0.0)))
    got = prompt_compute_share(hw, dataclasses.replace(TRUTH, u_compute=0.4), comp)
    assert got == pytest.approx(0.6, rel=0.01)
    decode_wrong = comp.assign(logged_s=np.where(comp["prefill"] > 0, comp["logged_s"], 10 * comp["logged_s"]))
    assert prompt_compute_share(hw, TRUTH, decode_wrong) == pytest.approx(got, rel=1e-6)


def test_prompt_steps_that_no_u_compute_in_range_explains_are_an_error(hw) -> None:
    comp = step_compositions(parse_step_lines(synthetic_log(hw, TRUTH, noise=0.0)))
    with pytest.raises(ValueError, match="no step that carries a prompt"):
        prompt_compute_share(hw, TRUTH, comp[comp["prefill"] == 0])
    slow = comp.assign(logged_s=comp["logged_s"] * 100)  # prompt steps 100x slower than any u in range
    with pytest.raises(ValueError, match="below its physical range"):
        prompt_compute_share(hw, TRUTH, slow)


CAPTURE = Path(__file__).resolve().parents[2] / "shared" / "formats" / "vllm-metrics-0.32-cpu" / "metrics_after.txt"
CPU_SERVER = Path(__file__).resolve().parents[1] / "data" / "loadtests" / "vllm-cpu-tiny-llama"


def test_memory_check_against_the_real_servers_cache(tmp_path: Path) -> None:
    if not CAPTURE.exists():
        pytest.skip("../shared/formats capture not present")

    folder = tmp_path / "s"
    folder.mkdir()
    (folder / "scrape-1796000000000.prom").write_text(CAPTURE.read_text())
    engine = EngineConfig(engine="vllm", block_size=128, cuda_graphs=False, kv_cache_memory_bytes=1 * GiB)
    hw = hardware(
        str(CPU_SERVER / "config.json"), "CPU-E2E", weight_dtype="fp32", kv_dtype="fp32", engine=engine,
        gpu_file=CPU_SERVER / "gpus.csv",
    )  # fmt: skip
    check = memory_check(read_scrapes(folder), hw)
    # the server: 1365 blocks of 128 tokens = 174,720 tokens (its own kv_cache_size_tokens)
    assert check.server_tokens == 1365 * 128 == check.stated_tokens
    # gpucap: 2 (K, V) x 2 KV heads x 64 x 6 layers x 4 bytes = 6,144 bytes a token; 1 GiB / 6,144 = 174,762.7
    # tokens, 1,365 whole blocks: the blocks vLLM allocated
    assert check.kv_bytes_per_token_per_gpu == 6144
    assert check.tokens_from_server_bytes == check.server_tokens
    assert abs(check.difference_bytes) < 1e-6 * GiB and "nothing to explain" in check.explanation()
