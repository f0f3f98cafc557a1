import os
from pathlib import Path

import pytest

# The suite runs on every core already (pytest-xdist): the code under test maps serially unless a
# test asks for processes (tests/test_parallel.py compares serial, joblib and Dask).
os.environ.setdefault("GPUCAP_JOBS", "1")

ROOT = Path(__file__).resolve().parent.parent
SHARED_CASES = ROOT.parent / "shared" / "data" / "measured-public.csv"


def llama_like(**overrides: object) -> dict[str, object]:
    """A Llama-architecture config.json dict (Llama-3-8B shapes unless overridden)."""
    cfg: dict[str, object] = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
        "tie_word_embeddings": False,
    }
    cfg.update(overrides)
    return cfg


@pytest.fixture
def shared_cases() -> Path:
    if not SHARED_CASES.exists():
        pytest.skip("../shared/data/measured-public.csv not present")
    return SHARED_CASES
