"""What is deployed (``Deployment``) and what it resolves to (``Hardware``, one replica with every
name looked up and every default filled)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpucap.catalog.gpus import GPU, get_gpu
from gpucap.catalog.lookup import load_model
from gpucap.catalog.models import ModelSpec
from gpucap.config.engine import EngineConfig
from gpucap.config.layout import Layout, split_of
from gpucap.config.speculative import Speculative
from gpucap.options import Control, option
from gpucap.units import KV_BYTES_PER_ELEMENT, WEIGHT_BYTES_PER_PARAM

MAX_ROUTING_SKEW = 3.0  # a Zipf exponent past which one expert takes nearly every token


@dataclass(frozen=True)
class Hardware:
    """What the step runs on: model, GPU, split, formats, engine."""

    spec: ModelSpec
    gpu: GPU
    layout: Layout
    weight_dtype: str
    kv_dtype: str
    engine: EngineConfig


def degree(label: str, help: str) -> Any:
    """A parallelism degree's field: a whole number of GPUs >= 1 (1: not split), up to 512 on a
    page (``gpucap.options.option``)."""
    return option(1, kind="positive_int", page=Control(label, (1, 512)), help=help)


@dataclass(frozen=True)
class Deployment:
    """What is deployed: ``num_gpus`` GPUs of one kind serving ``model`` as replicas of
    ``tp x pp x attn_dp`` GPUs (either convention, see ``split_of``), the formats, the engine and
    its knobs. ``weight_dtype`` None: the checkpoint's own format. ``num_gpus`` None: one replica.
    ``routing_skew``: Zipf exponent of a MoE router's expert popularity
    (``gpucap.physics.routing``). ``encoder_tp_mode``: how a vision encoder is split (``Images``).
    ``speculative``: a drafter beside the model (``Speculative``), None without one."""

    model: str | Path | ModelSpec = option(help="catalog id (see `gpucap models`) or path to a config.json")
    gpu: str | GPU = option(
        page=Control("GPU"),
        help="a GPU of the catalog (`gpucap gpus`; data/gpus.csv: datasheet memory, FLOP/s, HBM and link bandwidth)",
    )
    num_gpus: int | None = option(
        None,
        kind="positive_int",
        page=Control("number of GPUs", (1, 4096)),
        help="GPUs in all; they form num_gpus / (tp x pp x attn_dp) replicas, each serving its own requests",
    )
    tp: int = degree(
        "tensor parallel (TP)", "tensor parallelism: GPUs one layer is split over (two all-reduces per layer per step)"
    )
    pp: int = degree("pipeline parallel (PP)", "pipeline parallelism: stages the layers are split into")
    ep: int = degree("expert parallel (EP)", "expert parallelism (MoE models): GPUs the experts are spread over")
    attn_dp: int = degree(
        "attention data parallel",
        "attention data-parallel copies: TensorRT-LLM's DEP8 is --tp 1 --ep 8 --attn-dp 8; SGLang's "
        "--tp 8 --dp 8 --enable-dp-attention is --tp 8 --attn-dp 8 --num-gpus 8 (read as its convention)",
    )
    weight_dtype: str | None = option(
        None,
        choices=list(WEIGHT_BYTES_PER_PARAM),
        page=Control("weights"),
        help="the weights' format; default: the checkpoint's own (its quantization_config; bf16 for most)",
    )
    kv_dtype: str = option(
        "auto",
        choices=list(KV_BYTES_PER_ELEMENT),
        page=Control("KV cache"),
        help="the KV cache's format: auto is the model's own dtype, fp8 halves it",
    )
    engine: str | EngineConfig = "vllm"
    gpu_file: str | Path | None = option(None, help="CSV of extra GPUs (columns of data/gpus.csv)")
    routing_skew: float = option(
        0.0, kind="float", help="MoE expert popularity as a Zipf exponent (0 uniform; ~0.5 DeepSeek-V3)"
    )
    encoder_tp_mode: str = option(
        "weights", flag="--mm-encoder-tp-mode", choices=["weights", "data"], help="as vLLM's option"
    )
    speculative: Speculative | None = None

    def split(self) -> tuple[Layout, str]:
        """The replica's layout, and a note when SGLang's convention was read (``split_of``)."""
        return split_of(self.num_gpus, tp=self.tp, pp=self.pp, ep=self.ep, attn_dp=self.attn_dp)

    def resolve(self) -> Hardware:
        """The checked ``Hardware`` of one replica: catalog entries looked up, the layout checked
        against the model, the engine's defaults for this GPU filled in. ``weight_dtype`` None:
        the checkpoint's own format (``ModelSpec.checkpoint_dtype``); ``routing_skew``: Zipf
        exponent of a MoE router's expert popularity (``gpucap.physics.routing``)."""
        layout, _ = self.split()
        spec = load_model(self.model)
        if self.routing_skew:
            if not (spec.is_moe and 0 < self.routing_skew <= MAX_ROUTING_SKEW):
                raise ValueError(
                    f"routing_skew={self.routing_skew:g}: give a number in (0, {MAX_ROUTING_SKEW:g}] for a "
                    f"mixture-of-experts model ({spec.name} is {'MoE' if spec.is_moe else 'dense'}); DeepSeek-V3's "
                    "published popularity is ~0.52"
                )
            spec = dataclasses.replace(spec, routing_skew=float(self.routing_skew))
        g = get_gpu(self.gpu, self.gpu_file)
        if g.is_amd and self.kv_dtype == "fp8_e5m2":
            raise ValueError(
                f"kv_dtype fp8_e5m2 does not run on {g.key}: vLLM's ROCm KV-cache kernels take fp8 (= fp8_e4m3) "
                "only (csrc/quantization/fp8/amd/quant_utils.cuh); use kv_dtype fp8 or auto"
            )
        layout.check(spec)
        eng = EngineConfig(engine=self.engine) if isinstance(self.engine, str) else self.engine
        return Hardware(
            spec=spec,
            gpu=g,
            layout=layout,
            weight_dtype=self.weight_dtype or spec.checkpoint_dtype,
            kv_dtype=self.kv_dtype,
            engine=eng.resolve(g),
        )

    def replicas(self, layout: Layout) -> int:
        """Replicas the GPUs form; a count that is not a multiple of the replica's GPUs is an error
        that names the nearest count that is."""
        per_replica = layout.gpus_per_replica
        num_gpus = self.num_gpus or per_replica
        if num_gpus % per_replica:
            degrees = "tp x pp" + (" x attn_dp" if layout.attn_dp > 1 else "")
            raise ValueError(
                f"num_gpus={num_gpus} is not a multiple of the GPUs per replica, {degrees} = {per_replica}: "
                f"use {per_replica * max(num_gpus // per_replica, 1)} GPUs or another split"
            )
        return num_gpus // per_replica


def hardware(model: str | Path | ModelSpec, gpu: str | GPU, **knobs: Any) -> Hardware:
    """One replica's checked ``Hardware``: ``Deployment(model, gpu, **knobs).resolve()``, the
    knobs named as ``Deployment``'s fields (``tp``, ``weight_dtype``, ``engine``, ...)."""
    return Deployment(model, gpu, **knobs).resolve()
