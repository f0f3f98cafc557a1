"""Hostile config.json files: every shipped config with one field at a time set to a value a
careless or hostile edit produces. Each either parses to a model with positive sizes, or fails
with one ValueError line naming the file; never another exception, never a negative count."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpucap.catalog.models import ModelSpec

from .conftest import ROOT

CONFIGS = sorted((ROOT / "data" / "models").glob("*/*/config.json"))
BAD_VALUES = (0, -1, 1.5, True, "8", [], {}, 10**400, 1e308)


def mutations(cfg: dict) -> list[tuple[str, str, object, dict]]:
    """(section, key, value, mutated config) for every scalar field of the top level and of the
    text and vision sections, and every bad value."""
    out = []
    for section in ("", "text_config", "vision_config"):
        part = cfg if not section else cfg.get(section)
        if not isinstance(part, dict):
            continue
        for key, v in part.items():
            if isinstance(v, dict) or key.startswith("_"):
                continue
            for bad in BAD_VALUES:
                new = json.loads(json.dumps(cfg))
                (new if not section else new[section])[key] = bad
                out.append((section, key, bad, new))
    return out


def check(path: Path, text: str) -> str:
    """'ok' or 'error'; fails the test on anything else."""
    probe = path.parent / "probe" / "config.json"
    probe.parent.mkdir(exist_ok=True)
    probe.write_text(text)
    try:
        spec = ModelSpec.from_hf_config(probe)
    except ValueError as exc:
        msg = str(exc)
        assert "\n" not in msg and str(probe) in msg, msg
        return "error"
    assert spec.num_layers > 0 and spec.num_heads > 0 and spec.num_kv_heads > 0 and spec.head_dim > 0
    assert spec.total_params > 0 and spec.active_params > 0 and spec.kv_elements_per_token_per_layer > 0
    assert spec.experts_per_token <= spec.num_experts or not spec.is_moe
    return "ok"


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}")
def test_every_mutated_field_is_clean(config: Path, tmp_path: Path) -> None:
    cfg = json.loads(config.read_text())
    copy = tmp_path / "model" / "config.json"
    copy.parent.mkdir()
    outcomes = {"ok": 0, "error": 0}
    for _, _, _, new in mutations(cfg):
        outcomes[check(copy, json.dumps(new))] += 1
    assert outcomes["error"] > 0  # the parser does read some of these fields


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[1, 2]", "holds one JSON object"),
        ("[" * 100_000, "nested too deeply"),
        ('{"model_type": "llama", "num_hidden_layers": ' + "9" * 5000 + "}", "unreadable JSON value"),
        ("{not json", "not valid JSON"),
    ],
)
def test_unreadable_configs_are_named(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "m" / "config.json"
    path.parent.mkdir()
    path.write_text(text)
    with pytest.raises(ValueError, match=says) as err:
        ModelSpec.from_hf_config(path)
    assert str(path) in str(err.value)


def test_inconsistent_fields_are_named(tmp_path: Path) -> None:
    base = json.loads((ROOT / "data" / "models" / "meta-llama" / "Llama-3.1-8B" / "config.json").read_text())
    path = tmp_path / "m" / "config.json"
    path.parent.mkdir()
    for change, says in (
        ({"num_key_value_heads": 5}, "num_attention_heads = 32 is not a multiple of num_key_value_heads = 5"),
        ({"num_attention_heads": 0}, "num_attention_heads = 0 is not a whole number >= 1"),
        ({"vocab_size": -1}, "vocab_size = -1 is not a whole number >= 1"),
        ({"num_hidden_layers": 1.5}, "num_hidden_layers = 1.5 is not a whole number"),
        ({"num_hidden_layers": 10**12}, "<= 10,000"),
        ({"tie_word_embeddings": 1}, "tie_word_embeddings = 1 is not true or false"),
    ):
        path.write_text(json.dumps({**base, **change}))
        with pytest.raises(ValueError, match=says):
            ModelSpec.from_hf_config(path)
    moe = json.loads((ROOT / "data" / "models" / "Qwen" / "Qwen3-30B-A3B" / "config.json").read_text())
    path.write_text(json.dumps({**moe, "num_experts_per_tok": 200}))
    with pytest.raises(ValueError, match="num_experts_per_tok = 200 is more than the 128 experts"):
        ModelSpec.from_hf_config(path)
