"""Model catalog: the ``config.json`` files shipped under ``data/models/<org>/<repo>/``.

Each folder holds the raw Hugging Face ``config.json`` and a ``card.json`` with the id, aliases
(instruct/chat/quantized variants that share the architecture), the published parameter counts
and their sources. Names resolve by id or alias (case-insensitive), or as a path to any
``config.json``.
"""

from __future__ import annotations

import difflib
import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from .gpus import DATA_DIR
from .models import ModelSpec

MODEL_DIR = DATA_DIR / "models"

# Suffixes of quantized or fine-tuned variants that share the base architecture.
_VARIANT = re.compile(r"(-(instruct|chat|it|fp8|fp4|nvfp4|awq|gptq|int4|int8|w4a16|w8a8|bnb-4bit)(-\w+)?|-\d{4})+$", re.I)


@lru_cache(maxsize=1)
def model_cards() -> dict[str, dict[str, Any]]:
    """Every shipped model's ``card.json``, keyed by Hugging Face id, with ``path`` added."""
    cards: dict[str, dict[str, Any]] = {}
    for card_path in sorted(MODEL_DIR.glob("*/*/card.json")):
        card = json.loads(card_path.read_text())
        card["path"] = str(card_path.parent / "config.json")
        cards[card["hf_id"]] = card
    return cards


def _index() -> dict[str, str]:
    index: dict[str, str] = {}
    for hf_id, card in model_cards().items():
        for name in [hf_id, *card.get("aliases", [])]:
            index[name.lower()] = hf_id
            index[name.split("/")[-1].lower()] = hf_id
    return index


def resolve_model_id(name: str) -> str:
    """The catalog id for ``name`` (id, alias, repo name, or a known variant suffix)."""
    index = _index()
    key = name.strip().lower()
    candidates = [key, key.split("/")[-1]]
    stripped = _VARIANT.sub("", key.split("/")[-1])
    candidates += [stripped, stripped + "-hf"]
    for c in candidates:
        if c in index:
            return index[c]
    close = difflib.get_close_matches(key, list(index), n=4, cutoff=0.5)
    hint = f"; did you mean {', '.join(sorted({index[c] for c in close}))}?" if close else ""
    raise ValueError(f"unknown model {name!r}{hint} (`gpucap models` lists all, or pass a path to a config.json)")


@lru_cache(maxsize=64)
def _load_cached(path: str, name: str) -> ModelSpec:
    return ModelSpec.from_hf_config(path, name=name)


def load_model(name_or_path: str | Path | ModelSpec) -> ModelSpec:
    """A ModelSpec from a catalog name or a path to a ``config.json`` (or its folder)."""
    if isinstance(name_or_path, ModelSpec):
        return name_or_path
    path = Path(name_or_path)
    if path.suffix == ".json" or path.is_dir() and (path / "config.json").exists():
        return ModelSpec.from_hf_config(path)
    hf_id = resolve_model_id(str(name_or_path))
    return _load_cached(model_cards()[hf_id]["path"], hf_id)
