"""Parallel layout (``Layout``): how one replica of a model is split over GPUs: tensor, pipeline,
expert and attention-data parallelism.

A replica uses ``tp x pp x attn_dp`` GPUs. Attention and dense layers are split ``tp`` ways and
copied ``attn_dp`` times (each copy serves its own requests, as TensorRT-LLM "DEP" and SGLang
``--enable-dp-attention`` do); routed experts are spread over all ``tp x attn_dp`` GPUs of a
pipeline stage: ``ep`` ways by expert and ``tp x attn_dp / ep`` ways inside each expert. Layers
are split ``pp`` ways.

Two conventions name the same split (``split_of`` reads both):

- gpucap's and TensorRT-LLM's: ``tp`` is the attention split, ``attn_dp`` the number of its
  copies; TensorRT-LLM's "DEP8" is tp 1, ep 8, attn_dp 8 on 8 GPUs.
- SGLang's ``--tp 8 --dp 8 --enable-dp-attention``: ``tp`` counts all the GPUs of the group and
  ``dp`` the attention copies inside it, each ``tp / dp`` GPUs wide: gpucap's tp 1, attn_dp 8.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpucap.catalog.models import ModelSpec


@dataclass(frozen=True)
class Layout:
    tp: int = 1
    pp: int = 1
    ep: int = 1
    attn_dp: int = 1

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "ep", "attn_dp"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if (self.tp * self.attn_dp) % self.ep:
            raise ValueError(
                f"ep={self.ep} must divide tp x attn_dp = {self.tp * self.attn_dp} "
                "(experts are spread over the GPUs of one pipeline stage)"
            )

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.pp * self.attn_dp

    @property
    def stage_gpus(self) -> int:
        """GPUs of one pipeline stage: the ones the routed experts are spread over."""
        return self.tp * self.attn_dp

    def check(self, spec: ModelSpec) -> None:
        """Raise a clear error when the model cannot be split this way."""
        if spec.num_heads % self.tp:
            raise ValueError(
                f"tp={self.tp} does not divide {spec.name}'s {spec.num_heads} attention heads; "
                f"use a tp among {[t for t in (1, 2, 4, 8, 16) if spec.num_heads % t == 0]}"
            )
        kv = spec.num_kv_heads
        if not spec.is_mla and kv % self.tp and self.tp % kv:
            raise ValueError(f"tp={self.tp} and {spec.name}'s {kv} KV heads do not divide one another")
        if self.pp > spec.num_layers:
            raise ValueError(f"pp={self.pp} exceeds {spec.name}'s {spec.num_layers} layers")
        if self.ep > 1 and not spec.is_moe:
            raise ValueError(f"ep={self.ep} given but {spec.name} is not a mixture-of-experts model")
        if spec.is_moe and spec.num_experts % self.ep:
            raise ValueError(f"ep={self.ep} does not divide {spec.name}'s {spec.num_experts} experts")

    def kv_heads_per_gpu(self, spec: ModelSpec) -> float:
        """``max(1, num_kv_heads / tp)``: KV heads are replicated when tp exceeds them."""
        return max(1.0, spec.num_kv_heads / self.tp)


def split_of(num_gpus: int | None, *, tp: int, pp: int = 1, ep: int = 1, attn_dp: int = 1) -> tuple[Layout, str]:
    """The replica's Layout from parallel degrees in either convention (module docstring), and
    a note when SGLang's was read: with attention data parallelism, ``num_gpus`` given, not a
    multiple of ``tp x pp x attn_dp`` but a multiple of ``tp x pp``, and ``attn_dp`` dividing
    ``tp``, the degrees are SGLang's (``--tp tp --dp attn_dp --enable-dp-attention``) and the
    attention split is ``tp / attn_dp``."""
    n = num_gpus or 0
    sglang = attn_dp > 1 and n > 0 and n % (tp * pp * attn_dp) != 0 and n % (tp * pp) == 0 and tp % attn_dp == 0
    if not sglang:
        return Layout(tp=tp, pp=pp, ep=ep, attn_dp=attn_dp), ""
    note = (
        f"tp={tp} with attn_dp={attn_dp} on {num_gpus} GPUs read as SGLang's --tp {tp} --dp {attn_dp} "
        f"--enable-dp-attention: {attn_dp} attention copies of tp={tp // attn_dp} over {tp * pp} GPUs per replica"
    )
    return Layout(tp=tp // attn_dp, pp=pp, ep=ep, attn_dp=attn_dp), note
