"""The engine loop under the three load modes (gpucap.queueing.simulate.run_benchmark): steps by hand on a
toy engine whose every step takes 50 ms, each engine's scheduler policy, the host beside the GPU,
and the all-at-once extension."""

import dataclasses

import numpy as np
import pytest

import gpucap.queueing.simulate as simulate_module
from gpucap.config import EngineConfig, hardware
from gpucap.physics.coefficients import Coefficients
from gpucap.queueing.lengths import Lengths
from gpucap.queueing.loads import Load
from gpucap.queueing.simulate import run_benchmark

STEP = 0.05
# Llama-3.2-3B on an H100 does a step of a few dozen tokens in ~2.4 ms of weight reads; with the
# host's 50 ms per step overlapped (the default), every step lasts max(GPU, 50 ms) = 50 ms.
TOY_COEF = Coefficients(t_overhead_s=STEP, t_request_s=0.0, t_frontend_s=0.0, t_seq_s=0.0)


def toy(engine: str = "vllm", **knobs) -> object:
    return hardware("meta-llama/Llama-3.2-3B-Instruct", "H100-SXM-80GB", engine=EngineConfig(engine=engine, **knobs))


def test_closed_loop_wave_by_hand() -> None:
    """C = 4, 16-token prompts, 4 output tokens, budget 8192: the four prompts share one step
    (first tokens at 50 ms), three decode steps follow (finish at 200 ms), and the next four are
    sent then: TTFT 50 ms and TPOT 50 ms for all, 32 tokens in 0.4 s."""
    run = run_benchmark(toy(), TOY_COEF, Load.closed_loop(4, 8), input_len=16, output_len=4)
    assert run.ttft_s == pytest.approx([STEP] * 8)
    assert run.tpot_s == pytest.approx([STEP] * 8)
    assert run.duration_s == pytest.approx(8 * STEP)
    assert run.output_tokens_per_s == pytest.approx(32 / 0.4)
    assert run.stats["itl"]["mean"] == pytest.approx(STEP)


def test_token_budget_chunks_prompts_first_come_first_served() -> None:
    """Budget 32 tokens, four 16-token prompts at once (vLLM: decodes first, then prompt chunks):
    step 1 prefills requests 0 and 1 (first tokens at 50 ms); step 2 decodes them (2 tokens) and
    gives request 2 its 16 and request 3 the 14 left; step 3 decodes three and finishes request 3's
    2 tokens: TTFT 50, 50, 100, 150 ms."""
    hw = toy(max_num_batched_tokens=32, max_num_seqs=32)
    run = run_benchmark(hw, TOY_COEF, Load.all_at_once(4), input_len=16, output_len=4)
    assert run.ttft_s == pytest.approx([STEP, STEP, 2 * STEP, 3 * STEP])


def test_sglang_prefill_first_stalls_decodes() -> None:
    """Requests sent at 0.12 s and 0.24 s (constant gaps). Request 0: prefill step 0.12-0.17, decodes
    end at 0.22 and 0.27; request 1 arrives during the second. vLLM decodes request 0 in the step
    that prefills request 1 (its last token at 0.32: TPOT 50 ms); SGLang runs that prefill alone
    and request 0 waits a step (last token at 0.37: TPOT 66.7 ms)."""
    load = Load.open_loop(1 / 0.12, 2, burstiness=np.inf)
    vllm = run_benchmark(toy("vllm"), TOY_COEF, load, input_len=16, output_len=4)
    sglang = run_benchmark(toy("sglang"), TOY_COEF, load, input_len=16, output_len=4)
    assert vllm.tpot_s[0] == pytest.approx(STEP)
    assert sglang.tpot_s[0] == pytest.approx(0.2 / 3)
    assert vllm.ttft_s[1] == pytest.approx(sglang.ttft_s[1]) == pytest.approx(0.32 - 0.24)
    # the stalled request's gaps: 50, 50, 100 ms; the other's 50, 50, 50 ms
    assert sglang.stats["itl"]["mean"] == pytest.approx(0.35 / 6)


def test_trtllm_never_preempts_and_vllm_does() -> None:
    """A KV cache of 3.5 requests: TensorRT-LLM admits only what it can finish (three), vLLM admits
    on a first chunk's room and preempts when decodes outgrow the cache."""
    kw = dict(input_len=1000, output_len=200, kv_capacity_tokens=3.5 * 1200, max_running=16)
    coef = dataclasses.replace(TOY_COEF, t_overhead_s=0.002)
    trt = run_benchmark(toy("trtllm"), coef, Load.all_at_once(12), **kw)
    vllm = run_benchmark(toy("vllm"), coef, Load.all_at_once(12), **kw)
    assert trt.preemptions == 0 and trt.mean_running <= 3.0 + 1e-9
    assert vllm.preemptions > 0
    for run in (trt, vllm):
        assert np.all(np.isfinite(run.e2e_s)) and run.output_len.sum() == 12 * 200


def test_host_work_adds_unless_overlapped() -> None:
    """One request alone, 4 output tokens: decode steps last max(GPU, host) overlapped and
    GPU + host otherwise; the GPU's part is the same in both."""
    coef = dataclasses.replace(TOY_COEF, t_overhead_s=0.010)
    hw_on = toy(overlap_host=True)
    hw_off = toy(overlap_host=False)
    on = run_benchmark(hw_on, coef, Load.closed_loop(1, 1), input_len=16, output_len=4).tpot_s[0]
    off = run_benchmark(hw_off, coef, Load.closed_loop(1, 1), input_len=16, output_len=4).tpot_s[0]
    gpu = off - 0.010
    assert 0 < gpu < 0.010 and on == pytest.approx(0.010)


def test_the_front_end_spreads_a_burst() -> None:
    """512 one-token requests at once through a server of 4 ms each: all leave it together after
    2.05 s (processor sharing), so every TTFT is at least that, and the run lasts about as long."""
    coef = dataclasses.replace(TOY_COEF, t_request_s=0.004, t_overhead_s=0.002)
    run = run_benchmark(toy(), coef, Load.all_at_once(512), input_len=2, output_len=1)
    assert run.ttft_s.min() >= 512 * 0.004
    assert run.duration_s == pytest.approx(512 * 0.004, rel=0.05)


def test_offline_runs_have_no_front_end() -> None:
    coef = Coefficients(t_request_s=0.05, t_frontend_s=0.1)
    offline = toy(front_end="offline")
    assert run_benchmark(offline, coef, Load.closed_loop(1, 2), input_len=16, output_len=2).ttft_s[0] < 0.05


def test_all_at_once_extension_matches_the_whole_run(monkeypatch) -> None:
    """A 3000-prompt all-at-once run simulated from its first prompts and extended agrees with the
    same run simulated whole, within 3% on throughput and the mean and median TTFT and TPOT."""
    hw = hardware("meta-llama/Llama-3.1-8B-Instruct", "H100-SXM-80GB")
    coef = Coefficients.for_engine("vllm")
    kw = dict(input_len=Lengths.fixed(1000), output_len=Lengths.exponential(200), max_running=128)
    short = run_benchmark(hw, coef, Load.all_at_once(3000), **kw)
    assert short.simulated_prompts < 3000
    monkeypatch.setattr(simulate_module, "AT_ONCE_MIN_PROMPTS", 10**6)
    whole = run_benchmark(hw, coef, Load.all_at_once(3000), **kw)
    assert whole.simulated_prompts == 3000
    assert short.output_tokens_per_s == pytest.approx(whole.output_tokens_per_s, rel=0.03)
    for metric in ("ttft", "tpot"):
        for stat in ("mean", "median"):
            assert short.stats[metric][stat] == pytest.approx(whole.stats[metric][stat], rel=0.03), (metric, stat)


def test_skip_first_leaves_out_the_start() -> None:
    run = run_benchmark(toy(), TOY_COEF, Load.closed_loop(4, 12), input_len=16, output_len=4, skip_first=4)
    assert run.ttft_s.size == 8
    with pytest.raises(ValueError, match="skip_first"):
        run_benchmark(toy(), TOY_COEF, Load.closed_loop(4, 12), input_len=16, output_len=4, skip_first=12)
