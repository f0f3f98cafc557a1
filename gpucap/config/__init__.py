"""What is asked: the deployment (model, GPUs, split, formats, engine knobs), the workload (request
lengths, images, prefix cache), the SLOs and the operating point, as frozen dataclasses that can
be cache keys and swept with ``dataclasses.replace``. ``Deployment.resolve()`` looks the names up
in the catalog and fills the engine's defaults: the ``Hardware`` of one replica, with no field
left to a default.

Where each part lives: ``deployment`` (``Deployment``, ``Hardware``, ``hardware``), ``engine``
(``EngineConfig`` and the engines' defaults), ``layout`` (``Layout``, ``split_of``), ``speculative``
(``Speculative``, a deployment's drafter), ``workload`` (``Workload``, ``Images``, ``SLO``,
``OperatingPoint``). Import them from ``gpucap.config``.
"""

from gpucap.config.deployment import MAX_ROUTING_SKEW, Deployment, Hardware, hardware
from gpucap.config.engine import (
    RUNTIME_OVERHEAD_BYTES,
    VLLM_NCCL_BYTES,
    VLLM_NON_TORCH_BYTES,
    VLLM_UTILIZATION,
    VLLM_UTILIZATION_BEFORE_0_20,
    EngineConfig,
)
from gpucap.config.layout import Layout, split_of
from gpucap.config.speculative import Speculative
from gpucap.config.workload import ENCODER_TP_MODES, SLO, Images, OperatingPoint, Workload, check_prefix

__all__ = [
    "Deployment",
    "ENCODER_TP_MODES",
    "EngineConfig",
    "Hardware",
    "Images",
    "Layout",
    "MAX_ROUTING_SKEW",
    "OperatingPoint",
    "RUNTIME_OVERHEAD_BYTES",
    "SLO",
    "Speculative",
    "VLLM_NCCL_BYTES",
    "VLLM_NON_TORCH_BYTES",
    "VLLM_UTILIZATION",
    "VLLM_UTILIZATION_BEFORE_0_20",
    "Workload",
    "check_prefix",
    "hardware",
    "split_of",
]
