"""What a vLLM start-up log says about memory, and how gpucap's breakdown compares.

vLLM logs, per GPU, the weights it loaded ("Model loading took W GiB", "Loading model weights
took W GB" in V0, which divides by 2^30 too), the KV cache it was left ("Available KV cache memory:
K GiB"; V0: "the rest of the memory reserved for KV Cache is K GiB", "kv_cache_size=K GiB",
"available_kv_cache_memory K GiB"), the tokens that holds ("GPU KV cache size: N tokens"), and in
some versions the rest of the breakdown: the total and the utilization ("total_gpu_memory (T GiB)
x gpu_memory_utilization (u)", "Desired GPU memory utilization is (u, R GiB)" with "Free memory on
device (F/T GiB)"), the activation peak, the non-torch memory and the CUDA-graph estimate ("Actual
usage is W GiB for weight, A GiB for peak activation, N GiB for non-torch memory, and C GiB for
CUDAGraph memory"; from 0.27 "X GiB for consumed memory (weights + non-torch)"). Which of these a version prints, and at which level, is in
``data/memory/README.md``.

With tensor parallelism every worker logs its own lines; vLLM sizes the KV cache by the smallest
worker's budget, so the smallest KV figure and the largest weight figure are kept.

``estimate --startup-log`` reads a log, gives gpucap the logged KV budget (as vLLM's
``--kv-cache-memory`` would) and prints each term against gpucap's, with the sampler and MoE
kernel the log shows (model runner, FlashInfer and Marlin lines) unless they are given.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpucap.physics.memory import MemoryBreakdown
from gpucap.textfiles import read_text
from gpucap.units import GiB

MAX_LOG_BYTES = 64 << 20  # a vLLM start-up log is a few hundred KiB; 64 MiB is a whole day's server log

_NUM = r"(-?\d[\d,]*(?:\.\d+)?)"
# (field, pattern): the first group is the number. Of several lines for a field the largest wins,
# but for the KV cache's figures the smallest (module docstring).
_SMALLEST_WINS = {"kv_gib", "kv_tokens"}
_PATTERNS: tuple[tuple[str, str], ...] = (
    ("weights_gib", rf"Model loading took {_NUM} ?GiB"),
    ("weights_gib", rf"Loading model weights took {_NUM} ?GB"),
    ("weights_gib", rf"model weights take {_NUM} ?GiB"),
    ("weights_gib", rf"Actual usage is {_NUM} ?GiB for weight"),
    ("kv_gib", rf"Available KV cache memory: {_NUM} ?GiB"),
    ("kv_gib", rf"reserved for KV Cache is {_NUM} ?GiB"),
    ("kv_gib", rf"kv_cache_size={_NUM} ?GiB"),
    ("kv_gib", rf"available_kv_cache_memory\s+{_NUM} ?GiB"),
    ("kv_tokens", rf"GPU KV cache size: {_NUM} tokens"),
    ("total_gib", rf"total_gpu_memory[\s=(]*{_NUM} ?GiB"),
    ("total_gib", rf"Free memory on device \({_NUM}/{_NUM} GiB\)"),
    ("utilization", rf"gpu_memory_utilization['\"]?[\s:=(]*{_NUM}"),
    ("utilization", rf"Desired GPU memory utilization is \({_NUM},"),
    ("activation_gib", rf"{_NUM} ?GiB for peak activation"),
    ("activation_gib", rf"PyTorch activation peak memory(?: takes)?\s+{_NUM} ?GiB"),
    ("non_torch_gib", rf"{_NUM} ?GiB for non-torch memory"),
    ("non_torch_gib", rf"non_torch_memory(?: takes)?[\s=]*{_NUM} ?GiB"),
    ("graphs_gib", rf"{_NUM} ?GiB for CUDAGraph memory"),
    ("consumed_gib", rf"Actual usage is {_NUM} ?GiB for consumed memory"),
)

# (field, pattern, value): settings a log shows by its lines; the first pattern found wins. The V2
# model runner logs from ``model_runner.py`` (V1: ``gpu_model_runner.py``) and samples its dummy
# requests without top-k or top-p, whatever sampler it has (EngineConfig.sampler).
_SETTINGS: tuple[tuple[str, str, str], ...] = (
    ("sampler", r"Using V2 Model Runner|[\[/]model_runner\.py:\d+\]", "logits"),
    ("sampler", r"FlashInfer is not available\. Falling back to the PyTorch-native implementation", "sort"),
    ("sampler", r"Using FlashInfer for top-p & top-k sampling", "in-place"),
    ("moe_backend", r"leveraging the Marlin kernel|Using Marlin backend", "marlin"),
    ("moe_backend", r"\[mxfp4\.py:\d+\] Using Triton backend", "triton"),
)


@dataclass(frozen=True)
class StartupMemory:
    """Per-GPU memory figures one vLLM start-up logged (GiB; None where the log does not say)."""

    source: str
    weights_gib: float | None = None
    kv_gib: float | None = None
    kv_tokens: float | None = None
    total_gib: float | None = None
    utilization: float | None = None
    activation_gib: float | None = None
    non_torch_gib: float | None = None
    graphs_gib: float | None = None
    consumed_gib: float | None = None  # weights and non-torch memory together (vLLM 0.27+)
    sampler: str | None = None  # how its sampler ran at start-up, where the log shows it (_SETTINGS)
    moe_backend: str | None = None  # the MXFP4 MoE kernel the log names

    @property
    def non_torch(self) -> float | None:
        """Non-torch memory: logged, or (0.27+) what the consumed memory holds beyond the weights."""
        if self.non_torch_gib is not None:
            return self.non_torch_gib
        if self.consumed_gib is not None and self.weights_gib is not None:
            return self.consumed_gib - self.weights_gib
        return None

    @property
    def rest_gib(self) -> float | None:
        """What the budget left for activations, non-torch memory and graphs: ``u x total -
        weights - KV`` (None unless the log gives all four)."""
        if None in (self.utilization, self.total_gib, self.weights_gib, self.kv_gib):
            return None
        return self.utilization * self.total_gib - self.weights_gib - self.kv_gib  # type: ignore[operator]


def parse_startup_log(text: str, source: str = "<text>") -> StartupMemory:
    """The memory figures in a vLLM start-up log's text (``StartupMemory``); raises ValueError,
    naming ``source``, when it holds neither the weights nor the KV cache lines."""
    text = re.sub(r"[ \t]+", " ", text)
    found: dict[str, Any] = {}  # StartupMemory field -> the figure the log gives
    for name, pattern in _PATTERNS:
        for match in re.finditer(pattern, text):
            raw = match.group(match.lastindex or 1) if name == "total_gib" else match.group(1)
            value = float(raw.replace(",", ""))
            old = found.get(name)
            if old is None:
                found[name] = value
            else:
                found[name] = min(old, value) if name in _SMALLEST_WINS else max(old, value)
    if "weights_gib" not in found and "kv_gib" not in found:
        raise ValueError(
            f"{source}: no vLLM memory lines found (looked for 'Model loading took ... GiB' and "
            "'Available KV cache memory: ... GiB'); pass the log of a vLLM start-up, from its first "
            "line to 'Application startup complete'"
        )
    settings: dict[str, Any] = {}
    for name, pattern, setting in _SETTINGS:
        if name not in settings and re.search(pattern, text):
            settings[name] = setting
    return StartupMemory(source=source, **found, **settings)


def read_startup_log(path: str | Path) -> StartupMemory:
    """``parse_startup_log`` of a file; a missing or unreadable file is named in the error."""
    p = Path(path)
    return parse_startup_log(read_text(p, "start-up log", MAX_LOG_BYTES), str(p))


def compare_text(logged: StartupMemory, mem: MemoryBreakdown) -> str:
    """Each memory term per GPU, logged against gpucap's (GiB), and the logged KV budget."""
    rows = [
        ("weights", logged.weights_gib, mem.weights.total / GiB),
        ("peak activation", logged.activation_gib, mem.activations / GiB),
        ("non-torch", logged.non_torch, mem.runtime_overhead / GiB),
        ("CUDA graphs", logged.graphs_gib, mem.cuda_graphs / GiB),
        ("rest (u x total - weights - KV)", logged.rest_gib, mem.reserved / GiB),
    ]
    lines = [f"memory per GPU against {logged.source} (GiB): logged / gpucap"]
    for name, got, ours in rows:
        shown = "not logged" if got is None else f"{got:.2f}"
        lines.append(f"  {name:<32} {shown:>10} / {ours:.2f}")
    if logged.kv_gib is not None:
        lines.append(f"  {'KV cache (used as the budget)':<32} {logged.kv_gib:>10.2f}")
    return "\n".join(lines)
