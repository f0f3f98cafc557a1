"""What a request takes from the KV budget, by engine: TensorRT-LLM's equal share of the KV memory
per window size against the tokens each layer holds (every expected number by hand)."""

import pytest

import gpucap
from gpucap.catalog.lookup import load_model
from gpucap.config import EngineConfig, hardware
from gpucap.physics.memory import charged_held_tokens_per_layer, memory_limit


def test_gpt_oss_is_charged_in_full_by_tensorrt_llm() -> None:
    # gpt-oss-20b: 12 layers with a 128-token window, 12 full. Held: (12 x 2000 + 12 x 128) / 24 =
    # 1064 tokens a layer. TensorRT-LLM gives each window size half the memory, so the 12 full
    # layers fill their half at 2 x 12 x 2000 / 24 = 2000 a layer: the whole context.
    spec = load_model("openai/gpt-oss-20b")
    assert float(charged_held_tokens_per_layer(spec, 2000.0, engine="vllm")) == pytest.approx(1064)
    assert float(charged_held_tokens_per_layer(spec, 2000.0, engine="trtllm")) == pytest.approx(2000)


def test_the_window_group_that_fills_first_sets_the_charge() -> None:
    # Gemma 3 27B: 52 layers with a 1024-token window, 10 full (62 attention layers).
    spec = load_model("google/gemma-3-27b-it")
    # 8192 tokens: the full half fills first, 2 x 10 x 8192 / 62 = 2642.6 (held: (10 x 8192 + 52 x
    # 1024) / 62 = 2180.1).
    assert float(charged_held_tokens_per_layer(spec, 8192.0, engine="trtllm")) == pytest.approx(163840 / 62)
    assert float(charged_held_tokens_per_layer(spec, 8192.0)) == pytest.approx((81920 + 53248) / 62)
    # 1500 tokens: the windowed half fills first, 2 x 52 x 1024 / 62 = 1717.7, more than the context.
    assert float(charged_held_tokens_per_layer(spec, 1500.0, engine="trtllm")) == pytest.approx(106496 / 62)


def test_one_window_size_and_llama4_chunks_keep_their_charge() -> None:
    llama = load_model("meta-llama/Llama-3.1-8B")
    assert float(charged_held_tokens_per_layer(llama, 3000.0, engine="trtllm")) == 3000.0
    scout = load_model("meta-llama/Llama-4-Scout-17B-16E-Instruct")  # 36 chunked layers of 8192, 12 full
    for engine in ("trtllm", "vllm"):
        held = float(charged_held_tokens_per_layer(scout, 20000.0, engine=engine))
        assert held == pytest.approx((36 * 8192 + 12 * 20000) / 48)


def test_tensorrt_llm_holds_requests_at_their_whole_context() -> None:
    # gpt-oss-20b, 2000-token requests, TensorRT-LLM's 32-token blocks: every layer charged
    # 63 x 32 = 2016 tokens, so the budget holds budget / (2016 x KV bytes a token) requests.
    trt = hardware("openai/gpt-oss-20b", "H200-SXM-141GB", engine=EngineConfig(engine="trtllm"))
    assert trt.engine.block_size == 32
    mem, held = memory_limit(trt, 2000.0)
    assert held == mem.kv_budget // (2016 * mem.kv_bytes_per_token_per_gpu)


def test_the_estimate_says_when_the_equal_shares_cost_kv() -> None:
    # gpt-oss-20b, 1000 + 1000 tokens: charged 2000 a layer against 1064 held, 1.88x.
    trt = gpucap.estimate("openai/gpt-oss-20b", "H200-SXM-141GB", 1, engine="trtllm", input_len=1000, output_len=1000)
    assert any("equal share of the KV memory" in n and "1.88x" in n for n in trt.notes)
    vllm = gpucap.estimate("openai/gpt-oss-20b", "H200-SXM-141GB", 1, input_len=1000, output_len=1000)
    assert not any("equal share" in n for n in vllm.notes)
