"""gpucap: how many concurrent requests a GPU box carries for an LLM, what binds first, and how
fast it runs, from first principles (memory, roofline step time, continuous batching) with
efficiency coefficients a load test can calibrate."""

from gpucap.catalog import load_model, model_cards
from gpucap.engine import Coefficients, EngineConfig
from gpucap.estimate import DoesNotFit, Estimate, estimate, hardware
from gpucap.gpus import GPU, get_gpu, load_gpus
from gpucap.layout import Layout
from gpucap.models import ModelSpec

__version__ = "0.1.0"

__all__ = [
    "GPU",
    "Coefficients",
    "DoesNotFit",
    "EngineConfig",
    "Estimate",
    "Layout",
    "ModelSpec",
    "estimate",
    "get_gpu",
    "hardware",
    "load_gpus",
    "load_model",
    "model_cards",
]
