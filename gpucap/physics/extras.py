"""The optional work of a load: each request's images and speculative decoding.

Every physics function that takes a load (``gpucap.physics.batching``, ``runs``, ``memory``,
``concurrency``) takes them as one ``Extras``; without them (``NO_EXTRAS``) every result is the
text-only, one-token-a-step one.

- ``images`` (``gpucap.config.Images``): each request's images add their tokens to the prompt
  (``I = text tokens + images x tokens per image``), their encoder work to the step that schedules
  the request's prefill, and the encoder's weights and cache to the memory.
- ``speculative`` (``gpucap.physics.speculative.Speculative``): a decode step keeps ``tau`` tokens
  per sequence and puts ``k + 1`` through the model; the drafter's weights and KV join the memory.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpucap.catalog.models import ModelSpec
from gpucap.config import Hardware, Images, Speculative
from gpucap.physics.vision import image_work


def serves_images(spec: ModelSpec, images: Images | None) -> bool:
    """Whether requests carry images; raises when they do and the model has no vision encoder."""
    if images is None or images.per_request == 0:
        return False
    if spec.vision is None:
        raise ValueError(
            f"{spec.name} has no vision encoder (no vision_config of a supported kind), so it cannot take "
            f"images_per_request={images.per_request:g}; use 0 or a multimodal model"
        )
    return True


@dataclass(frozen=True)
class Extras:
    """The optional work of a load: each request's images and speculative decoding."""

    images: Images | None = None
    speculative: Speculative | None = None

    @property
    def images_per_request(self) -> float:
        return self.images.per_request if self.images else 0.0

    @property
    def tokens_per_step(self) -> float:
        """Output tokens a decoding sequence gains per step: ``tau`` (1 without speculation)."""
        return float(self.speculative.acceptance_length) if self.speculative else 1.0

    @property
    def tokens_per_sequence(self) -> int:
        """Tokens a decoding sequence puts through a step: ``k + 1`` (1 without speculation)."""
        return self.speculative.verify_tokens if self.speculative else 1

    def serves_images(self, spec: ModelSpec) -> bool:
        """Whether the requests carry images (``serves_images``)."""
        return serves_images(spec, self.images)

    def image_tokens(self, hw: Hardware) -> float:
        """Prompt tokens a request's images add: ``images x tokens per image``."""
        if not serves_images(hw.spec, self.images):
            return 0.0
        assert self.images is not None and hw.spec.vision is not None
        return self.images.per_request * image_work(hw.spec.vision, self.images).tokens


NO_EXTRAS = Extras()
