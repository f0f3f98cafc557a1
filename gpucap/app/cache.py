"""What the interactive estimator caches, and by which inputs (see ``gpucap.app.widgets``): a small
LRU cache, and the normalized widget values with the cache keys each stage depends on."""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from gpucap.config import SLO, Deployment, EngineConfig, Speculative, Workload
from gpucap.physics.coefficients import Coefficients
from gpucap.units import GiB

CACHE_SIZE = 64  # results kept per stage, so dragging a slider back and forth is instant

T = TypeVar("T")


class LRU(Generic[T]):
    """A small least-recently-used cache: ``get(key, make)`` calls ``make`` only for a new key."""

    def __init__(self, size: int = CACHE_SIZE) -> None:
        self.size = size
        self._items: OrderedDict[Hashable, T] = OrderedDict()

    def get(self, key: Hashable, make: Callable[[], T]) -> T:
        if key in self._items:
            self._items.move_to_end(key)
            return self._items[key]
        value = make()
        self._items[key] = value
        if len(self._items) > self.size:
            self._items.popitem(last=False)
        return value


@dataclass(frozen=True)
class Inputs:
    """The widget values of one update, normalized; the cache keys are made from these."""

    model: str  # catalog id, or the resolved path of a config.json
    model_stamp: int  # the config file's modification time (0 for catalog models)
    gpu: str
    num_gpus: int
    tp: int
    pp: int
    ep: int
    weight_dtype: str
    kv_dtype: str
    engine: str
    gpu_memory_utilization: float
    cuda_graphs: bool
    input_len: int
    output_len: int
    ttft_slo_s: float
    tpot_slo_s: float
    calibration: str  # resolved path, or "" for the engine's default coefficients
    calibration_stamp: int
    curve_max: float
    lengths: str = "varied"  # "varied" traffic or a "fixed"-length load test (gpucap.types.LENGTHS)
    kv_cache_memory_gib: float = 0.0  # the server's logged KV budget per GPU; 0: worked out
    prefix_tokens: int = 0  # a system prompt every request carries, in the prefix cache
    draft_tokens: int = 0  # speculative decoding's draft tokens per step; 0: off
    acceptance_length: float = 1.0  # tokens kept per step, bonus included (with draft_tokens)

    @property
    def deployment(self) -> Deployment:
        """The box and its split, formats and engine knobs, as the estimator takes them."""
        engine = EngineConfig(
            engine=self.engine,
            gpu_memory_utilization=self.gpu_memory_utilization,
            cuda_graphs=self.cuda_graphs,
            kv_cache_memory_bytes=self.kv_cache_memory_gib * GiB if self.kv_cache_memory_gib > 0 else None,
        )
        return Deployment(
            self.model, self.gpu, self.num_gpus, tp=self.tp, pp=self.pp, ep=self.ep,
            weight_dtype=self.weight_dtype, kv_dtype=self.kv_dtype, engine=engine, speculative=self.speculative,
        )  # fmt: skip

    @property
    def workload(self) -> Workload:
        return Workload(
            float(self.input_len), float(self.output_len), lengths=self.lengths, prefix_tokens=float(self.prefix_tokens)
        )

    @property
    def slo(self) -> SLO:
        return SLO(ttft_s=self.ttft_slo_s, tpot_s=self.tpot_slo_s)

    @property
    def hardware_key(self) -> tuple[Hashable, ...]:
        """What one replica depends on: the deployment but its GPU count and drafter, and the model
        file's stamp."""
        return (dataclasses.replace(self.deployment, num_gpus=None, speculative=None), self.model_stamp)

    def load_key(self, coefficients: Coefficients | None) -> tuple[Hashable, ...]:
        """What the curves depend on: the deployment, the workload and the coefficients."""
        return (self.deployment, self.model_stamp, self.workload, coefficients)

    def estimate_key(self, coefficients: Coefficients | None) -> tuple[Hashable, ...]:
        return (*self.load_key(coefficients), self.slo)

    @property
    def speculative(self) -> Speculative | None:
        """An EAGLE/MTP head drafting ``draft_tokens`` a step, or None when off."""
        if self.draft_tokens < 1:
            return None
        return Speculative(draft_tokens=self.draft_tokens, acceptance_length=self.acceptance_length)


def stamp(path: Path) -> int:
    """The file's modification time in nanoseconds (0 when it is missing): part of a cache key,
    so that an edited file is read again."""
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return 0
