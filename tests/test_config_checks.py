"""Configs that would size the wrong model silently: a ``layer_types`` list of the wrong length,
empty, missing or with an unknown kind; Llama 4's ``no_rope_layers`` of the wrong length; a key
given twice; and hybrids with no attention layer that keeps a KV cache, which are valid (memory
binds on the recurrent state alone)."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest

from gpucap.catalog.models import ModelSpec
from gpucap.config import hardware
from gpucap.physics.memory import memory_limit

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "data" / "models"


def shipped(name: str) -> dict:
    return json.loads((MODELS / name / "config.json").read_text())


def written(tmp_path: Path, cfg: dict, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(cfg))
    return path


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c: c["layer_types"].pop(), r"layer_types lists 35 layers but the model has 36"),
        (lambda c: c.__setitem__("layer_types", []), r"layer_types lists 0 layers but the model has 36"),
        (lambda c: c.pop("layer_types"), r"gpt_oss configs list layer_types"),
        (lambda c: c["layer_types"].__setitem__(3, "global"), r"layer_types has 'global'"),
    ],
)
def test_gpt_oss_layer_types_must_name_every_layer(tmp_path: Path, change, message: str) -> None:
    cfg = shipped("openai/gpt-oss-120b")
    assert len(cfg["layer_types"]) == cfg["num_hidden_layers"] == 36
    change(cfg)
    with pytest.raises(ValueError, match=message):
        ModelSpec.from_hf_config(written(tmp_path, cfg))


def test_llama4_no_rope_layers_of_the_wrong_length(tmp_path: Path) -> None:
    cfg = shipped("meta-llama/Llama-4-Scout-17B-16E-Instruct")
    text = cfg.get("text_config", cfg)
    n = text["num_hidden_layers"]
    assert text.get("no_rope_layers") == []  # empty: the default pattern, every 4th layer NoPE
    ModelSpec.from_hf_config(written(tmp_path, cfg))
    text["no_rope_layers"] = [1] * (n - 1)
    with pytest.raises(ValueError, match=rf"no_rope_layers .* a list of {n} entries"):
        ModelSpec.from_hf_config(written(tmp_path, cfg, "short.json"))


def test_a_key_given_twice_is_refused(tmp_path: Path) -> None:
    text = json.dumps(shipped("openai/gpt-oss-120b"))[:-1] + ', "num_hidden_layers": 12}'
    path = tmp_path / "twice.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=r"'num_hidden_layers' appears twice"):
        ModelSpec.from_hf_config(path)


def test_a_hybrid_without_kv_layers_binds_on_its_state(tmp_path: Path) -> None:
    """Qwen3-Next with every layer linear: no KV cache at all. The budget holds any number of
    tokens; what fits is set by the per-request recurrent state alone, so the memory limit is the
    same at 1,000 and at 100,000 tokens of context."""
    cfg = copy.deepcopy(shipped("Qwen/Qwen3-Next-80B-A3B-Instruct"))
    cfg["layer_types"] = ["linear_attention"] * cfg["num_hidden_layers"]
    hw = hardware(written(tmp_path, cfg), "H100-SXM-80GB", tp=4)
    mem, short = memory_limit(hw, 1_000)
    _, long = memory_limit(hw, 100_000)
    assert math.isinf(mem.kv_tokens_per_gpu) and mem.kv_budget > 0
    assert 0 < short == long < math.inf
