"""gpucap: how many concurrent requests a GPU box carries for an LLM, what binds first, and how
fast it runs, from first principles (memory, roofline step time, continuous batching) with
efficiency coefficients a load test can calibrate."""

from gpucap.catalog.gpus import GPU, get_gpu, load_gpus
from gpucap.catalog.lookup import load_model, model_cards
from gpucap.catalog.models import ModelSpec
from gpucap.config import Layout
from gpucap.estimate import DoesNotFit, Estimate, estimate, hardware
from gpucap.physics.coefficients import Coefficients, EngineConfig

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
