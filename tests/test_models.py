"""ModelSpec parsing and parameter counts against published counts (card.json cites each)."""

import json

import pytest

from gpucap.catalog.lookup import load_model, model_cards
from gpucap.catalog.models import ModelSpec

from .conftest import llama_like

CARDS = model_cards()


@pytest.mark.parametrize("hf_id", sorted(CARDS))
def test_total_params_match_published(hf_id: str) -> None:
    card = CARDS[hf_id]
    spec = load_model(hf_id)
    assert spec.total_params == pytest.approx(card["published_total_params"], rel=0.03)


@pytest.mark.parametrize("hf_id", sorted(h for h, c in CARDS.items() if c.get("published_active_params")))
def test_active_params_match_published(hf_id: str) -> None:
    card = CARDS[hf_id]
    spec = load_model(hf_id)
    convention = card.get("active_params_convention", "all")
    active = {
        "all": spec.active_params,
        # gpt-oss model card: unembedding counted, embedding not
        "unembedding_only": spec.active_nonembedding_params + spec.vocab_size * spec.hidden_size,
        "no_embeddings": spec.active_nonembedding_params,
    }[convention]
    assert active == pytest.approx(card["published_active_params"], rel=0.03)


def test_every_shipped_config_names_its_source() -> None:
    assert len(CARDS) >= 23
    for card in CARDS.values():
        assert card["config_source"] and card["params_source"]


def test_llama3_8b_shapes_by_hand() -> None:
    spec = ModelSpec.from_hf_config(llama_like())
    # per layer: q,o 2 x 4096^2; k,v 2 x 4096 x 1024; MLP 3 x 4096 x 14336
    per_layer = 2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336
    assert spec.active_nonembedding_params == pytest.approx(32 * per_layer + 65 * 4096)
    assert spec.embedding_params == 2 * 128256 * 4096
    assert spec.head_dim == 128
    assert spec.kv_elements_per_token_per_layer == 2 * 8 * 128


def test_explicit_head_dim_wins_over_hidden_over_heads() -> None:
    spec = load_model("Qwen/Qwen3-8B")  # hidden 4096, 32 heads, head_dim 128 given explicitly
    assert spec.head_dim == 128
    gemma = load_model("google/gemma-3-27b-it")  # hidden 5376 / 32 heads = 168, config says 128
    assert gemma.head_dim == 128


def test_mla_and_moe_layout_of_deepseek_v3() -> None:
    spec = load_model("deepseek-ai/DeepSeek-V3")
    assert spec.is_mla and spec.kv_elements_per_token_per_layer == 512 + 64
    assert spec.num_experts == 256 and spec.experts_per_token == 8
    assert spec.num_moe_layers == 58 and spec.num_dense_layers == 3  # first_k_dense_replace = 3


def test_windows_of_gpt_oss_gemma_llama4() -> None:
    oss = load_model("openai/gpt-oss-120b")
    assert oss.layer_window.count(128) == 18 and oss.layer_window.count(None) == 18
    gemma = load_model("google/gemma-3-27b-it")  # 5 local : 1 global, window 1024
    assert gemma.layer_window.count(None) == 62 // 6 and set(gemma.layer_window) == {1024, None}
    scout = load_model("meta-llama/Llama-4-Scout-17B-16E")  # every 4th layer global (NoPE)
    assert scout.layer_window.count(None) == 48 // 4 and 8192 in scout.layer_window
    maverick = load_model("meta-llama/Llama-4-Maverick-17B-128E")  # MoE every other layer
    assert maverick.num_moe_layers == 24


def test_unsupported_architecture_lists_families() -> None:
    with pytest.raises(ValueError, match=r"unsupported architecture.*supported families: .*llama"):
        ModelSpec.from_hf_config({"model_type": "mamba", "architectures": ["MambaForCausalLM"]})


def test_missing_keys_are_named() -> None:
    cfg = llama_like()
    del cfg["hidden_size"]
    del cfg["vocab_size"]
    with pytest.raises(ValueError, match="hidden_size, vocab_size"):
        ModelSpec.from_hf_config(cfg)


def test_bad_config_files(tmp_path) -> None:
    with pytest.raises(ValueError, match="no such config.json"):
        ModelSpec.from_hf_config(tmp_path / "missing.json")
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        ModelSpec.from_hf_config(bad)
    bad.write_text(json.dumps(llama_like()))
    assert ModelSpec.from_hf_config(tmp_path).num_layers == 32  # a folder holding config.json


def test_checkpoint_format_from_quantization_config() -> None:
    # the published configs: DeepSeek-V3 {"quant_method": "fp8", "fmt": "e4m3"}, gpt-oss {"quant_method": "mxfp4"}
    assert load_model("deepseek-ai/DeepSeek-V3").checkpoint_dtype == "fp8"
    assert load_model("deepseek-ai/DeepSeek-V3.2").checkpoint_dtype == "fp8"
    assert load_model("openai/gpt-oss-20b").checkpoint_dtype == "mxfp4"
    assert load_model("meta-llama/Llama-3.1-8B").checkpoint_dtype == "bf16"  # no quantization_config
    base = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
            "vocab_size": 100, "intermediate_size": 128}  # fmt: skip
    for quant, fmt in (
        ({"quant_method": "awq", "bits": 4}, "int4"),
        ({"quant_method": "gptq", "bits": 8}, "int8"),
        ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "nvfp4"),
        ({"quant_method": "bitsandbytes"}, "bf16"),  # not read: 16-bit
    ):
        assert ModelSpec.from_hf_config({**base, "quantization_config": quant}).checkpoint_dtype == fmt


def test_estimate_takes_the_checkpoint_format_and_says_so() -> None:
    from gpucap import estimate

    est = estimate("openai/gpt-oss-20b", "H100-SXM-80GB", 1, input_len=1000, output_len=200)
    assert est.hw.weight_dtype == "mxfp4"
    assert any("checkpoint's own format, mxfp4" in n for n in est.notes)
    bf16 = estimate("openai/gpt-oss-20b", "H100-SXM-80GB", 1, input_len=1000, output_len=200, weight_dtype="bf16")
    assert bf16.hw.weight_dtype == "bf16" and not any("checkpoint" in n for n in bf16.notes)
