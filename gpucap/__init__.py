"""gpucap: how many concurrent requests a GPU box carries for an LLM, what binds first, and how
fast it runs, from first principles (memory, roofline step time, continuous batching) with
efficiency coefficients a load test can calibrate.

The public surface: ``estimate`` (one deployment, one workload), ``plan`` (the cheapest fleet
for a target load), ``calibrate`` and ``validate`` (against measured runs), the config objects
they take (``Deployment``, ``Workload``, ``SLO``, ``OperatingPoint``) and the catalog lookups.
``plan``, ``calibrate`` and ``validate`` are imported on first use (they bring pandas and scipy
in). Where things are: README.md, "Where things are".
"""

from __future__ import annotations

import importlib
from typing import Any

from gpucap.catalog.gpus import GPU, get_gpu, load_gpus
from gpucap.catalog.lookup import load_model, model_cards
from gpucap.catalog.models import ModelSpec
from gpucap.config import SLO, Deployment, EngineConfig, Hardware, Layout, OperatingPoint, Workload, hardware
from gpucap.errors import DoesNotFit
from gpucap.estimate import Estimate, estimate, estimate_for
from gpucap.physics.coefficients import Coefficients
from gpucap.version import __version__

# name -> module, imported when the name is first used
_LAZY = {
    "plan": "gpucap.planning.search",
    "Plan": "gpucap.planning.result",
    "Target": "gpucap.planning.result",
    "Headroom": "gpucap.planning.capacity",
    "calibrate": "gpucap.calibration.calibrate",
    "FitResult": "gpucap.calibration.fitresult",
    "validate": "gpucap.calibration.validate",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'gpucap' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The module's names and the lazily imported ones (so that completion and ``dir`` list them)."""
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "GPU",
    "SLO",
    "Coefficients",
    "Deployment",
    "DoesNotFit",
    "EngineConfig",
    "Estimate",
    "FitResult",
    "Hardware",
    "Headroom",
    "Layout",
    "ModelSpec",
    "OperatingPoint",
    "Plan",
    "Target",
    "Workload",
    "__version__",
    "calibrate",
    "estimate",
    "estimate_for",
    "get_gpu",
    "hardware",
    "load_gpus",
    "load_model",
    "model_cards",
    "plan",
    "validate",
]
