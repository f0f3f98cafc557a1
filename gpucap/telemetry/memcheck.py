"""gpucap's memory model against the KV cache a running vLLM allocated.

vLLM publishes its cache settings as the labels of ``vllm:cache_config_info`` (a gauge of 1):
``num_gpu_blocks`` and ``block_size`` on every V1 version, and from about 0.30 also
``kv_cache_size_tokens`` and ``kv_cache_memory_bytes`` (seen in ``../shared/formats``, vLLM 0.32).
The cache holds ``num_gpu_blocks x block_size`` tokens per data-parallel rank (vLLM's
``KVCacheConfig``: blocks of ``block_size`` tokens of every attention layer).

``memory_check`` prints that beside gpucap's prediction for the same deployment
(``gpucap.physics.memory.hardware_memory``): its KV budget and what the budget holds in tokens at
gpucap's KV bytes per token, the difference in GiB, and the terms of gpucap's breakdown that are
the size of the difference (the reservations that vary most between versions and machines:
activations at the profiling run, CUDA graphs, non-torch memory; ``data/memory/README.md``).
Where the server states its KV memory in bytes, the bytes per token are checked on their own:
``kv_cache_memory_bytes / kv_bytes_per_token`` rounded down to whole blocks against the blocks
vLLM allocated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpucap.config import Hardware
from gpucap.physics.memory import hardware_memory
from gpucap.telemetry.scrapes import Series
from gpucap.units import GiB


@dataclass(frozen=True)
class MemoryCheck:
    """The server's KV cache and gpucap's, per GPU (one tensor-parallel rank; tokens per
    data-parallel rank)."""

    num_gpu_blocks: int
    block_size: int
    server_tokens: int  # num_gpu_blocks x block_size
    stated_tokens: int | None  # the kv_cache_size_tokens label, when the version has it
    server_kv_bytes: float | None  # the kv_cache_memory_bytes label, when given
    server_utilization: float | None
    gpucap_kv_bytes: float
    gpucap_tokens: float
    kv_bytes_per_token_per_gpu: float
    tokens_from_server_bytes: float | None  # server bytes / gpucap bytes per token, whole blocks
    terms: dict[str, float]  # gpucap's breakdown terms (bytes)

    @property
    def difference_bytes(self) -> float:
        """gpucap's KV budget less the server's (where the server states it; else from tokens)."""
        server = (
            self.server_kv_bytes
            if self.server_kv_bytes is not None
            else self.server_tokens * self.kv_bytes_per_token_per_gpu
        )
        return self.gpucap_kv_bytes - server

    def explanation(self) -> str:
        """Which of gpucap's terms is the size of the difference (within a factor of 2), or none."""
        diff = abs(self.difference_bytes)
        if diff < 0.05 * GiB:
            return "within 0.05 GiB: nothing to explain"
        close = sorted(
            ((name, v) for name, v in self.terms.items() if v > 0 and 0.5 <= v / diff <= 2.0),
            key=lambda nv: abs(math.log(nv[1] / diff)),
        )
        way = "less" if self.difference_bytes > 0 else "more"
        if not close:
            return f"no single term of gpucap's breakdown is that size; the server reserved {way} than gpucap charges"
        name, v = close[0]
        return f"the size of gpucap's {name} ({v / GiB:.2f} GiB): the server reserved {way} there than gpucap charges"

    def report(self) -> str:
        lines = [
            f"KV cache, server: {self.num_gpu_blocks} blocks x {self.block_size} tokens = {self.server_tokens:,} tokens"
            + (f" (it states {self.stated_tokens:,})" if self.stated_tokens is not None else "")
            + (f", {self.server_kv_bytes / GiB:.3f} GiB" if self.server_kv_bytes is not None else ""),
            f"KV cache, gpucap: {self.gpucap_kv_bytes / GiB:.3f} GiB = {self.gpucap_tokens:,.0f} tokens at "
            f"{self.kv_bytes_per_token_per_gpu:,.0f} bytes a token per GPU",
            f"difference (gpucap - server): {self.difference_bytes / GiB:+.3f} GiB; {self.explanation()}",
        ]
        if self.tokens_from_server_bytes is not None:
            ok = "matches" if self.tokens_from_server_bytes == self.server_tokens else "differs from"
            lines.append(
                f"bytes per token: the server's {self.server_kv_bytes / GiB:.3f} GiB hold "  # type: ignore[operator]
                f"{self.tokens_from_server_bytes:,.0f} tokens in whole blocks at gpucap's bytes a token, which {ok} "
                "the blocks it allocated"
            )
        return "\n".join(lines)


def _int_label(info: dict[str, str], key: str) -> int | None:
    try:
        return int(float(info[key]))
    except (KeyError, ValueError):
        return None


def _float_label(info: dict[str, str], key: str) -> float | None:
    try:
        v = float(info[key])
    except (KeyError, ValueError):
        return None
    return v if math.isfinite(v) else None


def memory_check(series: Series, hw: Hardware) -> MemoryCheck:
    """The server's cache (its last scrape's ``vllm:cache_config_info``) against gpucap's memory
    model of ``hw`` (module docstring)."""
    infos = [s.info for s in series.scrapes if s.info]
    if not infos:
        raise ValueError(
            "no vllm:cache_config_info in the scrapes: the server does not state its KV cache (vLLM from 0.9 does)"
        )
    info = infos[-1]
    blocks, block = _int_label(info, "num_gpu_blocks"), _int_label(info, "block_size")
    if not blocks or not block:
        raise ValueError(f"vllm:cache_config_info has no num_gpu_blocks / block_size (labels: {', '.join(info)})")
    mem = hardware_memory(hw)
    per_token = mem.kv_bytes_per_token_per_gpu
    server_bytes = _float_label(info, "kv_cache_memory_bytes")
    from_bytes = None if server_bytes is None else math.floor(server_bytes / per_token / block) * block
    terms = {
        "weights": mem.weights.total,
        "activations (profiling run)": mem.activations,
        "CUDA graphs": mem.cuda_graphs,
        "non-torch memory": mem.runtime_overhead,
        "encoder cache": mem.encoder_cache,
    }
    return MemoryCheck(
        num_gpu_blocks=blocks,
        block_size=block,
        server_tokens=blocks * block,
        stated_tokens=_int_label(info, "kv_cache_size_tokens"),
        server_kv_bytes=server_bytes,
        server_utilization=_float_label(info, "gpu_memory_utilization"),
        gpucap_kv_bytes=mem.kv_budget,
        gpucap_tokens=mem.kv_tokens_per_gpu,
        kv_bytes_per_token_per_gpu=per_token,
        tokens_from_server_bytes=from_bytes,
        terms=terms,
    )
