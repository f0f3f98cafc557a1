"""Speculative decoding as deployed: how many tokens a drafter proposes per step, how many are
kept, and what drafts them (the physics: ``gpucap.physics.speculative``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpucap.catalog.models import ModelSpec
from gpucap.options import option


@dataclass(frozen=True)
class Speculative:
    """Speculative-decoding setup: ``draft_tokens`` (k) per step, mean ``acceptance_length``
    (tau, bonus token included), and the drafter: a head of ``draft_layers`` target-shaped
    decoder layers (EAGLE / MTP: 1; optional ``draft_vocab_size`` for EAGLE-3), or a separate
    ``draft_model`` (catalog name, config path or ModelSpec).

    A head copies the target's last layer, so on a MoE target it is a MoE layer (as DeepSeek-V3's
    MTP module is); EAGLE-3 heads for MoE targets are dense: pass the head's own config as
    ``draft_model`` for those (its embedding is then counted although it is shared)."""

    draft_tokens: int = option(kind="positive_int", flag="--speculative-draft-tokens", help="k tokens drafted per step")
    acceptance_length: float = option(
        kind="positive_float", flag="--speculative-acceptance-length", help="tau, tokens kept per step, bonus included"
    )
    draft_layers: int = option(
        1, kind="positive_int", flag="--speculative-draft-layers", help="layers of an EAGLE/MTP head"
    )
    draft_vocab_size: int | None = option(
        None, kind="positive_int", flag="--speculative-draft-vocab", help="head vocabulary (EAGLE-3)"
    )
    draft_model: str | Path | ModelSpec | None = option(
        None, flag="--speculative-draft-model", help="a separate draft model: catalog id or config.json"
    )

    def __post_init__(self) -> None:
        k = self.draft_tokens
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"draft_tokens must be an integer >= 1, got {k!r}")
        tau = self.acceptance_length
        if isinstance(tau, bool) or not isinstance(tau, (int, float)) or not 1.0 <= tau <= k + 1:
            raise ValueError(
                f"acceptance_length must lie in [1, draft_tokens + 1] = [1, {k + 1}] (tokens kept per step, bonus "
                f"token included), got {tau!r}; raise draft_tokens or lower acceptance_length"
            )
        n = self.draft_layers
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"draft_layers must be an integer >= 1 (EAGLE and MTP heads have 1), got {n!r}")
        v = self.draft_vocab_size
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ValueError(f"draft_vocab_size must be a positive integer or None, got {v!r}")
        if self.draft_model is not None and v is not None:
            raise ValueError("draft_vocab_size describes a draft head; a separate draft_model has its own vocabulary")

    @property
    def verify_tokens(self) -> int:
        """Positions the target checks per sequence and step: ``k + 1``."""
        return self.draft_tokens + 1
