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

from gpucap.catalog.gpus import DATA_DIR
from gpucap.catalog.models import ModelSpec

MODEL_DIR = DATA_DIR / "models"

# One suffix of a fine-tuned, quantized or versioned variant that shares the base architecture.
_VARIANT = re.compile(
    r"-(instruct|chat|it|pt|base|hf|fp8|fp4|nvfp4|mxfp4|awq|gptq|int4|int8|w4a16|w8a8|w8a8-fp8|bnb-4bit|dynamic|\d{4})$",
    re.I,
)


def _stripped_forms(repo: str) -> list[str]:
    """``repo`` and each form with one more variant suffix removed:
    "llama-3.3-70b-instruct-fp8" -> [..., "llama-3.3-70b-instruct", "llama-3.3-70b"]."""
    forms = [repo]
    while True:
        shorter = _VARIANT.sub("", forms[-1])
        if shorter == forms[-1] or not shorter:
            return forms
        forms.append(shorter)


@lru_cache(maxsize=1)
def model_cards() -> dict[str, dict[str, Any]]:
    """Every shipped model's ``card.json``, keyed by Hugging Face id, with ``path`` added."""
    cards: dict[str, dict[str, Any]] = {}
    for card_path in sorted(MODEL_DIR.glob("*/*/card.json")):
        card = json.loads(card_path.read_text())
        card["path"] = str(card_path.parent / "config.json")
        cards[card["hf_id"]] = card
    return cards


@lru_cache(maxsize=1)
def _index() -> dict[str, str]:
    """Lower-cased id, repo name and every suffix-stripped form -> catalog id. Exact names are
    entered last so that they win over a stripped form of another entry. Built once, as
    ``model_cards`` is (a lookup is then a dictionary read; building it took 0.4 ms a lookup)."""
    index: dict[str, str] = {}
    exact: dict[str, str] = {}
    for hf_id, card in model_cards().items():
        for name in [hf_id, *card.get("aliases", [])]:
            exact[name.lower()] = hf_id
            exact[name.split("/")[-1].lower()] = hf_id
            for form in _stripped_forms(name.split("/")[-1].lower()):
                index.setdefault(form, hf_id)
    index.update(exact)
    return index


def resolve_model_id(name: str) -> str:
    """The catalog id for ``name`` (id, alias, repo name, or a known variant suffix)."""
    index = _index()
    key = name.strip().lower()
    for c in [key, *_stripped_forms(key.split("/")[-1])]:
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
