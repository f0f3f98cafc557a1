"""The efficiency coefficients the calibration fits, with their bounds and sources, and each
engine's front end. (The knobs a user sets on the engine's command line, with each engine's
defaults, are ``gpucap.config.EngineConfig``.) ``Coefficients`` holds the efficiencies of the roofline step time; they are
applied in exactly one place (``gpucap.physics.steptime.step_time``) and are what ``calibrate`` fits.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpucap.config import EngineConfig
from gpucap.textfiles import read_json
from gpucap.types import ENGINES
from gpucap.units import MS

MAX_COEFFICIENTS_BYTES = 1 << 20


@dataclass(frozen=True)
class Coefficient:
    value: float
    lower: float
    upper: float
    source: str


# Each efficiency: default, physical bounds, and where the default comes from.
COEFFICIENT_INFO: dict[str, Coefficient] = {
    "u_compute": Coefficient(
        0.50,
        0.05,
        1.0,
        "share of dense tensor-core peak reached by a serving step's matmuls and attention; "
        "the default, half of peak, is an assumption inside the range measured on GPUs "
        "(data/coefficient-ranges.csv: 0.30, FlashAttention-2's share of H100's peak, to 0.86, the best "
        "BF16 matmul on A100), checked only through benchmarks/accuracy.py",
    ),
    "u_hbm": Coefficient(
        0.80,
        0.3,
        1.0,
        "share of datasheet HBM bandwidth reached when streaming weights and KV (assumption: below "
        "what a plain copy kernel reaches, since decode GEMV and paged attention are not copies)",
    ),
    "u_link": Coefficient(
        0.70,
        0.1,
        1.0,
        "share of per-direction link bandwidth reached by NCCL all-reduce bus bandwidth "
        "(assumption; calibrate it on runs with tensor parallelism)",
    ),
    "overlap": Coefficient(
        0.0,
        0.0,
        1.0,
        "share of communication hidden under compute; none unless the engine overlaps",
    ),
    "t_seq_s": Coefficient(
        0.0,
        0.0,
        5e-3,
        "time per running sequence per step that the step waits for (scheduling, input preparation, "
        "each new token's bookkeeping): what makes small models at batch 1000+ slower than their GPU "
        "work; 0 here, each engine's own in ENGINE_COEFFICIENTS (vLLM's measured, 24 us)",
    ),
    "t_layer_s": Coefficient(
        10e-6,
        0.0,
        5e-3,
        "device time per layer per step beyond the rooflines: a decoder layer is 10-14 kernels, and "
        "back-to-back kernels of a CUDA graph run about 0.5-1 us apart (NVIDIA, 'Getting Started "
        "with CUDA Graphs': 3.4 us per 2.9-us kernel in a graph); on a CPU, eager operator dispatch",
    ),
    "t_request_s": Coefficient(
        0.0,
        0.0,
        0.1,
        "serial CPU time per request in the HTTP server (parsing, tokenizing, detokenizing and "
        "streaming its output): the server shares one core among the requests it holds, so it "
        "passes at most 1 / t_request_s requests/s (the 'host' limit)",
    ),
    "t_frontend_s": Coefficient(
        0.0,
        0.0,
        0.5,
        "latency per request outside the engine that holds no shared resource (HTTP round trip, "
        "request set-up, first streamed chunk): added to TTFT and end-to-end latency",
    ),
    "t_overhead_s": Coefficient(
        2.0 * MS,
        0.0,
        50.0 * MS,
        "per-step time outside GPU kernels (scheduling, sampling, launch gaps) with CUDA graphs on",
    ),
}

# Per-engine starting points. The HTTP server's terms were measured on vLLM 0.32's own server
# (benchmarks/README.md, "The host beside the engine"): 512 requests of one prompt token and
# one output token sent at once take 4.3 ms each of serial server time (t_request_s 4 ms), and
# a lone request's TTFT exceeds its engine step by ~10 ms (t_frontend_s 10 ms). SGLang's and
# trtllm-serve's servers are also Python HTTP servers and are given the same two numbers (an
# assumption); trtllm-bench and other offline runs have no server (EngineConfig.front_end).
# Per-step host time: a few ms of scheduling and sampling per step in vLLM and SGLang, 0.5 ms in
# TensorRT-LLM's C++ runtime. Per running sequence: vLLM 24 us, measured on vLLM 0.32's own
# engine loop on this project's reference CPU (22 and 25 us in two runs of
# benchmarks/e2e/host_per_seq.py: scheduling, input preparation and each new token's
# bookkeeping, with models too small for their own work to count; benchmarks/README.md, "The
# engine's host time per sequence"), taken to be the same on a GPU server's host core (an
# assumption); SGLang ~10 us and TensorRT-LLM 5 us are assumptions.
HTTP_FRONT_END = {"t_request_s": 4.0 * MS, "t_frontend_s": 10.0 * MS}
ENGINE_COEFFICIENTS: dict[str, dict[str, float]] = {
    "vllm": {"t_overhead_s": 2.0 * MS, "t_seq_s": 24e-6, **HTTP_FRONT_END},
    "sglang": {"t_overhead_s": 1.5 * MS, "t_seq_s": 10e-6, **HTTP_FRONT_END},
    "trtllm": {"u_hbm": 0.85, "t_overhead_s": 0.5 * MS, "t_seq_s": 5e-6, **HTTP_FRONT_END},
}

# Extra launch time per layer per step when CUDA graphs are off (enforce_eager): ~10 kernels a
# layer at ~5 us each.
EAGER_LAUNCH_S_PER_LAYER = 50e-6


@dataclass(frozen=True)
class Coefficients:
    """Efficiency coefficients of the step-time roofline (DESIGN.md section 4)."""

    u_compute: float = COEFFICIENT_INFO["u_compute"].value
    u_hbm: float = COEFFICIENT_INFO["u_hbm"].value
    u_link: float = COEFFICIENT_INFO["u_link"].value
    overlap: float = COEFFICIENT_INFO["overlap"].value
    t_overhead_s: float = COEFFICIENT_INFO["t_overhead_s"].value
    t_request_s: float = COEFFICIENT_INFO["t_request_s"].value
    t_frontend_s: float = COEFFICIENT_INFO["t_frontend_s"].value
    t_seq_s: float = COEFFICIENT_INFO["t_seq_s"].value
    t_layer_s: float = COEFFICIENT_INFO["t_layer_s"].value

    def __post_init__(self) -> None:
        for name, info in COEFFICIENT_INFO.items():
            v = getattr(self, name)
            if not info.lower <= v <= info.upper:
                raise ValueError(f"coefficient {name}={v} outside its bounds [{info.lower}, {info.upper}]")

    @classmethod
    def for_engine(cls, engine: str) -> Coefficients:
        if engine not in ENGINE_COEFFICIENTS:
            raise ValueError(f"unknown engine {engine!r}; use one of {', '.join(ENGINES)}")
        return cls(**ENGINE_COEFFICIENTS[engine])

    def as_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)

    @classmethod
    def resolve(cls, given: Coefficients | str | Path | None, engine: str) -> Coefficients:
        """What a caller's ``coefficients`` argument stands for: the object given, a calibration
        file read for ``engine`` (``from_file``), or ``engine``'s defaults when None."""
        if isinstance(given, (str, Path)):
            return cls.from_file(given, engine)
        return given or cls.for_engine(engine)

    @classmethod
    def from_file(cls, path: str | Path, engine: str | None = None) -> Coefficients:
        """Load coefficients from a calibration JSON (``{"coefficients": {name: value|{value}}}``)
        or a flat ``{name: value}`` object. A coefficient the file does not name keeps
        ``engine``'s default (the generic default without an engine). Each value must be a
        finite number within the coefficient's bounds."""
        path = Path(path)
        data: Any = read_json(path, "coefficients file", MAX_COEFFICIENTS_BYTES)
        data = data.get("coefficients", data) if isinstance(data, dict) else data
        if not isinstance(data, dict):
            raise ValueError(f"coefficients file {path}: expected a JSON object of coefficient values")
        values: dict[str, float] = {}
        for name, v in data.items():
            if name not in COEFFICIENT_INFO:
                raise ValueError(
                    f"coefficients file {path}: unknown coefficient {name!r}; known: {', '.join(COEFFICIENT_INFO)}"
                )
            v = v.get("value") if isinstance(v, dict) else v
            info = COEFFICIENT_INFO[name]
            try:
                x = float(v) if isinstance(v, int | float) and not isinstance(v, bool) else math.nan
            except OverflowError:
                x = math.nan
            if not math.isfinite(x):
                raise ValueError(f"coefficients file {path}: {name} is {str(v)[:40]!r}, not a finite number")
            if not info.lower <= x <= info.upper:
                raise ValueError(
                    f"coefficients file {path}: {name} = {x:g} is outside its physical range "
                    f"[{info.lower:g}, {info.upper:g}]"
                )
            values[name] = x
        base = cls.for_engine(engine).as_dict() if engine else {}
        return cls(**{**base, **values})


@dataclass(frozen=True)
class FrontEnd:
    """What the HTTP server adds to every request (zero for offline runs): a pure latency, and
    serial CPU time that the server's one core shares among the requests it holds."""

    latency_s: float
    serial_s: float

    @property
    def max_rate_per_s(self) -> float:
        """Requests/s the server passes at most: ``1 / serial_s`` (inf without a front end)."""
        return 1.0 / self.serial_s if self.serial_s > 0 else float("inf")


def front_end(engine: EngineConfig, coef: Coefficients) -> FrontEnd:
    """The front end of ``engine`` with ``coef``'s ``t_frontend_s`` and ``t_request_s``; none when
    requests are handed to the engine in-process (``front_end="offline"``)."""
    if engine.front_end == "offline":
        return FrontEnd(0.0, 0.0)
    return FrontEnd(coef.t_frontend_s, coef.t_request_s)
