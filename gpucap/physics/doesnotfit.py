"""The error for a replica whose weights and reservations leave no KV budget: by how much it is
short per GPU and what would leave room (``gpucap.errors.DoesNotFit``)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from gpucap.catalog.gpus import GPU
from gpucap.catalog.models import ModelSpec
from gpucap.config import Layout
from gpucap.errors import DoesNotFit
from gpucap.units import GiB, weight_bytes_per_param

if TYPE_CHECKING:
    from gpucap.physics.memory import MemoryBreakdown


def does_not_fit(mem: MemoryBreakdown, spec: ModelSpec, gpu: GPU, layout: Layout, weight_dtype: str) -> DoesNotFit:
    """The error for a non-positive KV budget: by how much it is short per GPU, and the options
    that would leave room for the weights (the KV cache needs more on top): the smallest split,
    the lighter formats, a GPU with more memory."""
    short = -mem.kv_budget / GiB
    room = mem.usable - mem.reserved
    shards = layout.tp * layout.pp * mem.weights.total / room if room > 0 else math.inf
    tries = []
    if math.isfinite(shards):
        need = 1 << max(0, math.ceil(math.log2(shards * 1.1)))  # 10% left for KV cache
        if need > layout.tp * layout.pp:
            tries.append(f"tp x pp = {need} or more GPUs per replica")
    bpp = weight_bytes_per_param(weight_dtype)
    for lighter in ("fp8", "nvfp4" if gpu.flops_per_s.get("fp4") else "int4"):
        if (
            weight_bytes_per_param(lighter) < bpp
            and mem.weights.total * weight_bytes_per_param(lighter) / bpp < 0.9 * room
        ):
            tries.append(f"{lighter} weights")
            break
    tries.append("a GPU with more memory")
    message = (
        f"{spec.name} does not fit on {gpu.key} with tp={layout.tp} pp={layout.pp}: short by "
        f"{short:.1f} GiB per GPU (weights {mem.weights.total / GiB:.1f} GiB + reserved "
        f"{mem.reserved / GiB:.1f} GiB of {mem.usable / GiB:.1f} GiB usable); try {', or '.join(tries)}"
    )
    return DoesNotFit(message, short_bytes=-mem.kv_budget, options=tuple(tries))
