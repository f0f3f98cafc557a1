"""What is asked of a deployment: the requests (``Workload``, with the ``Images`` each carries), the
latency targets (``SLO``) and where the speed is read (``OperatingPoint``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpucap.catalog.vision import VisionEncoder
from gpucap.options import Control, option
from gpucap.types import LENGTHS, STATISTICS

ENCODER_TP_MODES = ("weights", "data")


@dataclass(frozen=True)
class Images:
    """Images each request carries.

    ``size_px``: the side of a square image or ``(height, width)``; ``None`` takes the encoder's
    native size (Gemma 3: 896, Llama 4: one 336-px tile); Qwen2.5-VL needs a size.
    ``encoder_tp_mode``: vLLM's ``--mm-encoder-tp-mode``: ``"weights"`` (default) splits each
    encoder layer over the tp GPUs like the language model, ``"data"`` keeps the whole encoder
    on every GPU and spreads the images over them.
    """

    per_request: float = 1.0
    size_px: int | tuple[int, int] | None = None
    encoder_tp_mode: str = "weights"

    def __post_init__(self) -> None:
        n = self.per_request
        if isinstance(n, bool) or not isinstance(n, (int, float)) or not (n >= 0 and math.isfinite(n)):
            raise ValueError(f"images_per_request must be a number >= 0, got {n!r}; use 0 for text-only requests")
        size = self.size_px
        sides = size if isinstance(size, tuple) else (size, size)
        if size is not None and not (
            len(sides) == 2 and all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in sides)
        ):
            raise ValueError(
                f"image_size_px must be a positive integer (a square side) or (height, width), got {size!r}"
            )
        if self.encoder_tp_mode not in ENCODER_TP_MODES:
            raise ValueError(
                f"encoder_tp_mode must be one of {', '.join(ENCODER_TP_MODES)}, got {self.encoder_tp_mode!r}"
            )

    def height_width(self, enc: VisionEncoder) -> tuple[int, int]:
        """The image size in pixels, the encoder's native size when none is given."""
        if self.size_px is None:
            if not enc.image_size_px:
                raise ValueError(
                    f"image_size_px is needed for a {enc.kind} encoder (it reads images at their own "
                    "resolution); give e.g. image_size_px=1344"
                )
            return enc.image_size_px, enc.image_size_px
        if isinstance(self.size_px, tuple):
            return self.size_px
        return self.size_px, self.size_px


def check_prefix(input_len: float, prefix_tokens: float, share: float, turns: int) -> None:
    """Raise a one-line ValueError for a prefix longer than the prompt, a share outside [0, 1]
    or a turn count that is not a whole number >= 1."""
    if not (isinstance(prefix_tokens, (int, float)) and 0 <= prefix_tokens <= input_len):
        raise ValueError(
            f"prefix_tokens={prefix_tokens!r} must be between 0 and the prompt's input_len ({input_len:g}): "
            "the system prompt is part of the prompt"
        )
    if not (isinstance(share, (int, float)) and 0 <= share <= 1):
        raise ValueError(f"prefix_share must be a share between 0 and 1, got {share!r}")
    if not (isinstance(turns, int) and not isinstance(turns, bool) and turns >= 1):
        raise ValueError(f"turns must be a whole number >= 1, got {turns!r}")


def length(label: str, help: str) -> Any:
    """A request length's field: tokens > 0, required, offered on a page as whole tokens up to ten
    million (``gpucap.options.option``)."""
    return option(kind="positive_float", page=Control(label, (1, 10_000_000), "int"), help=help)


@dataclass(frozen=True)
class Workload:
    """Request lengths (text tokens), the images each request carries, and its prefix cache.

    ``input_len`` counts text tokens; images add their tokens on top (``gpucap.physics.vision``).
    ``image_size_px``: side of a square image or (height, width); None = the encoder's native
    size (Qwen2.5-VL reads images at their own size and needs one). ``lengths``: "varied"
    (traffic whose requests differ in length: steady state) or "fixed" (a load test with one
    length for all requests: the closed loop runs in waves, ``gpucap.physics.waves``, taken after
    the first).
    """

    input_len: float = length("input tokens", "prompt tokens per request")
    output_len: float = length("output tokens", "output tokens per request")
    images_per_request: float = option(0.0, kind="float", help="images each request carries (multimodal)")
    image_size_px: int | tuple[int, int] | None = option(
        None, kind="image_size", help="image side, or HxW like 1080x1920"
    )
    lengths: str = option(
        "varied",
        choices=LENGTHS,
        page=Control("request lengths", choice_labels={"varied": "varied (traffic)", "fixed": "fixed (a load test)"}),
        help="varied: traffic whose lengths differ (steady state); fixed: a long load test's equal lengths (the "
        "closed loop runs in waves, which break into groups after the first)",
    )
    prefix_tokens: float = option(
        0.0,
        kind="float",
        page=Control("shared prefix tokens", (0, 10_000_000), "int"),
        help="a system prompt every request starts with (inside the input tokens), held once in the prefix cache: "
        "its prefill is skipped and its KV stored once (vLLM --enable-prefix-caching, on by default); 0: none",
    )
    prefix_share: float = option(1.0, kind="float", help="share of requests that carry it (default 1)")
    turns: int = option(
        1, kind="positive_int", help="turns per conversation; each turn's prompt carries the earlier ones"
    )

    def __post_init__(self) -> None:
        if self.lengths not in LENGTHS:
            raise ValueError(f"lengths must be one of {', '.join(LENGTHS)}, got {self.lengths!r}")
        for name in ("input_len", "output_len"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and v > 0 and np.isfinite(v)):
                raise ValueError(f"{name} must be a positive number, got {v!r}")
        check_prefix(self.input_len, self.prefix_tokens, self.prefix_share, self.turns)
        if self.lengths == "fixed" and self.cached_tokens:
            raise ValueError(
                "prefix caching and turns are modelled for varied traffic (lengths='varied'), not fixed-length waves"
            )
        Images(per_request=self.images_per_request, size_px=self.image_size_px)  # validates both

    def images(self, encoder_tp_mode: str = "weights") -> Images | None:
        """The images of each request, or None for text-only requests."""
        if not self.images_per_request:
            return None
        return Images(per_request=self.images_per_request, size_px=self.image_size_px, encoder_tp_mode=encoder_tp_mode)

    @property
    def history_len(self) -> float:
        """Earlier turns a prompt carries, on average over a conversation's turns:
        ``(turns - 1) / 2 x (input - system prompt + output)`` (the system prompt once)."""
        return (self.turns - 1) / 2 * (self.input_len - self.prefix_tokens + self.output_len)

    @property
    def prompt_len(self) -> float:
        """Mean prompt: the turn's own input plus the history it carries."""
        return self.input_len + self.history_len

    @property
    def cached_tokens(self) -> float:
        """Prompt tokens found in the prefix cache, on average: the system prompt where a request
        carries it, and the whole history (taken to stay cached between turns)."""
        return self.prefix_share * self.prefix_tokens + self.history_len

    @property
    def shared_tokens(self) -> float:
        """Tokens whose KV one copy serves every request that carries them (the system prompt)."""
        return self.prefix_tokens if self.prefix_share > 0 else 0.0

    @property
    def max_context(self) -> float:
        """Tokens a request holds at its end: input + output (the safe length for memory), the
        last turn's for a conversation."""
        return self.input_len + 2 * self.history_len + self.output_len

    @property
    def mean_context(self) -> float:
        """Tokens a request holds on average over its life: input + output / 2."""
        return self.prompt_len + self.output_len / 2


@dataclass(frozen=True)
class SLO:
    """Latency targets: time to first token and time per output token, in seconds, at
    ``statistic`` over the requests (``gpucap.types.STATISTICS``). The estimator's closed loop
    predicts means; the planner applies any statistic to rate targets (its queueing model)."""

    ttft_s: float = option(2.0, kind="positive_float", flag="--ttft-slo", help="the TTFT SLO, seconds (default 2)")
    tpot_s: float = option(0.1, kind="positive_float", flag="--tpot-slo", help="the TPOT SLO, seconds (default 0.1)")
    statistic: str = option("mean", flag="--stat", choices=STATISTICS, help="the statistic both SLOs apply to")

    def __post_init__(self) -> None:
        for name in ("ttft_s", "tpot_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not (isinstance(v, (int, float)) and v > 0 and np.isfinite(v)):
                raise ValueError(f"{name.replace('_s', '_slo_s')} must be a positive number, got {v!r}")
        if self.statistic not in STATISTICS:
            raise ValueError(f"stat must be one of {', '.join(STATISTICS)}, got {self.statistic!r}")

    def __str__(self) -> str:
        return f"{self.statistic} TTFT <= {self.ttft_s:g} s, TPOT <= {self.tpot_s * 1e3:g} ms"


@dataclass(frozen=True)
class OperatingPoint:
    """Where the speed is evaluated: ``concurrency`` requests kept in flight (closed loop), or
    ``request_rate`` arrivals per second (open loop), both across all replicas; neither: at the
    recommended concurrency."""

    concurrency: float | None = None
    request_rate: float | None = None

    def __post_init__(self) -> None:
        if self.concurrency is not None and self.request_rate is not None:
            raise ValueError("give concurrency (closed loop) or request_rate (open loop), not both")
        if self.concurrency is not None and not self.concurrency > 0:
            raise ValueError(f"concurrency must be positive, got {self.concurrency}")
        if self.request_rate is not None and not self.request_rate > 0:
            raise ValueError(f"request_rate must be positive, got {self.request_rate}")
